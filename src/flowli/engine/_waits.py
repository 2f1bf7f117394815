"""The frames that wait: receive, sleep, child. A waiting frame holds nothing: once every live
frame of the activation waits, the activation suspends (``_activation``), and a later one
finds the message, the instant or the child's end and completes the frame.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import datetime, timedelta
from typing import Any, Awaitable, Callable

from flowli.domain import (
    Code,
    Entry,
    EntryKind,
    ExecutionRecord,
    FrameKind,
    Status,
    Task,
    TaskKind,
    check_json,
    child_eid,
    digest,
    task_id,
)
from flowli.store import NewExecution, Write

from ._context import Scope
from ._core import frame_failed, plain, store_call
from ._frames import ROOT, Wait
from ._registry import WorkflowDef
from ._runtime import Runtime
from ._steps import Steps


def new_execution(
    rt: Runtime,
    wf: WorkflowDef,
    eid: str,
    args: list[Any],
    *,
    queue: str,
    key: str | None = None,
    parent: tuple[str, str] | None = None,
    actor: Any = None,
    on_behalf_of: str | None = None,
    leased: bool = False,
    application: str | None = None,
) -> NewExecution:
    """The record, first entry and START task of an execution that does not exist yet. With
    ``leased``, the record holds the first lease for this process (epoch 1) and there is no START
    task: a worker of this process runs the execution at once (a direct start)."""
    now = rt.clock.now()
    prov = rt.provenance(
        actor=actor, code=Code(wf.name, wf.version, FrameKind.ROOT.value, ROOT, wf.ref), on_behalf_of=on_behalf_of
    )
    record = ExecutionRecord(
        eid=eid, workflow=wf.name, version=wf.version, status=Status.PENDING, args=args, queue=queue,
        created_at=now, updated_at=now, parent_eid=parent[0] if parent else None,
        parent_fid=parent[1] if parent else None, key=key, application=application,
    )
    if leased:
        record = dataclasses.replace(
            record, status=Status.RUNNING, lease_owner=rt.owner, lease_epoch=1,
            lease_expires_at=now + rt.options.lease_ttl,
        )
    value = {"workflow": wf.name, "version": wf.version, "args": args, "queue": queue,
             "parent_eid": record.parent_eid, "parent_fid": record.parent_fid}
    if application is not None:
        value["application"] = application
    entry = Entry(eid=eid, kind=EntryKind.EXECUTION_STARTED, provenance=prov, fid=ROOT, value=value)
    task = None if leased else Task(
        id=task_id(TaskKind.START, eid), kind=TaskKind.START, queue=queue, eid=eid, payload=None,
        provenance=prov, visible_at=now, application=application,
    )
    return NewExecution(record, entry, task)


class Waits(Steps):
    """The waiting frames of an activation."""

    def receive(self, channel: str, scope: Scope = "execution") -> Awaitable[Any]:
        full = self.channel_name(channel, scope)
        dig = digest([full])
        fid, outcome = self._frame("receive", None, FrameKind.RECEIVE, dig)
        if outcome is not None:
            if outcome.kind is EntryKind.FRAME_FAILED:
                return self._outcome_value(fid, outcome)
            return self._done(outcome.value["payload"])
        return self._spawn(self._receive(fid, full, dig))

    async def _receive(self, fid: str, channel: str, dig: str) -> Any:
        started = None
        if fid not in self.memo.started:
            started = self._entry(EntryKind.FRAME_STARTED, fid, FrameKind.RECEIVE, attempt=1, dig=dig, value={"channel": channel})
        async with self.channel_locks[channel]:
            after = self.memo.cursors.get(channel, 0)
            messages = await store_call(self.rt.store.read_messages(channel, after, limit=1))
            if messages:
                self.memo.cursors[channel] = messages[0].seq
        if not messages:
            if started is not None:
                self.pending.append(started)
                self.memo.started[fid] = started
            await self._wait(Wait(fid, "message", channel=channel, after=after))
        m = messages[0]
        value = {"channel": channel, "seq": m.seq, "payload": m.payload, "by": str(m.provenance.actor)}
        completed = self._entry(EntryKind.FRAME_COMPLETED, fid, FrameKind.RECEIVE, attempt=1, value=value)
        await self._write(plain(Write(entries=([started] if started else []) + [completed])))
        self.memo.outcome[fid] = completed
        return m.payload

    def sleep(self, delay: timedelta) -> Awaitable[None]:
        if not isinstance(delay, timedelta):
            raise TypeError(f"ctx.sleep takes a timedelta, got {type(delay).__name__}")
        return self._sleep({"delay": delay.total_seconds()}, lambda now: now + delay)

    def sleep_until(self, instant: datetime) -> Awaitable[None]:
        if not isinstance(instant, datetime) or instant.tzinfo is None:
            raise TypeError(f"ctx.sleep_until takes an aware datetime, got {instant!r}")
        return self._sleep({"until": instant.isoformat()}, lambda now: instant)

    def _sleep(self, args: dict[str, Any], until_of: Callable[[datetime], datetime]) -> Awaitable[None]:
        dig = digest(args)
        fid, outcome = self._frame("sleep", None, FrameKind.SLEEP, dig)
        if outcome is not None:
            return self._done(None)

        async def run() -> None:
            started = self.memo.started.get(fid)
            write = Write()
            if started is None:
                until = until_of(self.rt.clock.now())
                started = self._entry(EntryKind.FRAME_STARTED, fid, FrameKind.SLEEP, attempt=1, dig=dig, value={"until": until.isoformat()})
                self.memo.started[fid] = started
                write.entries.append(started)
            else:
                until = datetime.fromisoformat(started.value["until"])
            if until > self.rt.clock.now():
                self.pending.extend(write.entries)
                await self._wait(Wait(fid, "timer", at=until))
            completed = self._entry(EntryKind.FRAME_COMPLETED, fid, FrameKind.SLEEP, attempt=1, value=None)
            write.entries.append(completed)
            await self._write(plain(write))
            self.memo.outcome[fid] = completed

        return self._spawn(run())

    def child(self, workflow: str | Callable[..., Any], /, *args: Any, key: str | None = None) -> Awaitable[Any]:
        wf = self.rt.registry.get(workflow)
        wf.bind(args)
        child_args = check_json(list(args), f"the arguments of child workflow {wf.name!r}")
        dig = digest({"workflow": wf.name, "args": child_args})
        fid, outcome = self._frame(wf.name, key, FrameKind.CHILD, dig)
        if outcome is not None:
            return self._outcome_value(fid, outcome)
        return self._spawn(self._child(fid, wf, child_args, dig))

    async def _child(self, fid: str, wf: WorkflowDef, args: list[Any], dig: str) -> Any:
        ceid = child_eid(self.eid, fid)
        if fid not in self.memo.started:
            started = self._entry(EntryKind.FRAME_STARTED, fid, FrameKind.CHILD, name=wf.name, attempt=1, dig=dig,
                                  value={"child": ceid}, ref=wf.ref)
            # a child runs on its parent's queue, in its parent's application
            new = new_execution(self.rt, wf, ceid, args, queue=self.record.queue, parent=(self.eid, fid),
                                application=self.record.application)
            await self._write(Write(entries=[started], executions=[new]))
            self.memo.started[fid] = started
        record = await store_call(self.rt.store.read_execution(ceid))
        if record is None or not record.terminal:
            await self._wait(Wait(fid, "child", child=ceid))
        assert record is not None
        if record.status is Status.COMPLETED:
            entry = self._entry(EntryKind.FRAME_COMPLETED, fid, FrameKind.CHILD, name=wf.name, attempt=1, value=record.result)
            await self._write(plain(Write(entries=[entry])))
            self.memo.outcome[fid] = entry
            return record.result
        error = dict(record.error or {})
        error.setdefault("type", record.status.value)
        error["child"] = ceid
        error["message"] = f"child execution {ceid} {record.status.value}: {error.get('message', '')}"
        entry = self._entry(EntryKind.FRAME_FAILED, fid, FrameKind.CHILD, name=wf.name, attempt=1,
                            value={"final": True}, error=error)
        await self._write(plain(Write(entries=[entry])))
        self.memo.outcome[fid] = entry
        raise frame_failed(fid, entry, 1)

    async def gather(self, *awaitables: Awaitable[Any]) -> list[Any]:
        return list(await asyncio.gather(*awaitables))
