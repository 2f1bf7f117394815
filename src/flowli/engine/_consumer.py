"""Consumers of DELEGATE tasks: a service, an agent or a person's tool outside the engine that
dequeues the tasks of one queue, answers them, or gives them back.

    consumer = engine.consumer("humans", name="approvals-ui")
    for task in await consumer.dequeue(limit=10):
        await consumer.answer(task, {"approved": True}, by="carol@example.com")

An answer is a message on the reply channel of the task's execution (``reply:{task id}``, the
channel that ``flowli.patterns.delegate`` receives on), sent together with the ack and a RESUME
in one write. Delivery is at-least-once: a task whose lease expires before its answer is
dequeued again; the first answer is the one the execution receives.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from flowli.domain import (
    TERMINAL,
    Actor,
    Code,
    ExecutionStateError,
    ExecutionTerminalError,
    Status,
    Task,
    TaskKind,
    actor_for,
    check_json,
    principal_for,
    task_id,
)
from flowli.store import NewMessage, Write

from ._runtime import Runtime
from ._transitions import Transition, commit

_LIVE = frozenset(Status) - TERMINAL


def reply_channel(task_id_: str) -> str:
    """The channel (execution scope) on which a DELEGATE task's answer arrives."""
    return f"reply:{task_id_}"


class Consumer:
    def __init__(self, rt: Runtime, queue: str, name: str, lease: timedelta):
        self.rt = rt
        self.queue = queue
        self.name = name
        self.lease = lease

    async def dequeue(self, limit: int = 1) -> list[Task]:
        """Lease up to ``limit`` DELEGATE tasks of the queue; each stays invisible for the lease."""
        return await self.rt.store.dequeue(
            [self.queue], [TaskKind.DELEGATE], self.name, limit, self.lease, self.rt.clock.now()
        )

    async def ack(self, task: Task) -> None:
        """The task is done and needs no answer."""
        await self.rt.store.write(Write(acks=[(task.id, None)]), self.rt.clock.now())

    async def nack(self, task: Task, delay: timedelta = timedelta(0)) -> bool:
        """Give the task back to the queue, visible again after ``delay``."""
        return await self.rt.store.nack(task.id, self.name, delay, self.rt.clock.now())

    async def answer(self, task: Task, value: Any, by: str | None = None) -> int:
        """Send the answer to the execution, ack the task and resume the execution, in one write.
        ``by`` names who answered (an email address for a person): the answer carries it."""
        if task.kind is not TaskKind.DELEGATE or task.eid is None:
            raise ValueError(f"task {task.id} is not a DELEGATE task of an execution")
        value = check_json(value, f"the answer to task {task.id}")
        actor = actor_for(by, Actor("system", self.name))
        record = await self.rt.store.read_execution(task.eid)
        prov = self.rt.provenance(
            actor=actor, code=Code(record.workflow if record else None, record.version if record else None),
            on_behalf_of=by if actor.kind != "human" else None,
        )
        now = self.rt.clock.now()
        resume = Task(
            id=task_id(TaskKind.RESUME, task.eid, f"answer:{task.id}"), kind=TaskKind.RESUME,
            queue=record.queue if record else "default", eid=task.eid, payload=None, provenance=prov, visible_at=now,
        )
        write = Write(
            expect=(task.eid, _LIVE),
            messages=[NewMessage(f"{task.eid}.{reply_channel(task.id)}", value, prov)],
            acks=[(task.id, None)],
            tasks=[resume],
        )
        try:
            result = await commit(self.rt, Transition("answer", write, task.eid, record.workflow if record else None,
                                                      principal_for(by, actor), task.application,
                                                      {"task": task.id, "value": value}))
        except ExecutionStateError as exc:
            await self.ack(task)  # nobody waits for it any more
            raise ExecutionTerminalError(task.eid, exc.status, f"answer task {task.id} of") from None
        return result.message_seqs[0]
