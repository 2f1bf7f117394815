"""Consumers of DELEGATE tasks: a service, an agent or a person's tool outside the engine that
dequeues the tasks of one queue, renews their leases, answers or fails them, or gives them back.

    consumer = engine.consumer("humans", name="approvals-ui")
    for task in await consumer.dequeue(limit=10):
        await consumer.answer(task, {"approved": True}, by="carol@example.com")

A task of a ``ctx.delegate`` frame is one attempt of that frame. Its answer is the frame's
outcome, appended to the execution's journal with the answerer's provenance, in one write with
the task's end and a RESUME; a failure is a failed attempt, which the frame's retry policy
decides. Both are fenced by the task's lease: an answer or a failure for an attempt that this
consumer no longer holds (its lease expired or went to another consumer, a later attempt replaced
it, it was answered, the execution was cancelled) is refused with StaleAnswer and changes nothing.
Delivery is at-least-once: a consumer that dies holding a task makes the sweeper end that attempt
once its lease expires, and the work is delivered again as the next attempt.

A task enqueued on its own (``ctx.enqueue(queue, "DELEGATE", ...)``) has no frame: its answer is a
message on the reply channel of its execution (``reply:{task id}``), which the workflow receives.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from flowli.domain import (
    TERMINAL,
    Actor,
    Code,
    Entry,
    EntryKind,
    ExecutionStateError,
    ExecutionTerminalError,
    FrameKind,
    Principal,
    Status,
    Task,
    TaskKind,
    UnknownExecutionError,
    check_json,
    principal_for,
    task_id,
)
from flowli.store import Acquisition, NewItem, NewMessage, Resume, TaskHold, Write

from . import _deciding as deciding
from ._handoff import Poll
from ._runtime import WORK, Runtime
from ._steps import failure_entry_value, policy_from_json
from ._transitions import Transition, commit

_LIVE = frozenset(Status) - TERMINAL

log = logging.getLogger("flowli.engine")


def reply_channel(task_id_: str) -> str:
    """The channel (execution scope) on which the answer of a task without a frame arrives."""
    return f"reply:{task_id_}"


class Consumer:
    def __init__(self, rt: Runtime, queue: str | Sequence[str], name: str, lease: timedelta,
                 application: str | None = None):
        self.rt = rt
        self.queues = [queue] if isinstance(queue, str) else list(queue)
        if not self.queues or not all(isinstance(q, str) and q for q in self.queues):
            raise ValueError(f"a consumer takes a queue name or a list of them, got {queue!r}")
        self.queue = self.queues[0]
        self.name = name
        self.lease = lease
        self.application = application

    async def dequeue(self, limit: int = 1, *, wait: float = 0.0) -> list[Task]:
        """Lease up to ``limit`` DELEGATE tasks of the queues; each stays invisible for the lease.
        With ``wait`` (seconds), a long poll: when none is ready, wait until one is enqueued (this
        process wakes the poll at once; another process's enqueue by its notification, or within
        the poll interval on a store that cannot notify) or ``wait`` passes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, wait)
        keys = [("queue", q) for q in self.queues]
        while True:
            with self.rt.wakeups.hub.subscribe(*keys, WORK) as enqueued:
                tasks = await self._dequeue_now(limit)
                remaining = deadline - loop.time()
                if tasks or remaining <= 0:
                    return tasks
                # a delegation of this process meanwhile is handed to this poll (see _handoff)
                poll = Poll(tuple(self.queues), self.application, self.name, self.lease)
                handed = await self._wait(poll, enqueued, min(remaining, self.rt.options.poll_interval * 2))
                if handed is not None:
                    return [handed]

    async def _wait(self, poll: Poll, enqueued: asyncio.Event, timeout: float) -> Task | None:
        """Wait for an enqueue or a hand-off; the task handed, if one was."""
        self.rt.polls.wait(poll)
        woke: asyncio.Future[Any] = asyncio.ensure_future(enqueued.wait())
        handed: asyncio.Future[Any] = poll.handed
        try:
            await asyncio.wait([woke, handed], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if not poll.matched:
                return None
            return await poll.handed  # its writer resolves it: the task, or None when its write failed
        except asyncio.CancelledError:
            if poll.matched:
                if not poll.handed.done():
                    poll.handed.cancel()  # the writer gives the task back
                elif not poll.handed.cancelled() and (given := poll.handed.result()) is not None:
                    self.rt.polls.nack(given, self.name)
            raise
        finally:
            woke.cancel()
            self.rt.polls.leave(poll)

    async def present(self) -> None:
        """Say that this consumer is alive now: its row among the workers (its name, its queues)
        is seen now. ``engine.explain`` tells a delegation whose queue had a consumer that said so
        and has none alive now. A consumer that never says so is not counted either way."""
        await self.rt.store.register_worker(self.name, "consumer", self.queues, self.rt.clock.now())

    async def read(self, task_id_: str) -> Task | None:
        """The task ``task_id_`` of this consumer's queues (and application), or None."""
        task = await self.rt.store.read_task(task_id_)
        if task is None or task.queue not in self.queues or \
                (self.application is not None and task.application != self.application):
            return None
        return task

    async def _dequeue_now(self, limit: int) -> list[Task]:
        rt = self.rt
        fetch = asyncio.ensure_future(
            rt.store.dequeue(self.queues, [TaskKind.DELEGATE], self.name, limit, self.lease, rt.clock.now()))
        try:
            tasks = await asyncio.shield(fetch)
        except asyncio.CancelledError:
            # the poll went away while the store leased: what it leased goes back at once (as a
            # hand-off to a poll that went away), not when the lease runs out
            def give_back(done: asyncio.Future[list[Task]]) -> None:
                if not done.cancelled() and done.exception() is None:
                    for t in done.result():
                        rt.polls.nack(t, self.name)

            fetch.add_done_callback(give_back)
            raise
        if len(tasks) > limit:  # a store that leased more than asked: the rest back at once, not held unseen
            log.warning("the store leased %d tasks for a dequeue of %d: the rest go back to the queue", len(tasks), limit)
            for t in tasks[limit:]:
                rt.polls.nack(t, self.name)
            tasks = tasks[:limit]
        if self.application is not None:
            for t in tasks:
                if t.application != self.application:  # not this consumer's tenant: back at once
                    await rt.store.nack(t.id, self.name, timedelta(0), rt.clock.now())
            tasks = [t for t in tasks if t.application == self.application]
        return tasks

    async def renew(self, task: Task) -> Task:
        """Extend the lease of a task this consumer holds; StaleAnswer when it no longer does
        (stop the work: another attempt may be under way)."""
        return await self.rt.store.renew_task(task.id, self.name, self.lease, self.rt.clock.now())

    async def ack(self, task: Task) -> None:
        """The task is done and needs no answer. An attempt of a frame ends with its answer or its
        failure: an ack of one already answered does nothing, of one still open is refused."""
        if task.frame is not None:
            current = await self.rt.store.read_task(task.id)
            if current is not None and current.state == "ready":
                raise ValueError(f"task {task.id} is an open attempt of frame {task.frame['fid']}: answer it or fail it"
                                 " (ack ends a task that needs no answer)")
            return
        await self.rt.store.write(Write(acks=[(task.id, None)]), self.rt.clock.now())

    async def nack(self, task: Task, delay: timedelta = timedelta(0)) -> bool:
        """Give the task back to the queue, visible again after ``delay`` (the same attempt)."""
        return await self.rt.store.nack(task.id, self.name, delay, self.rt.clock.now())

    async def answer(self, task: Task, value: Any, by: str | Principal | None = None, *,
                     items: Sequence[NewItem] = ()) -> int | None:
        """Answer a task as ``by`` (an email address for a person): the frame's outcome, the task's
        end and a RESUME in one write, with ``items`` (a stale answer writes none of them).
        Returns the message seq for a task without a frame."""
        return await settle(self.rt, self.name, task, value, None, by, TaskHold(task.id, owner=self.name), items)

    async def fail(
        self, task: Task, error_type: str, message: str, *, retryable: bool = True, by: str | Principal | None = None,
        details: Any = None, items: Sequence[NewItem] = (),
    ) -> None:
        """Report that this attempt failed; the frame's retry policy decides whether another one
        runs (``retryable=False``: none). ``details`` (JSON) reach a decider with its command
        ``Failed``; a workflow's frame keeps none. ``items`` go in the same write."""
        if not isinstance(error_type, str) or not error_type:
            raise ValueError(f"fail takes an error type such as 'TIMEOUT', got {error_type!r}")
        await settle(self.rt, self.name, task, check_json(details, f"the details of the failure of task {task.id}"),
                     (error_type, str(message), retryable), by, TaskHold(task.id, owner=self.name), items)


def _settled(task: Task, value: Any, failure: tuple[str, str, bool] | None,
             decision: bool) -> tuple[str, dict[str, Any]]:
    """The kind and payload of the transition that answers or fails ``task`` (a person's
    decision says so)."""
    if failure is not None:
        return "fail", {"task": task.id, "attempt": task.attempt, "error_type": failure[0], "message": failure[1]}
    return "answer", {"task": task.id, "attempt": task.attempt, "value": value, **({"decision": True} if decision else {})}


async def _settle_decided(rt: Runtime, task: Task, value: Any, failure: tuple[str, str, bool] | None,
                          principal: Principal, hold: TaskHold, items: Sequence[NewItem] = (),
                          decision: bool = False) -> None:
    """An answer or a failure of a decider's DELEGATE task: the command goes to its decider in
    the write that ends the task under ``hold`` (a fenced answer: a stale one changes nothing)."""
    assert task.eid is not None
    command = deciding.answer_command(task, value, failure, str(principal.actor))
    kind, payload = _settled(task, value, failure, decision)
    try:
        result = await deciding.apply(rt, task.eid, command, kind=kind, base=lambda: Write(hold=hold, items=list(items)),
                                      principal=principal, payload=payload)
    except (ExecutionStateError, UnknownExecutionError):
        result = None
    if result is None:  # its end withdrew the task already: nothing to end here
        record = await rt.store.read_execution(task.eid)
        raise ExecutionTerminalError(task.eid, record.status.value if record else "unknown", f"{kind} task {task.id} of")
    if rt.tracing is not None:
        rt.tracing.delegate_ended(task, rt.clock.now(), None if failure is None else f"{failure[0]}: {failure[1]}",
                                  **{"flowli.answered_by": str(principal.actor)})


async def settle(
    rt: Runtime, name: str, task: Task, value: Any, failure: tuple[str, str, bool] | None,
    by: str | Principal | None, hold: TaskHold, items: Sequence[NewItem] = (), *, decision: bool = False,
) -> int | None:
    """Answer or fail a DELEGATE task (``failure``: error type, message, retryable) under ``hold``:
    a consumer's own lease, or, for an operator's answer (``engine.answer``), whoever holds it.
    ``decision``: a person's answer to a decision (its transition says so)."""
    if task.kind is not TaskKind.DELEGATE or task.eid is None:
        raise ValueError(f"task {task.id} is not a DELEGATE task of an execution")
    if failure is None:
        value = check_json(value, f"the answer to task {task.id}")
    principal = principal_for(by, Actor("system", name), task.application)
    actor = principal.actor
    frame = task.frame
    if frame is not None and frame.get("decider"):
        await _settle_decided(rt, task, value, failure, principal, hold, items, decision)
        return None
    code = Code(frame.get("workflow"), frame.get("version"), FrameKind.DELEGATE.value, "delegate") if frame else Code()
    prov = rt.provenance(actor=actor, code=code, attempt=task.attempt,
                         on_behalf_of=by if isinstance(by, str) and actor.kind != "human" else None)
    now = rt.clock.now()
    resume = Resume(id=task_id(TaskKind.RESUME, task.eid, f"answer:{task.id}"), eid=task.eid, payload=None,
                    provenance=prov, visible_at=now)
    if frame is None:
        if failure is not None:
            raise ValueError(f"task {task.id} has no frame to fail: answer it, or ack it")
        # a task enqueued on its own: the answer is a message on its reply channel
        write = Write(expect=(task.eid, _LIVE), messages=[NewMessage(
            f"{task.eid}.{reply_channel(task.id)}", value, prov, application=task.application)],
            acks=[(task.id, None)], resumes=[resume], items=list(items))
    else:
        if failure is None:
            entry = Entry(eid=task.eid, kind=EntryKind.FRAME_COMPLETED, provenance=prov, fid=frame["fid"],
                          attempt=task.attempt, value=value)
        else:
            error_type, message, retryable = failure
            outcome = failure_entry_value(policy_from_json(frame["retry"]), frame["tries"], None, now,
                                          retryable=retryable)
            entry = Entry(eid=task.eid, kind=EntryKind.FRAME_FAILED, provenance=prov, fid=frame["fid"],
                          attempt=task.attempt, value=outcome,
                          error={"type": error_type, "module": None, "message": message})
        write = Write(expect=(task.eid, _LIVE), entries=[entry], hold=hold, resumes=[resume], items=list(items))
    # a worker of this process with a free slot runs the resumed execution at once: the write
    # acquires its lease, so its RESUME goes through no queue (as a direct start's START)
    worker = rt.slots.reserve(None)
    if worker is not None:
        write = dataclasses.replace(write, acquire=Acquisition(task.eid, resume.id, rt.owner, now + rt.options.lease_ttl,
                                                     tuple(worker.queues), rt.cache.horizon(task.eid)))
    kind, payload = _settled(task, value, failure, decision)
    try:
        result = await commit(rt, Transition(kind, write, task.eid, code.workflow, principal,
                                             task.application, payload))
    except ExecutionStateError as exc:
        if worker is not None:
            worker.unreserve()
        await rt.store.write(Write(acks=[(task.id, None)]), rt.clock.now())  # nobody waits for it any more
        raise ExecutionTerminalError(task.eid, exc.status, f"{kind} task {task.id} of") from None
    except BaseException:
        if worker is not None:
            worker.unreserve()
        raise
    if rt.tracing is not None:
        rt.tracing.delegate_ended(task, now, None if failure is None else f"{failure[0]}: {failure[1]}",
                                  **{"flowli.answered_by": str(actor)})
    if worker is not None:
        acquired = result.acquired
        if acquired is not None and acquired.record is not None:
            worker.adopt(acquired.record, acquired.journal, key=resume.id, after=acquired.after)
        else:
            worker.unreserve()
    return result.message_seqs[0] if result.message_seqs else None
