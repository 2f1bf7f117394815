"""Consumers of DELEGATE tasks: dequeue leases a task, nack gives it back, answer resumes the
execution, an expired lease ends the attempt and makes the next one, a stale answer is refused;
and a cancelled execution withdraws its open delegations."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from flowli import Context, Engine, Registry
from flowli.domain import Cancelled, ExecutionTerminalError, StaleAnswer, StepFailed, TaskKind, task_id
from flowli.patterns import delegate, inbox, review
from flowli.testing import Clock

from ..crash import until
from ..engine.conftest import wait_status

pytestmark = pytest.mark.integration

QUEUE = "translators"
LEASE = timedelta(seconds=1)
"""A tiny lease; the test clock makes it expire exactly when the test says."""


def explode() -> None:
    raise ValueError("the glossary is missing")


def registry_of_delegations() -> Registry:
    registry = Registry()

    @registry.workflow("translate")
    async def translate(ctx: Context, text: str) -> Any:
        return await delegate(ctx, QUEUE, {"text": text}, key="translation")

    @registry.workflow("translate_then_fail")
    async def translate_then_fail(ctx: Context, text: str) -> None:
        await ctx.enqueue(QUEUE, TaskKind.DELEGATE, {"text": text}, key="translation")
        await ctx.step(explode)

    @registry.workflow("sign_off")
    async def sign_off(ctx: Context, doc: str) -> Any:
        return await review(ctx, f"sign off {doc}", {"doc": doc})

    return registry


def attempt_of(eid: str, n: int) -> str:
    """The task id of attempt ``n`` of the translation frame."""
    return task_id(TaskKind.DELEGATE, eid, f"root/delegate:translation@{n}")


async def delegated(engine: Engine, text: str = "hello") -> tuple[str, str]:
    """Start ``translate`` and wait until it waits in ``delegate``; returns its eid and task id."""
    eid = await engine.start("translate", text)
    await wait_status(engine, eid, "suspended")
    tid = attempt_of(eid, 1)
    assert [(t.id, t.queue) for t in await engine.tasks(eid=eid) if t.kind is TaskKind.DELEGATE] == [(tid, QUEUE)]
    return eid, tid


async def until_attempt(engine: Engine, eid: str, n: int) -> None:
    async def open_attempt() -> list[str]:
        return [t.id for t in await engine.tasks(eid=eid) if t.id == attempt_of(eid, n)]

    await until(open_attempt, 40, f"attempt {n} on the queue")


async def test_dequeue_leases_the_task_until_its_lease_expires_then_the_next_attempt_is_delivered(open_engine):
    clock = Clock()
    async with open_engine(registry_of_delegations(), clock=clock) as engine:
        eid, tid = await delegated(engine)
        anna, ben = engine.consumer(QUEUE, "anna", lease=LEASE), engine.consumer(QUEUE, "ben", lease=LEASE)
        [task] = await anna.dequeue(limit=5)
        assert (task.id, task.lease_owner, task.deliveries, task.attempt) == (tid, "anna", 1, 1)
        assert await ben.dequeue() == []
        assert await anna.dequeue() == []  # leased to anna too: the lease is not hers to take twice
        await clock.advance(LEASE / 2)
        assert await ben.dequeue() == []
        await clock.advance(LEASE / 2)
        # the lease expired: the sweeper ends attempt 1 and the execution makes attempt 2
        await until_attempt(engine, eid, 2)
        [again] = await ben.dequeue()
        assert (again.id, again.lease_owner, again.deliveries, again.attempt) == (attempt_of(eid, 2), "ben", 1, 2)
        assert again.payload == task.payload
        with pytest.raises(StaleAnswer, match="withdrawn already"):
            await anna.answer(task, "hello?", by="anna@example.com")  # attempt 1 is over
        await ben.answer(again, "hallo", by="ben@example.com")
        assert await engine.result(eid, timeout=30) == "hallo"


async def test_nack_gives_the_task_back_at_once_or_after_a_delay(open_engine):
    clock = Clock()
    async with open_engine(registry_of_delegations(), clock=clock) as engine:
        eid, tid = await delegated(engine)
        anna, ben = engine.consumer(QUEUE, "anna", lease=LEASE), engine.consumer(QUEUE, "ben", lease=LEASE)
        [task] = await anna.dequeue()
        assert await ben.nack(task) is False  # not ben's lease
        assert await anna.nack(task) is True
        [task] = await ben.dequeue()
        assert task.lease_owner == "ben"
        assert await ben.nack(task, delay=timedelta(minutes=10)) is True
        await clock.advance(timedelta(minutes=5))  # past the lease, not past the delay
        assert await anna.dequeue() == []
        await clock.advance(timedelta(minutes=5))
        [task] = await anna.dequeue()
        assert (task.id, task.deliveries, task.attempt) == (tid, 3, 1)  # given back: the same attempt
        await anna.answer(task, "bonjour")
        assert await engine.result(eid, timeout=30) == "bonjour"


async def test_an_ack_of_an_attempt_still_open_is_refused_an_ack_of_an_answered_one_does_nothing(open_engine):
    async with open_engine(registry_of_delegations()) as engine:
        eid, tid = await delegated(engine)
        anna = engine.consumer(QUEUE, "anna", lease=LEASE)
        [task] = await anna.dequeue()
        with pytest.raises(ValueError, match=f"task {tid} is an open attempt of frame root/delegate:translation"):
            await anna.ack(task)
        await anna.answer(task, "hej")
        await anna.ack(task)  # after its answer: nothing to do
        assert await engine.result(eid, timeout=30) == "hej"
        assert (await engine.task(tid)).state == "acked"


async def test_a_late_answer_is_refused_and_the_first_one_stands(open_engine):
    clock = Clock()
    async with open_engine(registry_of_delegations(), clock=clock) as engine:
        eid, tid = await delegated(engine)
        anna, ben = engine.consumer(QUEUE, "anna", lease=LEASE), engine.consumer(QUEUE, "ben", lease=LEASE)
        [late] = await anna.dequeue()
        await clock.advance(LEASE)
        await until_attempt(engine, eid, 2)
        [first] = await ben.dequeue()
        await ben.answer(first, "hola", by="ben@example.com")
        assert await engine.result(eid, timeout=30) == "hola"
        before = await engine.journal(eid)
        with pytest.raises(StaleAnswer, match=f"task {tid} is stale"):
            await anna.answer(late, "ciao", by="anna@example.com")  # anna's lease had expired
        assert await engine.journal(eid) == before
        assert [e.value for e in before if e.kind.value == "frame.completed"] == ["hola"]
        assert await engine.tasks(queue=QUEUE) == []


async def test_an_answer_after_the_cancel_raises_and_leaves_nothing_on_the_queue(open_engine):
    clock = Clock()
    async with open_engine(registry_of_delegations(), clock=clock) as engine:
        eid, tid = await delegated(engine)
        anna = engine.consumer(QUEUE, "anna", lease=LEASE)
        [task] = await anna.dequeue()
        await engine.cancel(eid, by="dave@example.com")
        with pytest.raises(Cancelled):
            await engine.result(eid, timeout=30)
        with pytest.raises(StaleAnswer, match=f"task {tid} is stale: it was withdrawn already"):
            await anna.answer(task, "too late", by="anna@example.com")
        assert await engine.tasks(queue=QUEUE) == []
        await clock.advance(LEASE * 10)
        assert await engine.consumer(QUEUE, "ben").dequeue(limit=10) == []
        assert [e for e in await engine.journal(eid) if e.kind.value == "frame.completed"] == []


async def test_cancelling_an_execution_that_waits_in_delegate_withdraws_its_task(open_engine):
    async with open_engine(registry_of_delegations()) as engine:
        eid, tid = await delegated(engine, "cancel me")
        other, other_tid = await delegated(engine, "keep me")
        assert {t.id for t in await engine.tasks(queue=QUEUE)} == {tid, other_tid}
        await engine.cancel(eid, by="dave@example.com")
        with pytest.raises(Cancelled):
            await engine.result(eid, timeout=30)
        assert [t.id for t in await engine.tasks(queue=QUEUE)] == [other_tid]  # only its own task
        assert await engine.tasks(eid=eid) == []
        consumer = engine.consumer(QUEUE, "anna")
        [task] = await consumer.dequeue(limit=10)
        assert task.id == other_tid
        await consumer.answer(task, "behalten")
        assert await engine.result(other, timeout=30) == "behalten"


async def test_cancelling_an_execution_whose_task_a_consumer_holds_withdraws_it_too(open_engine):
    clock = Clock()
    async with open_engine(registry_of_delegations(), clock=clock) as engine:
        eid, tid = await delegated(engine)
        anna = engine.consumer(QUEUE, "anna", lease=LEASE)
        [task] = await anna.dequeue()
        await engine.cancel(eid)
        with pytest.raises(Cancelled):
            await engine.result(eid, timeout=30)
        assert await engine.tasks(queue=QUEUE) == []
        assert await anna.nack(task) is False  # a withdrawn task does not come back
        await clock.advance(LEASE * 10)
        assert await engine.consumer(QUEUE, "ben", lease=LEASE).dequeue() == []


async def test_cancelling_an_execution_that_waits_in_review_closes_it_in_the_inbox(open_engine):
    async with open_engine(registry_of_delegations()) as engine:
        eid = await engine.start("sign_off", "contract.pdf")
        [opened] = await until(lambda: inbox(engine), 20, "the review in the inbox")
        assert opened.eid == eid
        await engine.cancel(eid, by="dave@example.com")
        with pytest.raises(Cancelled):
            await engine.result(eid, timeout=30)
        assert await engine.tasks(queue=opened.queue) == []
        assert await inbox(engine) == []
        assert await engine.consumer(opened.queue, "approvals-ui").dequeue(limit=10) == []


async def test_an_answer_to_the_open_task_of_a_failed_execution_raises_and_acks_it(open_engine):
    async with open_engine(registry_of_delegations()) as engine:
        eid = await engine.start("translate_then_fail", "hello")
        with pytest.raises(StepFailed):
            await engine.result(eid, timeout=30)
        consumer = engine.consumer(QUEUE, "anna")
        [task] = await consumer.dequeue()  # only a cancel withdraws the delegations
        assert task.id == task_id(TaskKind.DELEGATE, eid, "translation") and task.frame is None
        with pytest.raises(ExecutionTerminalError, match=f"{eid}.*failed"):
            await consumer.answer(task, "hallo")
        assert await engine.tasks(queue=QUEUE) == []
