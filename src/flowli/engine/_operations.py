"""What clients and operators do to executions, each one transition: signal, broadcast,
cancel, migrate, retry, terminate; and the scoped reads they start from.

Scoping: every function takes the ``application`` of its caller (None: single-tenant use, which
sees every execution). An execution of another application is unknown, exactly as a missing one:
the error says "unknown execution", never "forbidden".
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import Any

from flowli.domain import (
    TERMINAL,
    Actor,
    Code,
    Entry,
    EntryKind,
    ExecutionRecord,
    ExecutionStateError,
    ExecutionTerminalError,
    FrameKind,
    OperationRefused,
    Principal,
    Status,
    Task,
    TaskKind,
    UnknownExecutionError,
    belongs,
    check_json,
    new_eid,
    principal_for,
    task_id,
)
from flowli.store import (
    Guard,
    Intent,
    JournalFilter,
    NewItem,
    NewMessage,
    Resume,
    StatusChange,
    WakeWaiters,
    Write,
)

from . import _deciding as deciding
from ._archive import Archive, entry_from, record_from
from ._core import global_channel
from ._decider import ROOT as DECIDED
from ._decider import Retried, Signal
from ._dry import dry_replay
from ._frames import ROOT
from ._registry import Registry
from ._runtime import Runtime
from ._transitions import Transition, commit

NOT_TERMINAL = frozenset(Status) - TERMINAL
ENGINE_ACTOR = Actor("system", "engine")

By = str | Principal | None


def scope_of(by: By, application: str | None) -> str | None:
    """The application a call is scoped to: the one given, else the principal's."""
    if not isinstance(by, Principal) or by.application is None:
        return application
    if application is not None and application != by.application:
        raise ValueError(f"application {application!r} differs from the application {by.application!r}"
                         f" of principal {by.id!r}")
    return by.application


def visible(record: ExecutionRecord | None, application: str | None) -> bool:
    return record is not None and belongs(record.application, application)


async def read_record(rt: Runtime, archive: Archive, eid: str, application: str | None) -> ExecutionRecord:
    """The record of an execution, live or archived, as its application sees it."""
    record = await rt.store.read_execution(eid)
    if record is None and archive.holds(eid):
        archived = await asyncio.to_thread(archive.read, eid)
        record = record_from(archived["record"]) if archived is not None else None
    if record is None or not visible(record, application):
        raise UnknownExecutionError(eid)
    return record


async def read_journal(rt: Runtime, archive: Archive, eid: str, application: str | None) -> list[Entry]:
    """Every entry of an execution, live or archived, as its application sees it."""
    record = await rt.store.read_execution(eid)
    if record is not None:
        if not visible(record, application):
            raise UnknownExecutionError(eid)
        return await rt.store.read_journal(eid)
    archived = await asyncio.to_thread(archive.read, eid)
    if archived is None or not visible(record_from(archived["record"]), application):
        raise UnknownExecutionError(eid)
    return [entry_from(e) for e in archived["journal"]]


async def read_journal_page(rt: Runtime, archive: Archive, eid: str, f: JournalFilter, before: int | None,
                            limit: int, application: str | None) -> tuple[list[Entry], int]:
    """A page of an execution's journal, newest first (see ``Store.read_journal_page``), live or
    archived, as its application sees it."""
    record = await rt.store.read_execution(eid)
    if record is not None:
        if not visible(record, application):
            raise UnknownExecutionError(eid)
        return await rt.store.read_journal_page(eid, f, before, limit)
    matched = [e for e in reversed(await read_journal(rt, archive, eid, application))
               if (f.fid is None or e.fid == f.fid) and (f.kind is None or e.kind.value == f.kind)
               and (f.attempt is None or e.attempt == f.attempt)]
    return [e for e in matched if before is None or (e.seq or 0) < before][:limit], len(matched)


async def signal(rt: Runtime, archive: Archive, eid: str, channel: str, payload: Any, by: By,
                 application: str | None, items: list[NewItem] | None = None, decision: bool = False) -> int:
    """Send one message to ``{eid}.{channel}`` and enqueue a RESUME, in one write: the store checks
    the status (and the application), appends the message and enqueues the RESUME on the
    execution's queue."""
    payload = check_json(payload, f"the payload of signal {channel!r} to execution {eid}", "payload")
    principal = principal_for(by, ENGINE_ACTOR, application)
    prov = rt.provenance(actor=principal.actor)
    if rt.registry.has_deciders:
        record = await rt.store.read_execution(eid)
        if record is not None and visible(record, application) and rt.registry.decider_of(record.workflow, record.version) is not None:
            return await _signal_decided(rt, record, channel, payload, principal, prov, application, items or [],
                                         decision)
    resume = Resume(
        id=task_id(TaskKind.RESUME, eid, f"signal:{new_eid()}"), eid=eid, payload={"channel": channel},
        provenance=prov, visible_at=rt.clock.now(),
    )
    write = Write(intent=None if items else Intent.SIGNAL, expect=(eid, NOT_TERMINAL), application=application,
                  messages=[NewMessage(f"{eid}.{channel}", payload, prov, application=application)], resumes=[resume],
                  items=list(items or []))
    try:
        result = await commit(rt, Transition("signal", write, eid, None, principal, application,
                                             _signalled(channel, payload, decision)))
    except ExecutionStateError as exc:
        raise ExecutionTerminalError(eid, exc.status, f"signal {channel!r} to") from None
    except UnknownExecutionError:
        archived = await asyncio.to_thread(archive.read, eid)
        if archived is None or not visible(record_from(archived["record"]), application):
            raise
        raise ExecutionTerminalError(eid, archived["record"]["status"], f"signal {channel!r} to") from None
    return int(result.message_seqs[0])


def _signalled(channel: str, payload: Any, decision: bool) -> dict[str, Any]:
    """The payload of a signal's transition: a person's decision says so (``decision``)."""
    return {"channel": channel, "payload": payload, **({"decision": True} if decision else {})}


async def _signal_decided(rt: Runtime, record: ExecutionRecord, channel: str, payload: Any, principal: Principal,
                          prov: Any, application: str | None, items: list[NewItem], decision: bool) -> int:
    """A signal to a decider's execution: the message on its channel and the command Signal,
    decided in one write (no RESUME: nothing is replayed)."""
    eid = record.eid

    def base() -> Write:
        return Write(expect=(eid, NOT_TERMINAL), application=application,
                     messages=[NewMessage(f"{eid}.{channel}", payload, prov, application=application)],
                     items=list(items))

    try:
        result = await deciding.apply(rt, eid, Signal(channel, payload, str(principal.actor)), kind="signal", base=base,
                                      principal=principal, payload=_signalled(channel, payload, decision),
                                      record=record)
    except ExecutionStateError as exc:
        raise ExecutionTerminalError(eid, exc.status, f"signal {channel!r} to") from None
    if result is None:
        ended = await rt.store.read_execution(eid)
        raise ExecutionTerminalError(eid, ended.status.value if ended else "unknown", f"signal {channel!r} to")
    return int(result.message_seqs[0])


async def broadcast(rt: Runtime, channel: str, payload: Any, by: By, application: str | None) -> int:
    """Send one message on a global channel (of the application) and resume every waiter of it."""
    payload = check_json(payload, f"the payload of broadcast {channel!r}", "payload")
    principal = principal_for(by, ENGINE_ACTOR, application)
    prov = rt.provenance(actor=principal.actor)
    full = global_channel(channel, application)
    write = Write(messages=[NewMessage(full, payload, prov, application=application)],
                  wake_waiters=[WakeWaiters(full, f"broadcast:{full}:{new_eid()}", prov)])
    result = await commit(rt, Transition("broadcast", write, None, None, principal, application,
                                         {"channel": channel, "payload": payload}))
    return int(result.message_seqs[0])


async def announce(rt: Runtime, eid: str, kind: str, data: Any, by: By, application: str | None) -> int:
    """Append an ``announced`` entry (``kind``, ``data``) to the journal of ``eid``, whatever its
    status, in one write of its own (the record of something that changed nothing else, such as a
    refused answer). It is no command and no frame's outcome: no decider folds it and no replay
    reads it. UnknownExecutionError for an execution that is not live (or of another application)."""
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"announce takes a kind such as 'answer.refused', got {kind!r}")
    data = check_json(data, f"the data of {kind!r} announced on execution {eid}", "data")
    principal = principal_for(by, ENGINE_ACTOR, application)
    entry = Entry(eid=eid, kind=EntryKind.ANNOUNCED, provenance=rt.provenance(actor=principal.actor),
                  value={"kind": kind, "data": data})
    write = Write(expect=(eid, frozenset(Status)), application=application, entries=[entry])
    result = await commit(rt, Transition("announce", write, eid, None, principal, application, {"kind": kind, "data": data}))
    return int(result.entry_seqs[0])


async def cancel(rt: Runtime, archive: Archive, eid: str, by: By, application: str | None,
                 reason: str | None = None) -> ExecutionRecord:
    """Request cancellation: a request in the lease state plus a RESUME. Kills nothing."""
    record = await read_record(rt, archive, eid, application)
    if record.terminal:
        raise ExecutionTerminalError(eid, record.status.value, "cancel")
    principal = principal_for(by, ENGINE_ACTOR, application)
    actor = principal.actor
    now = rt.clock.now()
    request = {"by": actor.id, "actor": str(actor), "at": now.isoformat(), **({"reason": reason} if reason else {})}
    resume = Task(
        id=task_id(TaskKind.RESUME, eid, "cancel"), kind=TaskKind.RESUME, queue=record.queue, eid=eid,
        payload={"cancel": True}, provenance=rt.provenance(actor=actor), visible_at=now,
        application=record.application,
    )
    if rt.registry.decider_of(record.workflow, record.version) is not None:
        await _cancel_decided(rt, record, request, principal)
        return record
    write = Write(expect=(eid, NOT_TERMINAL), cancel_request=(eid, request), tasks=[resume])
    try:
        await commit(rt, Transition("cancel", write, eid, record.workflow, principal, record.application, request))
    except ExecutionStateError as exc:
        raise ExecutionTerminalError(eid, exc.status, "cancel") from None
    return record


def _not_decided(rt: Runtime, record: ExecutionRecord, action: str) -> None:
    """Migrate and retry work on a replay; a decider's execution is never replayed."""
    if rt.registry.decider_of(record.workflow, record.version) is not None:
        raise OperationRefused(record.eid, action, f"it runs the decider {record.workflow!r}, which is never replayed"
                                                   " (its state moves by commands only)")


async def _cancel_decided(rt: Runtime, record: ExecutionRecord, request: dict[str, Any], principal: Principal) -> None:
    """A cancel of a decider's execution: the request recorded and the command CancelRequested
    decided in one write; the decider says what it means (usually the effect Cancel)."""
    eid = record.eid
    try:
        result = await deciding.apply(
            rt, eid, deciding.cancel_command(request), kind="cancel", principal=principal, payload=request,
            base=lambda: Write(expect=(eid, NOT_TERMINAL), cancel_request=(eid, request)), record=record)
    except ExecutionStateError as exc:
        raise ExecutionTerminalError(eid, exc.status, "cancel") from None
    if result is None:
        raise ExecutionTerminalError(eid, "ended", "cancel")


async def migrate(rt: Runtime, archive: Archive, registry: Registry, eid: str, version: str, by: By,
                  application: str | None, force: bool = False) -> None:
    """Point a suspended execution at another version of its workflow, and resume it. The version
    must replay its journal first (a dry replay: nothing written, no step run), unless ``force``."""
    record = await read_record(rt, archive, eid, application)
    _not_decided(rt, record, "migrate")
    wf = registry.get(record.workflow, version)
    if not force and record.status is Status.SUSPENDED:
        diverged = await dry_replay(rt, wf, record, await rt.store.read_journal(eid))
        if diverged is not None:
            shown = "" if diverged.recorded is None and diverged.current is None else \
                f" (recorded {diverged.recorded}, now {diverged.current})"
            raise OperationRefused(eid, "migrate", f"version {wf.version} does not replay it: at frame {diverged.fid},"
                                                   f" {diverged.detail}{shown}; force it to migrate all the same")
    principal = principal_for(by, ENGINE_ACTOR, application)
    now = rt.clock.now()
    prov = rt.provenance(actor=principal.actor, code=Code(wf.name, wf.version, FrameKind.ROOT.value, ROOT, wf.ref))
    entry = Entry(eid=eid, kind=EntryKind.EXECUTION_MIGRATED, provenance=prov, fid=ROOT,
                  value={"from": record.version, "to": wf.version, "blocked": record.blocked})
    resume = Task(
        id=task_id(TaskKind.RESUME, eid, f"migrate:{new_eid()}"), kind=TaskKind.RESUME, queue=record.queue,
        eid=eid, payload=None, provenance=prov, visible_at=now, application=record.application,
    )
    write = Write(
        expect=(eid, frozenset({Status.SUSPENDED})), entries=[entry],
        status=StatusChange(eid, Status.SUSPENDED, version=wf.version), tasks=[resume],
    )
    try:
        await commit(rt, Transition("migrate", write, eid, record.workflow, principal, record.application, entry.value))
    except ExecutionStateError as exc:
        raise ExecutionStateError(eid, exc.status, "migrate", "suspended") from None


async def retry(rt: Runtime, archive: Archive, eid: str, by: By, reason: str | None, application: str | None,
                signal: tuple[str, Any] | None = None) -> str | None:
    """Reopen a failed execution from its last good point: one ``execution.retried`` entry (who,
    why, which frame), after which the failure of that frame no longer counts; the replay keeps
    every other memo and runs the frame again with a fresh attempt count. A frame that failed
    because its child execution failed reopens the child first, the same way. Returns the fid
    reopened (None when the workflow itself raised: the replay runs it again from its start)."""
    record = await read_record(rt, archive, eid, application)
    if record.status is not Status.FAILED:
        raise ExecutionStateError(eid, record.status.value, "retry", "failed")
    if rt.registry.decider_of(record.workflow, record.version) is not None:
        return await _retry_decided(rt, record, by, reason, application, signal)
    journal = await rt.store.read_journal(eid)
    error = record.error or {}
    fid = error.get("fid") if isinstance(error.get("fid"), str) else None
    failed = next((e for e in reversed(journal) if e.fid == fid and e.kind is EntryKind.FRAME_FAILED), None)
    child = (failed.error or {}).get("child") if failed is not None else None
    if isinstance(child, str):
        with contextlib.suppress(ExecutionStateError):  # a child cancelled, say, is not reopened
            await retry(rt, archive, child, by, reason, application)
    principal = principal_for(by, ENGINE_ACTOR, application)
    now = rt.clock.now()
    prov = rt.provenance(actor=principal.actor, code=Code(record.workflow, record.version, FrameKind.ROOT.value, ROOT))
    value = {"fid": fid, "reason": reason, "by": str(principal.actor), "error": error}
    entry = Entry(eid=eid, kind=EntryKind.EXECUTION_RETRIED, provenance=prov, fid=ROOT, value=value)
    resume = Task(id=task_id(TaskKind.RESUME, eid, f"retry:{new_eid()}"), kind=TaskKind.RESUME, queue=record.queue,
                  eid=eid, payload=None, provenance=prov, visible_at=now, application=record.application)
    messages = []
    if signal is not None:
        channel, payload = signal
        payload = check_json(payload, f"the payload of signal {channel!r} to execution {eid}", "payload")
        messages.append(NewMessage(f"{eid}.{channel}", payload, prov, application=record.application))
    write = Write(expect=(eid, frozenset({Status.FAILED})), entries=[entry],
                  status=StatusChange(eid, Status.SUSPENDED), tasks=[resume], messages=messages)
    try:
        await commit(rt, Transition("retry", write, eid, record.workflow, principal, record.application, value))
    except ExecutionStateError as exc:
        raise ExecutionStateError(eid, exc.status, "retry", "failed") from None
    return fid


async def _retry_decided(rt: Runtime, record: ExecutionRecord, by: By, reason: str | None,
                         application: str | None, signal: tuple[str, Any] | None) -> str | None:
    """A retry of a decider's failed execution: the ``execution.retried`` entry (and the message
    of ``signal``) and the command Retried, decided in one write that reopens it. Returns the
    fid its failure named, if any (a decider's failure names none: None)."""
    eid = record.eid
    principal = principal_for(by, ENGINE_ACTOR, application)
    prov = rt.provenance(actor=principal.actor, code=Code(record.workflow, record.version, "decider", "retry"))
    error = record.error or {}
    fid = error.get("fid") if isinstance(error.get("fid"), str) else None
    value = {"fid": fid, "reason": reason, "by": str(principal.actor), "error": error}
    payload = None
    if signal is not None:
        payload = check_json(signal[1], f"the payload of signal {signal[0]!r} to execution {eid}", "payload")

    def base() -> Write:
        messages = [] if signal is None else [NewMessage(f"{eid}.{signal[0]}", payload, prov,
                                                         application=record.application)]
        return Write(expect=(eid, frozenset({Status.FAILED})), messages=messages,
                     entries=[Entry(eid=eid, kind=EntryKind.EXECUTION_RETRIED, provenance=prov, fid=DECIDED, value=value)])

    try:
        result = await deciding.apply(rt, eid, Retried(str(principal.actor), reason,
                                                                 *(signal or (None, None))), kind="retry", base=base,
                                      principal=principal, payload=value, record=record, reopen=True)
    except ExecutionStateError as exc:
        raise ExecutionStateError(eid, exc.status, "retry", "failed") from None
    if result is None:
        ended = await rt.store.read_execution(eid)
        raise ExecutionStateError(eid, ended.status.value if ended else "unknown", "retry", "failed")
    return fid


async def terminate(
    rt: Runtime, archive: Archive, eid: str, reason: str, by: By, min_idle: timedelta,
    expected_last_seq: int | None, application: str | None,
) -> None:
    """Append a failed terminal state to a run confirmed stale: refused when it progressed within
    ``min_idle``, when a live worker holds its lease, or when its journal's last seq is not
    ``expected_last_seq`` (given). The guards hold in the write's transaction."""
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError("terminate needs a reason: it is recorded with the terminal state")
    record = await read_record(rt, archive, eid, application)
    if record.terminal:
        raise ExecutionTerminalError(eid, record.status.value, "terminate")
    journal = await rt.store.read_journal(eid)
    last = journal[-1] if journal else None
    last_seq = last.seq or 0 if last is not None else 0
    now = rt.clock.now()
    if expected_last_seq is not None and expected_last_seq != last_seq:
        raise OperationRefused(eid, "terminate", f"its journal ends at seq {last_seq}, not at the expected {expected_last_seq}")
    if last is not None and now - last.at < min_idle:
        idle = (now - last.at).total_seconds()
        raise OperationRefused(eid, "terminate", f"it progressed {idle:.0f} s ago, within min_idle of"
                                                 f" {min_idle.total_seconds():.0f} s")
    principal = principal_for(by, ENGINE_ACTOR, application)
    prov = rt.provenance(actor=principal.actor, code=Code(record.workflow, record.version, FrameKind.ROOT.value, ROOT))
    error = {"type": "Terminated", "module": None, "code": "TERMINATED", "message": reason,
             "by": str(principal.actor), "last_seq": last_seq}
    entry = Entry(eid=eid, kind=EntryKind.EXECUTION_FAILED, provenance=prov, fid=ROOT, error=error)
    write = Write(expect=(eid, NOT_TERMINAL), guard=Guard(eid, last_seq, "terminate"), entries=[entry],
                  status=StatusChange(eid, Status.FAILED, error=error), clear_timers=[eid], clear_waiters=[eid],
                  withdraw_delegates=[eid])
    if record.parent_eid is not None:
        write.tasks.append(Task(
            id=task_id(TaskKind.RESUME, record.parent_eid, f"child:{eid}@terminated"), kind=TaskKind.RESUME,
            queue=record.queue, eid=record.parent_eid, payload=None, provenance=prov, visible_at=now,
            application=record.application))
    try:
        await commit(rt, Transition("terminate", write, eid, record.workflow, principal, record.application,
                                    {"reason": reason, "last_seq": last_seq}))
    except ExecutionStateError as exc:
        raise ExecutionTerminalError(eid, exc.status, "terminate") from None
