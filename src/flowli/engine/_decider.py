"""Deciders: the declarative form of a workflow, a registered and versioned pair of pure
functions (the event-sourcing "decider"):

    decide(state, command) -> (events, effects)
    evolve(state, event) -> state

A command is what reaches the execution (its start, a DELEGATE answer or failure, a lease
expiry, a signal, a timer, a child's end, a cancel request). The events are journaled (the
execution's history speaks the decider's own words); folding them with ``evolve`` from
``initial`` gives the state, which the engine stores beside the execution and advances in the
write of the command, fenced by its version. The effects are the engine's own: DELEGATE tasks,
timers, child executions, the end. No coroutine runs and nothing is replayed, so the cost of a
command does not grow with the length of the run.

This module holds the pure part (the types, the fold, the frame ids an effect gets); applying a
command to an execution is ``_deciding``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from flowli.domain import Entry, EntryKind, RegistrationError, dumps, loads

ROOT = "decider"
"""The frame id under which a decider's effects get theirs: ``decider/charge`` for a DELEGATE of
key ``charge``, ``decider/timer:retry`` for a timer, ``decider/child:ship`` for a child. A
workflow's frames are under ``root``: a RESUME (a fired timer, a child's end) for an id under
this one is a decider's command."""

DECIDER_TASK: dict[str, Any] = {"decider": True}
"""The payload mark of a START or RESUME task that carries a command to a decider (its start, a
fired timer of one of its frames, the end of a child it started): a worker applies it with
``_deciding.handle`` instead of acquiring the execution's lease and replaying it."""


def delegate_fid(key: str) -> str:
    return f"{ROOT}/{key}"


def timer_fid(key: str) -> str:
    return f"{ROOT}/timer:{key}"


def child_fid(key: str) -> str:
    return f"{ROOT}/child:{key}"


def decided(fid: str | None) -> bool:
    """Whether ``fid`` is the frame of a decider's effect (a timer, a child, a DELEGATE)."""
    return fid is not None and fid.startswith(ROOT + "/")


# ---- events ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """One fact a decider records: ``kind`` in its own words (``charge.dispatched``), ``data``
    JSON. Journaled as one entry of kind ``event`` (frame ``decider``) with the provenance of
    the command that decided it; ``evolve`` folds them."""

    kind: str
    data: Any = None


# ---- commands ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Start:
    """The execution starts with ``input`` (the one argument of ``engine.start``)."""

    input: Any
    at: str | None = None
    """The instant the engine applies the command (ISO 8601, set by the engine: decide reads no clock)."""


@dataclass(frozen=True)
class Answered:
    """A consumer answered attempt ``attempt`` of the DELEGATE ``key`` (a fenced answer: only
    the open attempt's holder gets here)."""

    key: str
    attempt: int
    value: Any
    by: str | None = None
    at: str | None = None
    """The instant the engine applies the command (ISO 8601, set by the engine: decide reads no clock)."""


@dataclass(frozen=True)
class Failed:
    """A consumer failed attempt ``attempt`` of the DELEGATE ``key``."""

    key: str
    attempt: int
    error_type: str
    message: str
    retryable: bool = True
    by: str | None = None
    details: Any = None
    """What the consumer said beside its error (``Consumer.fail(details=...)``), JSON."""
    at: str | None = None
    """The instant the engine applies the command (ISO 8601, set by the engine: decide reads no clock)."""


@dataclass(frozen=True)
class Expired:
    """The lease of the consumer holding attempt ``attempt`` of the DELEGATE ``key`` expired:
    the attempt is over (its task withdrawn, a late answer is stale)."""

    key: str
    attempt: int
    at: str | None = None
    """The instant the engine applies the command (ISO 8601, set by the engine: decide reads no clock)."""
    owner: str | None = None
    """The consumer whose lease expired (its ``worker_id``), when the task still names it."""


@dataclass(frozen=True)
class Signal:
    """A message on the execution's ``channel`` (``engine.signal``)."""

    channel: str
    payload: Any
    by: str | None = None
    at: str | None = None
    """The instant the engine applies the command (ISO 8601, set by the engine: decide reads no clock)."""


@dataclass(frozen=True)
class TimerFired:
    """The timer ``key`` (an effect ``Timer``) is due."""

    key: str
    at: str | None = None
    """The instant the engine applies the command (ISO 8601, set by the engine: decide reads no clock)."""


@dataclass(frozen=True)
class ChildEnded:
    """The child execution ``key`` ended: ``status`` completed, failed or cancelled."""

    key: str
    eid: str
    status: str
    result: Any = None
    error: dict[str, Any] | None = None
    at: str | None = None
    """The instant the engine applies the command (ISO 8601, set by the engine: decide reads no clock)."""


@dataclass(frozen=True)
class CancelRequested:
    """``engine.cancel``: the decider decides what a cancel means (usually the effect Cancel)."""

    by: str | None = None
    reason: str | None = None
    at: str | None = None
    """The instant the engine applies the command (ISO 8601, set by the engine: decide reads no clock)."""


@dataclass(frozen=True)
class Retried:
    """``engine.retry`` of the failed execution: it is reopened (suspended again) in the write
    of this command, after an ``execution.retried`` entry; the decider says how it goes on from
    its last good point (its effects: a fresh attempt of what failed, say). A decider that
    decides nothing leaves it suspended until its next command. ``engine.retry(eid,
    signal=(channel, payload))`` gives the retry a message: it is stored on the channel in the same
    write and reaches ``decide`` here (``channel``, ``payload``), say what a rerun reruns."""

    by: str | None = None
    reason: str | None = None
    channel: str | None = None
    payload: Any = None
    at: str | None = None
    """The instant the engine applies the command (ISO 8601, set by the engine: decide reads no clock)."""


@dataclass(frozen=True)
class Adopted:
    """The execution, run so far by version ``source`` of a Python workflow of the same name, is
    handed to this decider (``engine.adopt``) with the state its caller folded from that
    workflow's journal. The workflow's open work (its DELEGATE tasks, timers and waits) is
    withdrawn in the same write, so the decider says what runs again: the attempts that were
    open, as Delegates of its own."""

    source: str | None = None
    at: str | None = None
    """The instant the engine applies the command (ISO 8601, set by the engine: decide reads no clock)."""


Command = Start | Answered | Failed | Expired | Signal | TimerFired | ChildEnded | CancelRequested | Retried | Adopted

# ---- effects -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Delegate:
    """A DELEGATE task on ``queue``: attempt ``attempt`` of the work ``key``. A consumer dequeues
    it, renews its lease, answers or fails it; an expired lease ends the attempt. Another attempt
    is another Delegate of the same key with a higher attempt (the decider owns its retries)."""

    key: str
    queue: str
    payload: Any = None
    attempt: int = 1
    workers: bool = False
    """Its consumers are workers that say which queues they serve (a worker's bootstrap,
    ``Consumer.present``): ``explain`` then says when no live one serves ``queue``."""
    label: str | None = None
    """The work in its consumers' words (a pipeline's ``stage 'validate'``): ``explain`` says what
    waits with it instead of the frame and the queue."""
    served_by: str | None = None
    """What serves ``queue`` in its consumers' words (a pipeline's ``handler 'ValidateInvoiceHandler'``):
    ``explain`` says that no live worker serves it instead of naming the queue."""


@dataclass(frozen=True)
class Withdraw:
    """End attempt ``attempt`` of the DELEGATE ``key`` unanswered (a deadline passed, say): its
    task is withdrawn, so its consumer finds nothing and a late answer is stale."""

    key: str
    attempt: int = 1


@dataclass(frozen=True)
class Timer:
    """Fire ``TimerFired(key)`` at ``at``, or ``after`` the command's instant (decide stays pure:
    it reads no clock). A timer of the same key replaces it."""

    key: str
    at: datetime | None = None
    after: timedelta | None = None

    def instant(self, now: datetime) -> datetime:
        if (self.at is None) == (self.after is None):
            raise ValueError(f"Timer {self.key!r} takes one of at= and after=")
        return self.at if self.at is not None else now + self.after  # type: ignore[operator]


@dataclass(frozen=True)
class Child:
    """Start the child execution ``key`` of ``workflow`` (a workflow or a decider) with ``args``,
    on the parent's queue; its end comes back as ``ChildEnded(key, ...)``."""

    key: str
    workflow: str
    args: tuple[Any, ...] = ()
    version: str | None = None


@dataclass(frozen=True)
class Complete:
    """The execution ends completed with ``value``."""

    value: Any = None


@dataclass(frozen=True)
class Fail:
    """The execution ends failed."""

    message: str
    type: str = "DeciderFailed"


@dataclass(frozen=True)
class Cancel:
    """The execution ends cancelled (its open DELEGATE tasks withdrawn)."""

    reason: str | None = None


Effect = Delegate | Withdraw | Timer | Child | Complete | Fail | Cancel
END = (Complete, Fail, Cancel)

Decide = Callable[[Any, Any], tuple[Iterable[Event], Iterable[Effect]]]
Evolve = Callable[[Any, Event], Any]


@dataclass(frozen=True)
class Decider:
    """A registered decider: ``name`` and ``version`` as a workflow's, ``initial`` the state
    before any event (JSON; copied for each execution), ``decide`` and ``evolve`` pure."""

    name: str
    version: str
    initial: Any
    decide: Decide
    evolve: Evolve
    index: Callable[[Any], Index] | None = None
    """``index(state) -> Index``: what lists of its executions filter and order on, written
    with each state (``engine.decided`` reads pages of them); None: not listed."""
    shares: bool = False
    """``evolve`` never changes a state in place: it returns a new object, which shares the parts
    an event leaves as they were with the state before (a copy of the parts that change, as a
    frozen record's ``replace``). The engine then checks that the state is JSON only where the
    events of a command changed it, not the whole state at each command."""
    ref: str = field(init=False, repr=False, compare=False)
    """Where its ``decide`` is defined (``module:qualname``), as a journal entry's code names it."""
    _initial_text: str | None = field(init=False, repr=False, compare=False)
    """``initial`` as the store keeps it (None: not JSON), read back for each execution."""

    typed = False
    """As a workflow's: a decider's input reaches it as the journal holds it (JSON)."""

    def __post_init__(self) -> None:
        fn = self.decide
        object.__setattr__(self, "ref", f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}")
        try:
            text: str | None = dumps(self.initial)
        except (TypeError, ValueError):
            text = None  # not JSON: copied deeply (its first command fails on it)
        object.__setattr__(self, "_initial_text", text)

    def start_state(self) -> Any:
        """A fresh copy of ``initial``, in JSON's own types as a state read from the store (read
        from its JSON text: 0.7 µs for a pipeline's, where a deep copy took 6.6)."""
        text = self._initial_text
        return copy.deepcopy(self.initial) if text is None else loads(text)

    def fold(self, events: Iterable[Event], state: Any = None, *, start: bool = True) -> Any:
        """The state after ``events``, from ``initial`` (``start``) or from ``state``: what the
        engine stores, and what ``verify`` compares with the stored state."""
        out = self.start_state() if start else state
        for event in events:
            out = self.evolve(out, event)
        return out


@dataclass(frozen=True)
class Index:
    """What a list filters and orders a decider's executions on, from one state (see
    ``Decider.index``): a ``number`` the layer above gave it (lists are newest first by it), a
    ``label`` (a status in the decider's words), a ``name``, exact ``key:value`` ``tags``, the
    ``text`` a search matches (never a sensitive value), and how many decisions of a person it
    is ``waiting`` for (an inbox lists those above 0)."""

    number: int | None = None
    label: str | None = None
    name: str | None = None
    tags: tuple[str, ...] = ()
    text: str = ""
    waiting: int = 0


def check(name: str, version: str, initial: Any, decide: Any, evolve: Any) -> None:
    """Refuse a decider whose parts cannot work: a state that is not JSON, functions that are
    not callable, a coroutine function (a decider is pure and synchronous)."""
    import inspect

    if not isinstance(version, str) or not version:
        raise RegistrationError(f"decider {name!r}: version must be a non-empty string, got {version!r}")
    for part, fn in (("decide", decide), ("evolve", evolve)):
        if not callable(fn) or inspect.iscoroutinefunction(fn):
            raise RegistrationError(f"decider {name!r} version {version!r}: {part} must be a plain function"
                                    f" (pure, synchronous), got {fn!r}")
    try:
        json.dumps(initial)
    except (TypeError, ValueError) as exc:
        raise RegistrationError(f"decider {name!r} version {version!r}: its initial state is not JSON: {exc}") from None


def plain(state: Any) -> Any:
    """The state as the store gives it back (JSON): what is compared and what decide sees."""
    return json.loads(json.dumps(state))


def event_value(event: Event) -> dict[str, Any]:
    """The journal value of an event's entry (kind ``event``)."""
    return {"event": event.kind, "data": event.data}


def events_of(journal: Iterable[Entry]) -> list[Event]:
    """The events of a decider's journal, in order: what ``fold`` takes."""
    return [Event(e.value["event"], e.value.get("data")) for e in journal
            if e.kind is EntryKind.EVENT and isinstance(e.value, dict)]
