"""What the activations, the worker, the sweeper and the Engine share in one process."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import socket
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Iterable, Iterator

from flowli.domain import Actor, Code, Entry, Principal, Provenance, Site, new_eid
from flowli.log import Bucket
from flowli.store import Announcement, Intent, Store, Write

from ._clock import Clock
from ._handoff import Polls
from ._registry import Registry
from ._tracing import Tracing

log = logging.getLogger("flowli.engine")


SWEEPER = Principal("sweeper", "system", trusted=True)
"""The principal of the sweeper's transitions (fired timers, recoveries, retention)."""

ANNOUNCE_DELAY = 0.05
"""Seconds that lifecycle entries wait to go to the control log together (the second append)."""


@dataclass(frozen=True)
class Options:
    """Tuning of an engine. The defaults suit production; tests shorten them."""

    lease_ttl: timedelta = timedelta(seconds=30)
    """How long a lease lasts without renewal; a dead worker's executions recover after it."""
    task_ttl: timedelta = timedelta(seconds=30)
    """How long a dequeued task stays invisible to other workers."""
    poll_interval: float = 0.5
    """Seconds between polls of the store when idle (other processes enqueue unseen)."""
    sweep_interval: float = 1.0
    schedule_interval: float = 1.0
    """How often a worker with a sweeper looks for due schedules (a firing is at most this late)."""
    """Seconds between sweeps at most; due timers wake the sweeper sooner."""
    repair_grace: timedelta = timedelta(seconds=5)
    """How old a lifecycle entry missing from the control log must be before the sweeper repairs it."""
    retention: timedelta = timedelta(days=30)
    """How long after it finished an execution keeps its live state before it is archived."""
    retention_interval: float = 3600.0
    """Seconds between retention passes (each worker's sweeper runs them)."""
    grace: float = 30.0
    """Seconds a stopping worker (SIGTERM, Ctrl-C, the end of ``engine.worker()``) waits for the
    steps under way to finish; each execution is handed back at its next frame, and what still
    runs after the grace is handed back as it is."""
    delegate_expiries: int = 3
    """How many times the leases of a DELEGATE frame's attempts may expire (a consumer that died or
    stalled) before the frame fails with LEASE_EXPIRED: a poison task cannot loop forever."""
    bucket: str = "flowli-bucket"
    """The directory of evidence (attempt logs, attachments); ``flowli.connect`` puts it beside a
    SQLite file."""


WORK = ("work",)
"""The hub's key of "a task may be visible now" from elsewhere (another process, a delayed task
whose instant came); ``("queue", name)`` is a task enqueued on one queue by this process."""
LOG = ("log",)
"""The hub's key of the control log; ``("journal", eid)`` and ``("end", eid)`` are an execution's."""


class Hub:
    """In-process wake-ups: who waits for a change subscribes an event under a key; whatever
    commits the change touches the key. No polling, no store read to learn that nothing changed."""

    def __init__(self) -> None:
        self._events: dict[tuple[str, ...], set[asyncio.Event]] = {}

    @contextlib.contextmanager
    def subscribe(self, *keys: tuple[str, ...]) -> Iterator[asyncio.Event]:
        event = asyncio.Event()
        for key in keys:
            self._events.setdefault(key, set()).add(event)
        try:
            yield event
        finally:
            for key in keys:
                waiting = self._events.get(key)
                if waiting is not None:
                    waiting.discard(event)
                    if not waiting:
                        del self._events[key]

    @property
    def active(self) -> bool:
        """Whether anyone waits (the hot path skips its touches otherwise)."""
        return bool(self._events)

    def touch(self, key: tuple[str, ...]) -> None:
        for event in self._events.get(key, ()):
            event.set()

    def touch_some(self, key: tuple[str, ...], n: int) -> None:
        """Wake up to ``n`` of those who wait under ``key`` (n tasks were enqueued: one consumer
        each, not a herd that all race for them)."""
        for event in self._events.get(key, ()):
            if n <= 0:
                return
            if not event.is_set():
                event.set()
                n -= 1

    def touch_all(self) -> None:
        for waiting in self._events.values():
            for event in waiting:
                event.set()


@dataclass
class Stats:
    """Counters of one engine's process, read by ``flowli.metrics`` at each scrape."""

    attempts: collections.Counter[str] = field(default_factory=collections.Counter)
    """Step attempts run in this process, by workflow."""
    failures: collections.Counter[str] = field(default_factory=collections.Counter)
    """Step attempts that failed, by workflow."""
    recoveries: int = 0
    """Executions whose expired lease this process's sweeper recovered."""
    sweeps: int = 0
    timer_lag: float = 0.0
    """Seconds between the due instant of the latest timer the sweeper fired and its firing."""


class Runtime:
    """The store, registry and clock of one process, and its in-process wake-ups."""

    def __init__(self, store: Store, registry: Registry, clock: Clock, options: Options):
        self.store = store
        self.registry = registry
        self.clock = clock
        self.options = options
        self.bucket = Bucket(options.bucket)
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.owner = f"{self.host}:{self.pid}:{new_eid()[-12:]}"
        self.work = asyncio.Event()
        """Set when a task may be visible now: this process enqueued one, another one notified
        (PostgreSQL), or the sweeper's planned instant came (a delayed task)."""
        self.timers = asyncio.Event()
        """Set when this process set a timer or a delayed task due before the sweeper's next wake,
        or another process notified a timer: the sweeper plans its wake again."""
        self.planned_wake: datetime | None = None
        """When the sweeper of this process wakes next; None while it sweeps."""
        self.hub = Hub()
        """The in-process wake-ups of those who wait for a change (``engine.result``, ``engine.watch``)."""
        store.subscribe(self._notified)
        self.announcing: set[asyncio.Future[None]] = set()
        self._unsent: list[Entry] = []
        self._flush: asyncio.TimerHandle | None = None
        self.middleware: list[Any] = []
        self.middleware_kinds: dict[Any, frozenset[str]] = {}
        """The transition kinds a middleware registered with ``kinds`` sees (the others: all)."""
        """``engine.use``: the chain every transition but the fast lane's appends passes."""
        self.tracing: Tracing | None = None
        """OpenTelemetry spans of executions, activations and attempts; None when off."""
        self.stats = Stats()
        """What this process did, counted for the metrics (plain counters: no cost to speak of)."""
        self.observers: list[Any] = []
        """``engine.observe``: called after every commit, appends included."""
        self.principal = Principal(self.owner, "worker", trusted=True)  # the engine's own actor
        """The principal of what this process's workers and sweeper do on their own."""
        self.polls = Polls()
        """The long polls of this process's consumers (see ``_handoff``)."""
        self.nacking: set[asyncio.Future[Any]] = set()
        """Hand-offs whose poll went away, being given back to the queue."""
        self.deciding: dict[str, list[Any]] = {}
        """Per decider execution, the commands of this process being decided: [lock, users]. The
        commands of one process take turns (several children ending at once would otherwise race
        on the state's version and be decided again); other processes are fenced by the version."""
        self.decided_last: dict[str, tuple[Any, int, Any]] = {}
        """Per decider execution that this process advanced last: its record after that write,
        its state's version and the state (see ``_deciding.apply``). The next command starts
        from the record instead of reading it again, and reads the stored version only: the state
        is decoded again only when another process advanced it (and the state's compare-and-set
        refuses a write made on a stale record)."""
        self.workers: list[Any] = []
        """The running workers of this process's engine: a start or an answer made here hands its
        execution to one with a free slot (``Worker.reserve``), without the queue."""

    def nack_handed(self, task: Any, owner: str) -> None:
        """Give a task handed to a poll that went away (see ``_handoff``) back to its queue,
        visible at once rather than when its lease runs out, in the background."""
        back = asyncio.ensure_future(self.store.nack(task.id, owner, timedelta(0), self.clock.now()))
        self.nacking.add(back)

        def done(fut: asyncio.Future[Any]) -> None:
            self.nacking.discard(fut)
            if not fut.cancelled() and fut.exception() is not None:  # its lease runs out instead
                log.warning("a task handed to a poll that went away was not given back: %s", fut.exception())

        back.add_done_callback(done)

    def _notified(self, what: str) -> None:
        """Another process enqueued a task ("work"), set a timer ("timer"), appended to the control
        log ("log"), ended executions ("end:{eid},{eid}..."), or appended to the journal of a watched
        execution ("journal:{eid}"). "timer" is also what a backend says when it may have missed
        notifications: then everyone looks again."""
        if what == "work" or what == "timer":
            self.work.set()
            self.hub.touch(WORK)
            if what == "timer":
                self.timers.set()
                self.hub.touch_all()
        elif what == "log":
            self.hub.touch(LOG)
        elif what.startswith("end:"):
            for eid in what[4:].split(","):
                self.hub.touch(("end", eid))
        elif what.startswith("journal:"):
            self.hub.touch(("journal", what[8:]))

    def timer_set(self, at: datetime) -> None:
        """A timer was set for ``at``, or a task enqueued that becomes visible then: poke the sweeper if it
        would wake later than that."""
        if self.planned_wake is None or at < self.planned_wake:
            self.timers.set()

    def provenance(
        self,
        *,
        actor: Actor | None = None,
        epoch: int | None = None,
        code: Code | None = None,
        attempt: int | None = None,
        on_behalf_of: str | None = None,
        at: datetime | None = None,
    ) -> Provenance:
        return Provenance(
            actor=actor or Actor("worker", self.owner),
            site=Site(host=self.host, pid=self.pid, worker=self.owner, epoch=epoch),
            code=code or Code(),
            at=at or self.clock.now(),
            attempt=attempt,
            on_behalf_of=on_behalf_of,
        )

    def announce_soon(self, entries: Iterable[Entry]) -> None:
        """The second append, off the caller's path: the entries of the next ANNOUNCE_DELAY seconds
        go to the control log together, in one write queued after theirs (a store applies the
        writes of one execution in order), and the caller does not wait for its commit. A crash
        before it commits is what the sweeper repairs. ``drain`` flushes and waits."""
        entries = [e for e in entries if e.kind.lifecycle]
        if not entries:
            return
        self._unsent.extend(entries)
        if self._flush is None:
            self._flush = asyncio.get_running_loop().call_later(ANNOUNCE_DELAY, self._send_announcements)

    def _send_announcements(self) -> None:
        self._flush = None
        entries, self._unsent = self._unsent, []
        if entries:
            task = asyncio.ensure_future(self.announce(entries))
            self.announcing.add(task)
            task.add_done_callback(self._announced)

    def _announced(self, task: asyncio.Future[None]) -> None:
        self.announcing.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("control-log append failed (the sweeper repairs it): %s", task.exception())

    async def drain(self) -> None:
        """Wait until the control-log appends of this process are done."""
        if self._flush is not None:
            self._flush.cancel()
            self._send_announcements()
        while self.announcing:
            await asyncio.wait(list(self.announcing))

    async def announce(self, entries: Iterable[Entry]) -> None:
        """The second append: lifecycle journal entries onto the control log. A crash before it
        is repaired by the sweeper; a repeat is ignored (the control log is keyed by journal seq)."""
        announcements = [
            Announcement(Entry(**{**e.__dict__, "journal_seq": e.seq, "seq": None}))
            for e in entries
            if e.kind.lifecycle and e.seq is not None
        ]
        if announcements:
            await self.store.write(Write(intent=Intent.ANNOUNCE, announcements=announcements), self.clock.now())
            self.hub.touch(LOG)

    def ended_execution(self, eid: str) -> None:
        self.hub.touch(("end", eid))


def entries_with_seqs(entries: list[Entry], seqs: list[int]) -> list[Entry]:
    return [Entry(**{**e.__dict__, "seq": s}) for e, s in zip(entries, seqs)]
