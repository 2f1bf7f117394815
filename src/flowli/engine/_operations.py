"""What clients and operators do to executions, each one transition: signal, broadcast,
cancel, migrate, retry, terminate; and the scoped reads they start from.

Scoping: every function takes the ``application`` of its caller (None: single-tenant use, which
sees every execution). An execution of another application is unknown, exactly as a missing one:
the error says "unknown execution", never "forbidden".
"""

from __future__ import annotations

import asyncio
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
    Principal,
    Status,
    Task,
    TaskKind,
    UnknownExecutionError,
    check_json,
    new_eid,
    principal_for,
    task_id,
)
from flowli.store import Intent, NewMessage, Resume, StatusChange, WakeWaiters, Write

from ._archive import Archive, entry_from, record_from
from ._core import global_channel
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
    return record is not None and (application is None or record.application == application)


async def read_record(rt: Runtime, archive: Archive, eid: str, application: str | None) -> ExecutionRecord:
    """The record of an execution, live or archived, as its application sees it."""
    record = await rt.store.read_execution(eid)
    if record is None:
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


async def signal(rt: Runtime, archive: Archive, eid: str, channel: str, payload: Any, by: By,
                 application: str | None) -> int:
    """Send one message to ``{eid}.{channel}`` and enqueue a RESUME, in one write: the store checks
    the status (and the application), appends the message and enqueues the RESUME on the
    execution's queue."""
    payload = check_json(payload, f"the payload of signal {channel!r} to execution {eid}")
    principal = principal_for(by, ENGINE_ACTOR, application)
    prov = rt.provenance(actor=principal.actor)
    resume = Resume(
        id=task_id(TaskKind.RESUME, eid, f"signal:{new_eid()}"), eid=eid, payload={"channel": channel},
        provenance=prov, visible_at=rt.clock.now(),
    )
    write = Write(intent=Intent.SIGNAL, expect=(eid, NOT_TERMINAL), application=application,
                  messages=[NewMessage(f"{eid}.{channel}", payload, prov, application=application)], resumes=[resume])
    try:
        result = await commit(rt, Transition("signal", write, eid, None, principal, application,
                                             {"channel": channel, "payload": payload}))
    except ExecutionStateError as exc:
        raise ExecutionTerminalError(eid, exc.status, f"signal {channel!r} to") from None
    except UnknownExecutionError:
        archived = await asyncio.to_thread(archive.read, eid)
        if archived is None or not visible(record_from(archived["record"]), application):
            raise
        raise ExecutionTerminalError(eid, archived["record"]["status"], f"signal {channel!r} to") from None
    return int(result.message_seqs[0])


async def broadcast(rt: Runtime, channel: str, payload: Any, by: By, application: str | None) -> int:
    """Send one message on a global channel (of the application) and resume every waiter of it."""
    payload = check_json(payload, f"the payload of broadcast {channel!r}")
    principal = principal_for(by, ENGINE_ACTOR, application)
    prov = rt.provenance(actor=principal.actor)
    full = global_channel(channel, application)
    write = Write(messages=[NewMessage(full, payload, prov, application=application)],
                  wake_waiters=[WakeWaiters(full, f"broadcast:{full}:{new_eid()}", prov)])
    result = await commit(rt, Transition("broadcast", write, None, None, principal, application,
                                         {"channel": channel, "payload": payload}))
    return int(result.message_seqs[0])


async def cancel(rt: Runtime, archive: Archive, eid: str, by: By, application: str | None) -> ExecutionRecord:
    """Request cancellation: a request in the lease state plus a RESUME. Kills nothing."""
    record = await read_record(rt, archive, eid, application)
    if record.terminal:
        raise ExecutionTerminalError(eid, record.status.value, "cancel")
    principal = principal_for(by, ENGINE_ACTOR, application)
    actor = principal.actor
    now = rt.clock.now()
    request = {"by": actor.id, "actor": str(actor), "at": now.isoformat()}
    resume = Task(
        id=task_id(TaskKind.RESUME, eid, "cancel"), kind=TaskKind.RESUME, queue=record.queue, eid=eid,
        payload={"cancel": True}, provenance=rt.provenance(actor=actor), visible_at=now,
        application=record.application,
    )
    write = Write(expect=(eid, NOT_TERMINAL), cancel_request=(eid, request), tasks=[resume])
    try:
        await commit(rt, Transition("cancel", write, eid, record.workflow, principal, record.application, request))
    except ExecutionStateError as exc:
        raise ExecutionTerminalError(eid, exc.status, "cancel") from None
    return record


async def migrate(rt: Runtime, archive: Archive, registry: Registry, eid: str, version: str, by: By,
                  application: str | None) -> None:
    """Point a suspended execution at another version of its workflow, and resume it."""
    record = await read_record(rt, archive, eid, application)
    wf = registry.get(record.workflow, version)
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
