"""The frames that wait: receive, sleep, child, delegate. A waiting frame holds nothing: once
every live frame of the activation waits, the activation suspends (``_activation``), and a later
one finds the message, the instant, the child's end or the answer and completes the frame.

A wait with a timeout (``receive(..., timeout=)``, ``delegate(..., timeout=)``) fixes its deadline
in its first frame.started; when the deadline passes first, the frame fails with the built-in
TimeoutError (journaled: a replay raises it again).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any, Awaitable, Callable, Generator, Iterable

from flowli.domain import (
    NO_RETRY,
    Code,
    Entry,
    EntryKind,
    ExecutionRecord,
    FrameKind,
    RetryPolicy,
    StaleAnswer,
    Status,
    Task,
    TaskKind,
    check_json,
    child_eid,
    digest,
    task_id,
)
from flowli.store import NewExecution, TaskHold, Write

from ._context import Scope
from ._core import channel_name, frame_failed, plain, store_call
from ._decider import DECIDER_TASK, Decider
from ._frames import ROOT, Wait
from ._handoff import written_maybe
from ._registry import WorkflowDef
from ._runtime import Runtime
from ._steps import Steps, policy_json
from ._tracing import context_of, traceparent
from ._writer import Writer


def new_execution(
    rt: Runtime,
    wf: WorkflowDef | Decider,
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
    trace: dict[str, str] | None = None,
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
    value: dict[str, Any] = {"workflow": wf.name, "version": wf.version, "args": args, "queue": queue,
             "parent_eid": record.parent_eid, "parent_fid": record.parent_fid}
    if application is not None:
        value["application"] = application
    if trace is not None:
        value["trace"] = trace  # the trace it starts in (see _tracing)
    if wf.typed:
        value["typed"] = True  # its structured arguments reach the function as their types
    entry = Entry(eid=eid, kind=EntryKind.EXECUTION_STARTED, provenance=prov, fid=ROOT, value=value)
    task = None if leased else Task(
        id=task_id(TaskKind.START, eid), kind=TaskKind.START, queue=queue, eid=eid, payload=None,
        provenance=prov, visible_at=now, application=application,
    )
    return NewExecution(record, entry, task)


class Pending:
    """The awaitable that ``ctx.delegate`` (and receive, sleep, child) returns: the frame's id is known as soon as the method is
    called (a pattern announces it before it awaits the answer)."""

    __slots__ = ("awaitable", "fid")

    def __init__(self, fid: str, awaitable: Awaitable[Any]):
        self.fid = fid
        self.awaitable = awaitable

    def __await__(self) -> Generator[Any, None, Any]:
        return self.awaitable.__await__()

    def __repr__(self) -> str:
        return f"<frame {self.fid}>"


def _timeout_of(timeout: timedelta | None, method: str) -> timedelta | None:
    if timeout is not None and (not isinstance(timeout, timedelta) or timeout <= timedelta(0)):
        raise TypeError(f"ctx.{method} takes a positive timedelta as timeout, got {timeout!r}")
    return timeout


def _deadline(started: Entry | None, timeout: timedelta | None, now: datetime) -> datetime | None:
    """The deadline of a wait: fixed by its first frame.started, else now + timeout."""
    if started is not None:
        at = (started.value or {}).get("deadline") if isinstance(started.value, dict) else None
        return datetime.fromisoformat(at) if at else None
    return now + timeout if timeout is not None else None


def timed_out(fid: str, what: str, timeout: str) -> dict[str, Any]:
    """The error of a wait whose deadline passed first: raised as TimeoutError in the workflow."""
    return {"type": "TimeoutError", "module": "builtins", "timeout": True,
            "message": f"{what} at frame {fid}: nothing came within {timeout}"}


class Waits:
    """The waiting frames of an activation (a delegate's retries wait as a step's do)."""

    def __init__(self, writer: Writer, steps: Steps):
        self.w = writer
        self.r = writer.replay
        self.steps = steps
        self.channel_locks: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    def receive(self, channel: str, scope: Scope = "execution", *, timeout: timedelta | None = None) -> Awaitable[Any]:
        full = channel_name(self.w.eid, self.w.record.application, channel, scope)
        _timeout_of(timeout, "receive")
        dig = digest([full])
        fid, outcome = self.r.frame("receive", None, FrameKind.RECEIVE, dig)
        if outcome is not None:
            if outcome.kind is EntryKind.FRAME_FAILED:
                return Pending(fid, self.r.outcome_value(fid, outcome))
            return Pending(fid, self.r.done(outcome.value["payload"]))
        return Pending(fid, self.r.spawn(self._receive(fid, full, dig, timeout)))

    async def _receive(self, fid: str, channel: str, dig: str, timeout: timedelta | None) -> Any:
        started = self.r.memo.started.get(fid)
        deadline = _deadline(started, timeout, self.w.rt.clock.now())
        new_start = None
        if started is None:
            value: dict[str, Any] = {"channel": channel}
            if deadline is not None:
                value["deadline"] = deadline.isoformat()
            new_start = self.w.entry(EntryKind.FRAME_STARTED, fid, FrameKind.RECEIVE, attempt=1, dig=dig, value=value)
        while True:
            async with self.channel_locks[channel]:
                after = self.r.memo.cursors.get(channel, 0)
                messages = await store_call(self.w.rt.store.read_messages(channel, after, limit=1))
                if messages:
                    self.r.memo.cursors[channel] = messages[0].seq
            if messages:
                break
            if deadline is not None and deadline <= self.w.rt.clock.now():
                failed = self.w.entry(EntryKind.FRAME_FAILED, fid, FrameKind.RECEIVE, attempt=1, value={"final": True},
                                     error=timed_out(fid, f"receive on {channel}", str(timeout or deadline)))
                await self.w.write(plain(Write(entries=([new_start] if new_start else []) + [failed])))
                self.r.memo.outcome[fid] = failed
                raise frame_failed(fid, failed, 1)
            if new_start is not None:
                self.w.pending.append(new_start)
                self.r.memo.started[fid] = new_start
            await self.r.wait(Wait(fid, "message", at=deadline, channel=channel, after=after))
            new_start = None  # the suspension wrote it (a cached activation continues)
        started = new_start
        m = messages[0]
        value = {"channel": channel, "seq": m.seq, "payload": m.payload, "by": str(m.provenance.actor)}
        completed = self.w.entry(EntryKind.FRAME_COMPLETED, fid, FrameKind.RECEIVE, attempt=1, value=value)
        await self.w.write(plain(Write(entries=([started] if started else []) + [completed])))
        self.r.memo.outcome[fid] = completed
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
        fid, outcome = self.r.frame("sleep", None, FrameKind.SLEEP, dig)
        if outcome is not None:
            return Pending(fid, self.r.done(None))

        async def run() -> None:
            started = self.r.memo.started.get(fid)
            write = Write()
            if started is None:
                until = until_of(self.w.rt.clock.now())
                started = self.w.entry(EntryKind.FRAME_STARTED, fid, FrameKind.SLEEP, attempt=1, dig=dig, value={"until": until.isoformat()})
                self.r.memo.started[fid] = started
                write.entries.append(started)
            else:
                until = datetime.fromisoformat(started.value["until"])
            while until > self.w.rt.clock.now():
                self.w.pending.extend(write.entries)
                write.entries = []  # the suspension writes them (a cached activation continues)
                await self.r.wait(Wait(fid, "timer", at=until))
            completed = self.w.entry(EntryKind.FRAME_COMPLETED, fid, FrameKind.SLEEP, attempt=1, value=None)
            write.entries.append(completed)
            await self.w.write(plain(write))
            self.r.memo.outcome[fid] = completed

        return Pending(fid, self.r.spawn(run()))

    def child(self, workflow: str | Callable[..., Any], /, *args: Any, key: str | None = None) -> Awaitable[Any]:
        # a decider's execution may be a child too: it takes one input, and its end resumes this one
        decider = self.w.rt.registry.decider_of(workflow) if isinstance(workflow, str) else None
        wf: WorkflowDef | Decider = decider if decider is not None else self.w.rt.registry.get(workflow)
        if isinstance(wf, WorkflowDef):
            wf.bind(args)
        child_args = check_json(list(args), f"the arguments of child workflow {wf.name!r}", "args")
        dig = digest({"workflow": wf.name, "args": child_args})
        fid, outcome = self.r.frame(wf.name, key, FrameKind.CHILD, dig, {"args": child_args})
        if outcome is not None:
            return Pending(fid, self.r.outcome_value(fid, outcome))
        return Pending(fid, self.r.spawn(self._child(fid, wf, child_args, dig)))

    async def _child(self, fid: str, wf: WorkflowDef | Decider, args: list[Any], dig: str) -> Any:
        ceid = child_eid(self.w.eid, fid)
        if fid not in self.r.memo.started:
            started = self.w.entry(EntryKind.FRAME_STARTED, fid, FrameKind.CHILD, name=wf.name, attempt=1, dig=dig,
                                  value={"child": ceid, "args": args}, ref=wf.ref)
            # a child runs on its parent's queue, in its parent's application
            new = new_execution(self.w.rt, wf, ceid, args, queue=self.w.record.queue, parent=(self.w.eid, fid),
                                application=self.w.record.application, trace=self._child_trace())
            if isinstance(wf, Decider) and new.task is not None:  # its start is a command to it
                new = dataclasses.replace(new, task=dataclasses.replace(new.task, payload=dict(DECIDER_TASK)))
            await self.w.write(Write(entries=[started], executions=[new]))
            self.r.memo.started[fid] = started
        record = await store_call(self.w.rt.store.read_execution(ceid))
        while record is None or not record.terminal:
            await self.r.wait(Wait(fid, "child", child=ceid))
            record = await store_call(self.w.rt.store.read_execution(ceid))
        if record.status is Status.COMPLETED:
            entry = self.w.entry(EntryKind.FRAME_COMPLETED, fid, FrameKind.CHILD, name=wf.name, attempt=1, value=record.result)
            await self.w.write(plain(Write(entries=[entry])))
            self.r.memo.outcome[fid] = entry
            return record.result
        error = dict(record.error or {})
        error.setdefault("type", record.status.value)
        error["child"] = ceid
        error["message"] = f"child execution {ceid} {record.status.value}: {error.get('message', '')}"
        entry = self.w.entry(EntryKind.FRAME_FAILED, fid, FrameKind.CHILD, name=wf.name, attempt=1,
                            value={"final": True}, error=error)
        await self.w.write(plain(Write(entries=[entry])))
        self.r.memo.outcome[fid] = entry
        raise frame_failed(fid, entry, 1)

    def _child_trace(self) -> dict[str, str] | None:
        """What a child's started entry records of its trace: this activation's span (tracing on)."""
        return context_of(self.w.span.get_span_context()) if self.w.span is not None else None

    def delegate(
        self, queue: str, payload: Any, *, key: str | None = None, retry: RetryPolicy | None = None,
        timeout: timedelta | None = None,
    ) -> Pending:
        if not isinstance(queue, str) or not queue:
            raise ValueError(f"ctx.delegate takes a queue name, got {queue!r}")
        payload = check_json(payload, f"the payload of delegate on queue {queue!r} in workflow {self.w.wf.name!r}",
                             "payload")
        _timeout_of(timeout, "delegate")
        dig = digest([queue, payload])
        fid, outcome = self.r.frame("delegate", key, FrameKind.DELEGATE, dig, {"args": [queue, payload]})
        if outcome is not None:
            return Pending(fid, self.r.outcome_value(fid, outcome))
        return Pending(fid, self.r.spawn(self._delegate(fid, queue, payload, dig, retry or NO_RETRY, timeout)))

    async def _delegate(
        self, fid: str, queue: str, payload: Any, dig: str, policy: RetryPolicy, timeout: timedelta | None
    ) -> Any:
        """Each attempt is one DELEGATE task; a consumer answers or fails it (``Consumer``), the
        sweeper ends one whose lease expired; a failure or an expiry makes the next attempt."""
        deadline = _deadline(self.r.memo.started.get(fid), timeout, self.w.rt.clock.now())
        while True:
            outcome = self.r.memo.outcome.get(fid)
            if outcome is not None:  # an answer that a cached activation's continuation brought
                return await self.r.outcome_value(fid, outcome)
            attempt = await self.steps.retry_gate(fid, deadline)
            tid = task_id(TaskKind.DELEGATE, self.w.eid, f"{fid}@{attempt}")
            enqueued = (fid, attempt) in self.r.memo.attempts_started
            if deadline is not None and deadline <= self.w.rt.clock.now():
                await self._delegate_timed_out(fid, queue, attempt, tid if enqueued else None, timeout or deadline)
                continue  # the attempt ended meanwhile: its outcome came with the continuation
            if not enqueued:
                await self._issue(fid, queue, payload, dig, policy, attempt, tid, deadline)
            await self.r.wait(Wait(fid, "delegate", at=deadline, queue=queue))

    async def _issue(self, fid: str, queue: str, payload: Any, dig: str, policy: RetryPolicy, attempt: int, tid: str,
                     deadline: datetime | None) -> None:
        """Enqueue attempt ``attempt`` of a delegate frame: its frame.started and its DELEGATE task."""
        failures = self.r.memo.failures[fid][self.r.memo.base.get(fid, 0):]
        expiries = sum(1 for f in failures if (f.value or {}).get("expired"))
        value: dict[str, Any] = {"queue": queue, "task": tid}
        if deadline is not None:
            value["deadline"] = deadline.isoformat()
        started = self.w.entry(EntryKind.FRAME_STARTED, fid, FrameKind.DELEGATE, name="delegate", attempt=attempt,
                              dig=dig, value=value)
        frame = {"fid": fid, "tries": len(failures) - expiries + 1, "retry": policy_json(policy),
                 "expiries": expiries, "max_expiries": self.w.rt.options.delegate_expiries,
                 "workflow": self.w.wf.name, "version": self.w.wf.version}
        if self.w.span is not None:  # its consumer's spans join the execution's trace
            frame["trace"] = traceparent(self.w.trace)
        task = Task(id=tid, kind=TaskKind.DELEGATE, queue=queue, eid=self.w.eid, payload=payload,
                    provenance=self.w.rt.provenance(epoch=self.w.epoch, attempt=attempt), visible_at=self.w.rt.clock.now(),
                    application=self.w.record.application, attempt=attempt, frame=frame)
        # a consumer of this process that long-polls the queue gets the task leased, at once
        handoff = self.w.rt.polls.match(task, self.w.rt.clock.now())
        if handoff is not None:
            poll, task = handoff
        try:
            await self.w.write(Write(entries=[started], tasks=[task]))
        except BaseException as exc:
            if handoff is not None:
                if not poll.handed.done():
                    poll.handed.set_result(None)  # the poll goes on waiting
                if written_maybe(exc):  # stored all the same, perhaps: back to the queue, not leased to the poll
                    self.w.rt.polls.nack(task, poll.owner)
            raise
        if handoff is not None:
            if poll.handed.done():  # the poll went away meanwhile
                self.w.rt.polls.nack(task, poll.owner)
            else:
                poll.handed.set_result(task)
        self.r.memo.attempts_started.add((fid, attempt))
        self.r.memo.started.setdefault(fid, started)

    async def _delegate_timed_out(
        self, fid: str, queue: str, attempt: int, tid: str | None, timeout: object
    ) -> None:
        """The deadline passed first: the open attempt ends (its task withdrawn, so that a late
        answer is stale) and the frame fails with TimeoutError. If the attempt ended meanwhile (an
        answer, a failure, an expiry), its outcome is in the journal: wait for the RESUME it sent
        (a cached activation's continuation returns with it)."""
        failed = self.w.entry(EntryKind.FRAME_FAILED, fid, FrameKind.DELEGATE, name="delegate", attempt=attempt,
                             value={"final": True}, error=timed_out(fid, f"delegate on queue {queue}", str(timeout)))
        write = Write(entries=[failed], hold=TaskHold(tid, end="withdrawn") if tid else None)
        try:
            await self.w.write(write)
        except StaleAnswer:
            await self.r.wait(Wait(fid, "delegate", queue=queue))
            return
        self.r.memo.outcome[fid] = failed
        raise frame_failed(fid, failed, attempt)

    async def first(self, pending: Iterable[Awaitable[Any]]) -> Awaitable[Any]:
        waiting: list[Pending] = []
        for p in pending:
            if not isinstance(p, Pending):
                raise TypeError(f"ctx.first takes the awaitables of frames (delegate, receive, sleep, child), got {p!r}")
            waiting.append(p)
        if not waiting:
            raise ValueError("ctx.first takes at least one frame")
        futures = [asyncio.ensure_future(p.awaitable) for p in waiting]
        if not any(f.done() for f in futures):
            await asyncio.wait(futures, return_when=asyncio.FIRST_COMPLETED)
        done = [i for i, f in enumerate(futures) if f.done()]

        def order(i: int) -> tuple[float, int, int]:
            place = self.r.outcome_order(waiting[i].fid)
            return (*place, i) if place is not None else (float(1 << 62), 0, i)

        return waiting[min(done, key=order)]
