"""Applying a command to a decider's execution: one write, through the one transition path.

Each command is applied by reading the execution's record and its stored state (two reads
whatever the length of its journal), calling ``decide``, folding its events into the state with
``evolve``, and committing one ``Write`` that holds all of it: the command's own part (a signal's
message, the hold on a DELEGATE task being answered, the hold on the RESUME task that carried a
fired timer or a child's end), the events as journal entries with the command's provenance, the
effects (DELEGATE tasks, timers, children, the end), and the state's compare-and-set
(``Advance``: from the version read to the next). A concurrent command that advanced the state
first makes the store refuse the write with StaleState; the command is then decided again
against the fresh state: never lost, never applied twice.

Where commands come from:

- directly, in the caller's write: a start (``engine.start``: the write that creates the
  execution), a signal (``engine.signal``), a cancel request, a consumer's answer or failure
  (``Consumer``), the sweeper ending an attempt whose lease expired;
- through a task, for what the engine learns asynchronously: the START task of a decider child
  (started by its parent's command), the RESUME of a fired timer, the RESUME of a child's end. These tasks carry ``DECIDER_TASK``
  in their payload; a worker that dequeues one applies it here (``handle``) with a hold on it, so
  a worker that crashes before its write leaves the task to be dequeued again, and one whose
  task lease was taken over writes nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from flowli.domain import (
    TERMINAL,
    Actor,
    Code,
    Entry,
    EntryKind,
    ExecutionRecord,
    ExecutionStateError,
    Principal,
    StaleAnswer,
    StaleState,
    Status,
    Task,
    TaskKind,
    UnknownExecutionError,
    WorkflowArgumentsError,
    check_json,
    check_json_since,
    child_eid,
    dumps,
    keyed_eid,
    new_eid,
    principal_for,
    task_id,
)
from flowli.domain import Timer as StoreTimer
from flowli.store import (
    HELD,
    Advance,
    JournalFilter,
    NewExecution,
    NewItem,
    StateIndex,
    StatusChange,
    TaskHold,
    Withdrawal,
    Write,
    WriteResult,
)

from ._decider import (
    DECIDER_TASK,
    END,
    ROOT,
    Answered,
    Cancel,
    CancelRequested,
    Child,
    ChildEnded,
    Command,
    Complete,
    Decider,
    Delegate,
    Event,
    Expired,
    Fail,
    Failed,
    Start,
    Timer,
    TimerFired,
    Withdraw,
    child_fid,
    decided,
    delegate_fid,
    event_value,
    timer_fid,
)
from ._errors import error_data
from ._handoff import written_maybe
from ._runtime import Runtime, entries_with_seqs
from ._tracing import derived, execution_context, traceparent
from ._transitions import Transition, commit
from ._waits import new_execution

log = logging.getLogger("flowli.deciders")
NOT_TERMINAL = frozenset(Status) - TERMINAL
_TRIES = 100
"""Decisions of one command against a state that others keep advancing, before giving up."""


def carries_command(task: Task) -> bool:
    """Whether a START or RESUME task carries a command to a decider (see ``handle``)."""
    return isinstance(task.payload, dict) and task.payload.get("decider") is True


def child_end_payload(parent_fid: str | None, child: str) -> dict[str, Any] | None:
    """The payload of the RESUME that a child's end sends its parent: marked for a decider."""
    return {**DECIDER_TASK, "child": child} if decided(parent_fid) else None


def start_execution(rt: Runtime, decider: Decider, eid: str, args: list[Any], *, queue: str, key: str | None,
                    actor: Actor, application: str | None, parent: tuple[str, str] | None = None,
                    trace: dict[str, Any] | None = None) -> NewExecution:
    """The record, started entry and START task of a decider's execution; the START task carries
    the Start command to a worker, which decides it (a child started by its parent's command)."""
    new = new_execution(rt, decider, eid, args, queue=queue, key=key, actor=actor, application=application,
                        parent=parent, trace=trace)
    assert new.task is not None
    return dataclasses.replace(new, task=dataclasses.replace(new.task, payload=dict(DECIDER_TASK)))


async def start_decided(rt: Runtime, decider: Decider, args: tuple[Any, ...], *, by: Any, key: str | None, queue: str,
                        application: str | None, trace: dict[str, Any] | None = None,
                        items: tuple[NewItem, ...] = ()) -> tuple[str, ExecutionRecord | None]:
    """``engine.start`` of a decider: its execution with its Start command decided, and ``items``,
    in one write (``Write.creates``: a keyed start that finds its execution writes nothing).
    Returns the eid (a keyed start that finds its execution: the first one's) and the record
    this write stored, or None when it created nothing."""
    if len(args) > 1:
        raise WorkflowArgumentsError(decider.name, f"a decider takes one input, got {len(args)} arguments")
    json_args = check_json(list(args), f"the input of decider {decider.name!r}", "args")
    eid = keyed_eid(decider.name, key if application is None else f"{application}/{key}") if key is not None else new_eid()
    principal = principal_for(by, Actor("system", "engine"), application)
    new = new_execution(rt, decider, eid, json_args, queue=queue, key=key, actor=principal.actor,
                        application=application, trace=trace)
    new = dataclasses.replace(new, task=None, items=items)
    own = _kept_span(eid, new.entry.value) if rt.tracing is not None else None
    write = Write(executions=[new], creates=True)
    began = rt.clock.now()
    command = Start(json_args[0] if json_args else None)
    decide(rt, decider, new.record, decider.start_state(), 0, command, principal.actor, write, own)
    write.expect = None  # created by this very write
    direct = _direct_children(rt, write)
    handed = _hand_off(rt, write)
    try:
        result = await commit(rt, Transition("start", write, eid, decider.name, principal, application,
                                             {"args": json_args, "version": decider.version, "queue": queue, "key": key}))
    except BaseException as exc:
        _adopt(direct, write, None)
        _handed(rt, handed, None, exc)
        raise
    _adopt(direct, write, result)
    _handed(rt, handed, result if result.created[0] else None)
    if not result.created[0]:
        return eid, None
    stored = _remember(rt, new.record, write)
    if own is not None:
        _trace(rt, decider, new.record, (command,), 1, write, began, own)
    return eid, stored


def state_index(decider: Decider, record: ExecutionRecord, state: Any) -> StateIndex | None:
    """The index row of ``state`` (None for a decider that is not listed)."""
    if decider.index is None:
        return None
    got = decider.index(state)
    return StateIndex(decider=decider.name, application=record.application,
                      created_at=record.created_at.timestamp(), number=got.number, label=got.label, name=got.name,
                      tags=tuple(got.tags), text=got.text, waiting=got.waiting)


Base = Callable[[], Write]
"""The command's own part of the write, made afresh for each try."""


Joined = Callable[[Transition, int], Awaitable[WriteResult]]
"""Commits a decider's transition joined to the callers' own (``Transition.then``), those of the
first ``n`` commands (the ones the transition took), and answers the decider's part."""


async def apply(rt: Runtime, eid: str, command: Command, *, kind: str, base: Base, principal: Principal,
                payload: Any, record: ExecutionRecord | None = None, reopen: bool = False,
                joined: Joined | None = None) -> WriteResult | None:
    """Decide ``command`` for ``eid`` and commit it with ``base()`` in one write, fenced by the
    state's version; decided again on StaleState. None when the execution ended already (nothing
    written: the caller ends what it holds). Raises what the write raises otherwise (a
    middleware's refusal, StaleAnswer for a hold that is gone, ...). With ``reopen``, a failed
    execution takes the command too (a retry: ``base`` expects it failed). With ``joined``, the
    transition is committed by it, in the caller's own write."""
    if rt.turns.busy(eid):
        record = None  # read again once its turn comes: the commands before it change it
    async with rt.turns.turn(eid):
        return await apply_in_turn(rt, eid, (command,), kind=kind, base=base, principal=principal, payload=payload,
                                   record=record, reopen=reopen, joined=joined)


async def apply_in_turn(rt: Runtime, eid: str, commands: Sequence[Command], *, kind: str, base: Base,
                        principal: Principal, payload: Any, record: ExecutionRecord | None = None,
                        reopen: bool = False, joined: Joined | None = None) -> WriteResult | None:
    """``apply`` of ``commands`` in one write (see ``decide_all``), by a caller that holds the
    turn of ``eid`` (``rt.turns.turn``)."""
    for _ in range(_TRIES):
        # the record this process's last write left (see ``_turns``): no read of it when the
        # caller has none; the state's version fences a stale one
        known = rt.turns.last(eid)
        if record is None:
            record = known[0] if known is not None else await rt.store.read_execution(eid)
            if record is None:
                raise UnknownExecutionError(eid)
        if record.terminal and not (reopen and record.status is Status.FAILED):
            return None
        decider = rt.registry.decider_of(record.workflow, record.version)
        if decider is None:
            raise ValueError(f"execution {eid} runs {record.workflow} version {record.version}, not a decider")
        stored = await rt.store.read_state(eid, known[1] if known is not None else None)
        version, state = stored if stored is not None else (0, decider.start_state())
        if state is HELD:
            state = known[2]  # type: ignore[index]  # the state this process wrote last, still the stored one
        write = base()
        began = rt.clock.now()
        own = await execution_span(rt, eid) if rt.tracing is not None else None
        taken = decide_all(rt, decider, record, state, version, commands, principal.actor, write, own)
        direct = _direct_children(rt, write)
        handed = _hand_off(rt, write)
        try:
            t = Transition(kind, write, eid, record.workflow, principal, record.application, payload)
            result = await (commit(rt, t) if joined is None else joined(t, taken))
        except StaleState:
            _adopt(direct, write, None)
            _handed(rt, handed, None)
            rt.turns.forget(eid)
            record = None  # another command advanced it: decide again against the fresh state
            continue
        except BaseException as exc:
            _adopt(direct, write, None)
            _handed(rt, handed, None, exc)
            rt.turns.forget(eid)
            raise
        _adopt(direct, write, result)
        _handed(rt, handed, result)
        _remember(rt, record, write)
        if own is not None:
            _trace(rt, decider, record, commands[:taken], version + 1, write, began, own)
        return result
    raise StaleState(eid, -1)


def _direct_children(rt: Runtime, write: Write) -> list[tuple[int, Any]]:
    """The child workflows of ``write`` that a worker of this process with a free slot takes at
    once (a direct start, as ``engine.start``'s): each created leased to this process, with no
    START task, and the worker that reserved its slot. A decider child starts with its START."""
    direct: list[tuple[int, Any]] = []
    if not rt.slots:
        return direct
    now = rt.clock.now()
    for i, new in enumerate(write.executions):
        if new.task is None or carries_command(new.task):
            continue
        worker = rt.slots.reserve(new.record.queue)
        if worker is None:
            break
        leased = dataclasses.replace(new.record, status=Status.RUNNING, lease_owner=rt.owner, lease_epoch=1,
                                     lease_expires_at=now + rt.options.lease_ttl)
        write.executions[i] = dataclasses.replace(new, record=leased, task=None)
        direct.append((i, worker))
    return direct


def _adopt(direct: list[tuple[int, Any]], write: Write, result: WriteResult | None) -> None:
    """Hand each child started directly to the worker that reserved its slot (``result`` None:
    the write failed, the slots are given back)."""
    for i, worker in direct:
        new = write.executions[i]
        if result is not None and result.created[i]:
            worker.adopt(new.record, entries_with_seqs([new.entry], [1]))
        else:
            worker.unreserve()


def _hand_off(rt: Runtime, write: Write) -> list[tuple[Any, Task]]:
    """The DELEGATE tasks of ``write`` that a long poll of this process waits for, written leased
    to it (see ``_handoff``): each poll with its task."""
    handed: list[tuple[Any, Task]] = []
    if not rt.polls.waiting:
        return handed
    now = rt.clock.now()
    for i, task in enumerate(write.tasks):
        if task.kind is not TaskKind.DELEGATE:
            continue
        match = rt.polls.match(task, now)
        if match is not None:
            write.tasks[i] = match[1]
            handed.append(match)
    return handed


def _handed(rt: Runtime, handed: list[tuple[Any, Task]], result: WriteResult | None,
            error: BaseException | None = None) -> None:
    """Resolve the polls of ``_hand_off``: each gets its task, or None (it waits on) when the write
    failed; a poll that went away meanwhile gives its task back to the queue, and so does a write
    that raised ``error`` which may have stored it all the same (see ``_handoff``)."""
    for poll, task in handed:
        if result is None:
            if not poll.handed.done():
                poll.handed.set_result(None)
            if error is not None and written_maybe(error):
                rt.polls.nack(task, poll.owner)
        elif poll.handed.done():
            rt.polls.nack(task, poll.owner)
        else:
            poll.handed.set_result(task)


def _remember(rt: Runtime, record: ExecutionRecord, write: Write) -> ExecutionRecord:
    """Keep the record and the state that ``write`` left (``Runtime.turns``), or forget them
    when it ended the execution; the record it left."""
    eid, advance, change = record.eid, write.advance, write.status
    after = record if change is None else dataclasses.replace(
        record, status=change.status, result=change.result, error=change.error, blocked=change.blocked,
        version=change.version or record.version)
    if advance is None or (change is not None and change.status.terminal):
        rt.turns.forget(eid)
    else:
        rt.turns.remember(after, advance.version, advance.state)
    return after


def _trace(rt: Runtime, decider: Decider, record: ExecutionRecord, commands: Sequence[Command], version: int,
           write: Write, began: datetime, own: Any) -> None:
    """The spans of the commands of one write (tracing on): one ``decide`` span per command, a
    child of the execution's span ``own``, which is written when the execution ends (as a
    workflow's)."""
    tracing = rt.tracing
    assert tracing is not None
    attrs = {"flowli.eid": record.eid, "flowli.workflow": decider.name, "flowli.version": decider.version}
    now = rt.clock.now()
    for i, command in enumerate(commands):
        tracing.finish(f"decide {decider.name}", derived(own, "decide", record.eid, version, *([i] if i else [])),
                       own, {**attrs, "flowli.command": type(command).__name__, "flowli.state_version": version},
                       began, now)
    end = write.status
    if end is not None and end.status.terminal:
        error = None if end.status is Status.COMPLETED else (end.error or {}).get("message") or end.status.value
        tracing.finish(f"workflow {decider.name}", own, _parents.get(record.eid),
                       {**attrs, "flowli.status": end.status.value}, record.created_at, now, error=error)
        _spans.pop(record.eid, None)
        _parents.pop(record.eid, None)


_spans: dict[str, Any] = {}
_parents: dict[str, Any] = {}
"""The span context of a decider's execution (and of its parent span), read once per process
from its started entry (the trace it was started in: a caller's ``traceparent``, a pipeline's
``traceId``, else its eid's own); dropped when it ends here."""


async def execution_span(rt: Runtime, eid: str) -> Any:
    """The span context of a decider's execution ``eid``: of the trace its started entry recorded."""
    own = _spans.get(eid)
    if own is None:
        started, _ = await rt.store.read_journal_page(eid, JournalFilter(None, EntryKind.EXECUTION_STARTED.value, None),
                                                      None, 1)
        own = _kept_span(eid, started[0].value if started else None)
    return own


def _kept_span(eid: str, started: Any) -> Any:
    """The span context of ``eid`` from the value of its started entry, kept for its next commands."""
    own, parent = execution_context(eid, started)
    if len(_spans) > 10_000:
        _spans.clear()
        _parents.clear()
    _spans[eid] = own
    if parent is not None:
        _parents[eid] = parent
    return own


def decide(rt: Runtime, decider: Decider, record: ExecutionRecord, state: Any, version: int, command: Command,
           actor: Actor, write: Write, own: Any = None) -> None:
    """Fill ``write`` with what ``decider`` decides for ``command`` in ``state``: its events, its
    effects, the next state and its compare-and-set. A decide or evolve that raises (a defect of
    the decider's code) ends the execution failed with that error, journaled."""
    eid = record.eid
    now = rt.clock.now()
    code = Code(decider.name, decider.version, "decider", type(command).__name__, decider.ref)
    prov = rt.provenance(actor=actor, code=code)
    write.expect = write.expect or (eid, NOT_TERMINAL)
    decided_ = Write()  # what the decider decided, merged into the command's write when all of it holds
    try:
        new_state = _decided(rt, decider, record, state, command, actor, prov, now, decided_, own)
        encoded = dumps(new_state)  # the state as the store keeps it (checked already): encoded once
    except Exception as exc:
        log.warning("decider %s version %s failed on %s for execution %s: %s", decider.name, decider.version,
                    type(command).__name__, eid, exc)
        write.entries.append(Entry(eid=eid, kind=EntryKind.EXECUTION_FAILED, provenance=prov, fid=ROOT,
                                   error=error_data(exc)))
        _end(rt, record, write, StatusChange(eid, Status.FAILED, error=error_data(exc)), prov, now)
        write.advance = Advance(eid, version + 1, state, _index_or_none(decider, record, state))
        return
    write.advance = Advance(eid, version + 1, new_state, index=state_index(decider, record, new_state),
                            encoded=encoded)
    _add(write, decided_)
    write.status = decided_.status
    write.clear_timers, write.withdraw_delegates = decided_.clear_timers, decided_.withdraw_delegates


def _add(write: Write, decided_: Write) -> None:
    """What a decision wrote (its entries and effects) added to the command's ``write``."""
    write.entries += decided_.entries
    write.tasks += decided_.tasks
    write.timers += decided_.timers
    write.executions += decided_.executions
    write.withdrawals += decided_.withdrawals


def decide_all(rt: Runtime, decider: Decider, record: ExecutionRecord, state: Any, version: int,
               commands: Sequence[Command], actor: Actor, write: Write, own: Any = None) -> int:
    """``decide`` of several commands in one write (the ends of a parent's children that came
    together): each decided against the state the one before it left, the state advanced once.
    A command that ends the execution is the last one taken: how many were."""
    if len(commands) == 1:
        decide(rt, decider, record, state, version, commands[0], actor, write, own)
        return 1
    for i, command in enumerate(commands):
        one = Write()
        decide(rt, decider, record, state, version, command, actor, one, own)
        write.expect = write.expect or one.expect
        _add(write, one)
        write.advance = one.advance
        if one.status is not None:
            write.status = one.status
            record = dataclasses.replace(record, status=one.status.status)
            if one.status.status.terminal:
                write.clear_timers, write.withdraw_delegates = one.clear_timers, one.withdraw_delegates
                return i + 1
        assert one.advance is not None
        state = one.advance.state
    return len(commands)


def _index_or_none(decider: Decider, record: ExecutionRecord, state: Any) -> StateIndex | None:
    """The index of a state whose decider failed on it: its index may fail the same way."""
    try:
        return state_index(decider, record, state)
    except Exception:  # noqa: BLE001 - a defect of the decider's code, journaled by the caller
        return None


def _decided(rt: Runtime, decider: Decider, record: ExecutionRecord, state: Any, command: Command, actor: Actor,
             prov: Any, now: datetime, out: Write, own: Any = None) -> Any:
    """Call decide and evolve; put the events and the effects in ``out``; return the next state.
    Raises what the decider's code did wrong (the caller fails the execution with it)."""
    eid = record.eid
    command = dataclasses.replace(command, at=now.isoformat())
    got_events, got_effects = decider.decide(state, command)
    events, effects = list(got_events), list(got_effects)
    for e in events:
        if not isinstance(e, Event):
            raise TypeError(f"decide returned {e!r} among its events: each is a flowli.engine.deciders.Event")
        check_json(e.data, f"the data of event {e.kind!r} of decider {decider.name!r}")
    # check_json gives the state as the store gives it back (JSON's own types: a state this process
    # holds for its next command is the one a read would give)
    folded = decider.fold(events, state, start=False)
    what = f"the state of decider {decider.name!r}"
    # a decider that shares what an event leaves (``Decider.shares``) is checked where it changed
    new_state = check_json_since(folded, state, what) if decider.shares else check_json(folded, what)
    ends = [x for x in effects if isinstance(x, END)]
    if len(ends) > 1 or (ends and len(effects) > 1):
        raise ValueError(f"decide returned {effects!r}: an end comes alone, and once")
    out.entries.extend(Entry(eid=eid, kind=EntryKind.EVENT, provenance=prov, fid=ROOT, value=event_value(e))
                       for e in events)
    for effect in effects:
        if isinstance(effect, Delegate):
            out.tasks.append(_delegate_task(rt, decider, record, effect, now))
            if own is not None:  # its consumer's spans join the execution's trace
                out.tasks[-1].frame["trace"] = traceparent(own)  # type: ignore[index]
        elif isinstance(effect, Withdraw):
            out.withdrawals.append(Withdrawal(task_id(TaskKind.DELEGATE, eid, f"{delegate_fid(effect.key)}@{effect.attempt}")))
        elif isinstance(effect, Timer):
            out.timers.append(StoreTimer(eid, timer_fid(effect.key), effect.instant(now)))
        elif isinstance(effect, Child):
            out.executions.append(_child(rt, record, effect, actor))
        elif isinstance(effect, Complete):
            value = check_json(effect.value, f"the value of decider {decider.name!r}")
            out.entries.append(Entry(eid=eid, kind=EntryKind.EXECUTION_COMPLETED, provenance=prov, fid=ROOT, value=value))
            _end(rt, record, out, StatusChange(eid, Status.COMPLETED, result=value), prov, now)
        elif isinstance(effect, Fail):
            error = {"type": effect.type, "module": None, "message": effect.message}
            out.entries.append(Entry(eid=eid, kind=EntryKind.EXECUTION_FAILED, provenance=prov, fid=ROOT, error=error))
            _end(rt, record, out, StatusChange(eid, Status.FAILED, error=error), prov, now)
        elif isinstance(effect, Cancel):
            out.entries.append(Entry(eid=eid, kind=EntryKind.EXECUTION_CANCELLED, fid=ROOT, provenance=prov,
                                     value={"reason": effect.reason} if effect.reason else None))
            _end(rt, record, out, StatusChange(eid, Status.CANCELLED), prov, now)
        else:
            raise TypeError(f"decider {decider.name!r} returned {effect!r}: not an effect")
    if not ends and record.status is not Status.SUSPENDED:
        # its first command: from now on it waits for the next one, holding nothing
        out.entries.append(Entry(eid=eid, kind=EntryKind.EXECUTION_SUSPENDED, provenance=prov, fid=ROOT,
                                 value={"reason": "decider"}))
        out.status = StatusChange(eid, Status.SUSPENDED)
    return new_state


def _end(rt: Runtime, record: ExecutionRecord, write: Write, status: StatusChange, prov: Any, now: datetime) -> None:
    """The end's part of a write: the status, no timer left, its open DELEGATE tasks withdrawn
    (a late answer is stale), and a RESUME for its parent."""
    write.status = status
    write.clear_timers = [record.eid]
    write.withdraw_delegates = [record.eid]
    if record.parent_eid is not None:
        write.tasks.append(Task(
            id=task_id(TaskKind.RESUME, record.parent_eid, f"child:{record.eid}@end"), kind=TaskKind.RESUME,
            queue=record.queue, eid=record.parent_eid, payload=child_end_payload(record.parent_fid, record.eid),
            provenance=prov, visible_at=now, application=record.application,
        ))


def _delegate_task(rt: Runtime, decider: Decider, record: ExecutionRecord, d: Delegate, now: datetime) -> Task:
    if not isinstance(d.attempt, int) or d.attempt < 1:
        raise ValueError(f"Delegate {d.key!r}: attempt must be a number from 1, got {d.attempt!r}")
    fid = delegate_fid(d.key)
    frame = {"fid": fid, "decider": True, "key": d.key, "workflow": decider.name, "version": decider.version,
             "expiries": 0, "max_expiries": 1}
    if d.workers:
        frame["workers"] = True  # see Delegate.workers
    if d.label:
        frame["label"] = d.label  # see Delegate.label
    if d.served_by:
        frame["served_by"] = d.served_by  # see Delegate.served_by
    return Task(id=task_id(TaskKind.DELEGATE, record.eid, f"{fid}@{d.attempt}"), kind=TaskKind.DELEGATE, queue=d.queue,
                eid=record.eid, payload=check_json(d.payload, f"the payload of Delegate {d.key!r}"),
                provenance=rt.provenance(code=Code(decider.name, decider.version, "delegate", d.key), attempt=d.attempt),
                visible_at=now, application=record.application, attempt=d.attempt, frame=frame)


def _child(rt: Runtime, record: ExecutionRecord, c: Child, actor: Actor) -> NewExecution:
    fid = child_fid(c.key)
    ceid = child_eid(record.eid, fid)
    args = check_json(list(c.args), f"the arguments of child {c.key!r}", "args")
    sub = rt.registry.decider_of(c.workflow, c.version)
    if sub is not None:
        return start_execution(rt, sub, ceid, args, queue=record.queue, key=None, actor=actor,
                               application=record.application, parent=(record.eid, fid))
    wf = rt.registry.get(c.workflow, c.version)
    wf.bind(args)
    return new_execution(rt, wf, ceid, args, queue=record.queue, parent=(record.eid, fid), actor=actor,
                         application=record.application)


# ---- commands from tasks: START, a fired timer, a child's end -----------------------------------


def child_ended(child: ExecutionRecord) -> ChildEnded:
    """The command that the end of ``child`` (its record as it ended) is to its decider parent."""
    return ChildEnded(str(child.parent_fid).split("/child:", 1)[-1], child.eid, child.status.value,
                      child.result, child.error)


async def tell_parent(rt: Runtime, task: Task, child: ExecutionRecord) -> None:
    """Apply at once the RESUME ``task`` that the end of ``child`` (its record as it ended) wrote
    leased to this process for its decider parent: no dequeue, no read of the child. The task is
    in the store as any leased task, so a crash before the parent's write leaves it to the sweeper
    (its lease expires); a failure here gives it back to the queue at once."""
    try:
        await handle(rt, task, child)
    except Exception as exc:
        log.warning("the end of %s did not reach its parent %s here (%s); a worker takes it", child.eid, task.eid, exc)
        with contextlib.suppress(Exception):
            await rt.store.nack(task.id, rt.owner, timedelta(0), rt.clock.now())


async def handle(rt: Runtime, task: Task, ended: ExecutionRecord | None = None) -> None:
    """Apply the command that a START or RESUME task carries (see ``carries_command``), with a
    hold on the task: the write acks it, and is refused when this worker lost the task's lease.
    ``ended``: the record of the child whose end the task carries, when the caller has it."""
    assert task.eid is not None
    eid = task.eid
    known = rt.turns.last(eid)
    record = known[0] if known is not None else await rt.store.read_execution(eid)
    if record is None:
        return
    p = task.payload
    command: Command
    if task.kind is TaskKind.START:
        args = record.args
        command = Start(args[0] if len(args) == 1 else (None if not args else args))
    elif "timer" in p:
        command = TimerFired(str(p["timer"]).split("/timer:", 1)[-1])
    elif "child" in p:
        child = ended if ended is not None and ended.eid == p["child"] else await rt.store.read_execution(p["child"])
        if child is None or not child.terminal or not decided(child.parent_fid):
            await _ack(rt, task)
            return
        command = child_ended(child)
    else:
        log.warning("task %s carries no command a decider knows: %r", task.id, p)
        await _ack(rt, task)
        return
    hold = TaskHold(task.id, owner=rt.owner)
    try:
        result = await apply(rt, eid, command, kind="decide", base=lambda: Write(hold=hold), principal=rt.principal,
                             payload={"command": type(command).__name__, "task": task.id}, record=record)
    except StaleAnswer:
        return  # this worker's lease on the task ran out: whoever holds it now applies it
    except ExecutionStateError:
        result = None
    if result is None:
        await _ack(rt, task)


async def _ack(rt: Runtime, task: Task) -> None:
    await rt.store.write(Write(acks=[(task.id, rt.owner)]), rt.clock.now())


# ---- commands in their caller's write -----------------------------------------------------------


def answer_command(task: Task, value: Any, failure: tuple[str, str, bool] | None, by: str | None) -> Command:
    """The command of a consumer's answer (``failure`` None) or failure of a decider's task."""
    assert task.frame is not None
    key, attempt = task.frame["key"], task.attempt or 1
    if failure is None:
        return Answered(key, attempt, value, by)
    return Failed(key, attempt, failure[0], failure[1], failure[2], by, details=value)


def expired_command(task: Task) -> Command:
    assert task.frame is not None
    return Expired(task.frame["key"], task.attempt or 1, owner=task.lease_owner)


def cancel_command(request: dict[str, Any]) -> Command:
    return CancelRequested(request.get("by"), request.get("reason"))

