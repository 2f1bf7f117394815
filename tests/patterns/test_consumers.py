"""Consumers of DELEGATE tasks: dequeue leases a task, nack gives it back, ack drops it, answer
resumes the execution; and a cancelled execution withdraws its open delegations."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from flowli import Context, Engine, Registry
from flowli.domain import Cancelled, ExecutionTerminalError, StepFailed, TaskKind, task_id
from flowli.engine import reply_channel
from flowli.patterns import delegate, review
from flowli.testing import Clock

from ..crash import until
from ..engine.conftest import wait_status

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


async def delegated(engine: Engine, text: str = "hello") -> tuple[str, str]:
    """Start ``translate`` and wait until it waits in ``delegate``; returns its eid and task id."""
    eid = await engine.start("translate", text)
    await wait_status(engine, eid, "suspended")
    tid = task_id(TaskKind.DELEGATE, eid, "translation")
    assert [(t.id, t.queue) for t in await engine.tasks(eid=eid) if t.kind is TaskKind.DELEGATE] == [(tid, QUEUE)]
    return eid, tid


async def test_dequeue_leases_the_task_until_the_lease_expires(open_engine):
    clock = Clock()
    async with open_engine(registry_of_delegations(), clock=clock) as engine:
        eid, tid = await delegated(engine)
        anna, ben = engine.consumer(QUEUE, "anna", lease=LEASE), engine.consumer(QUEUE, "ben", lease=LEASE)
        [task] = await anna.dequeue(limit=5)
        assert (task.id, task.lease_owner, task.deliveries) == (tid, "anna", 1)
        assert await ben.dequeue() == []
        assert await anna.dequeue() == []  # leased to anna too: the lease is not hers to take twice
        await clock.advance(LEASE / 2)
        assert await ben.dequeue() == []
        await clock.advance(LEASE / 2)
        [again] = await ben.dequeue()  # the lease expired: delivery is at-least-once
        assert (again.id, again.lease_owner, again.deliveries) == (tid, "ben", 2)
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
        assert (task.id, task.deliveries) == (tid, 3)
        await anna.answer(task, "bonjour")
        assert await engine.result(eid, timeout=30) == "bonjour"


async def test_ack_drops_the_task_without_an_answer(open_engine):
    clock = Clock()
    async with open_engine(registry_of_delegations(), clock=clock) as engine:
        eid, tid = await delegated(engine)
        anna, ben = engine.consumer(QUEUE, "anna", lease=LEASE), engine.consumer(QUEUE, "ben", lease=LEASE)
        [task] = await anna.dequeue()
        await anna.ack(task)
        assert await engine.tasks(queue=QUEUE) == []
        await clock.advance(LEASE * 10)
        assert await ben.dequeue() == []
        assert await anna.nack(task) is False  # an acked task does not come back
        assert (await engine.status(eid)).status.value == "suspended"  # no answer: it still waits
        assert await engine.messages(eid, reply_channel(tid)) == []


async def test_the_first_answer_is_the_one_the_execution_receives(open_engine):
    clock = Clock()
    async with open_engine(registry_of_delegations(), clock=clock, worker=False) as engine:
        async with engine.worker(concurrency=4):
            eid, tid = await delegated(engine)
        anna, ben = engine.consumer(QUEUE, "anna", lease=LEASE), engine.consumer(QUEUE, "ben", lease=LEASE)
        [late] = await anna.dequeue()
        await clock.advance(LEASE)
        [first] = await ben.dequeue()
        await ben.answer(first, "hola", by="ben@example.com")
        await anna.answer(late, "ciao", by="anna@example.com")  # anna's lease had expired
        assert [m.payload for m in await engine.messages(eid, reply_channel(tid))] == ["hola", "ciao"]
        async with engine.worker(concurrency=4):
            assert await engine.result(eid, timeout=30) == "hola"
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
        with pytest.raises(ExecutionTerminalError, match=f"{eid}.*cancelled"):
            await anna.answer(task, "too late", by="anna@example.com")
        assert await engine.tasks(queue=QUEUE) == []
        await clock.advance(LEASE * 10)
        assert await engine.consumer(QUEUE, "ben").dequeue(limit=10) == []
        assert await engine.messages(eid, reply_channel(tid)) == []


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
        [opened] = await until(engine.inbox, 20, "the review in the inbox")
        assert opened.eid == eid
        await engine.cancel(eid, by="dave@example.com")
        with pytest.raises(Cancelled):
            await engine.result(eid, timeout=30)
        assert await engine.tasks(queue=opened.queue) == []
        assert await engine.inbox() == []
        assert await engine.consumer(opened.queue, "approvals-ui").dequeue(limit=10) == []


async def test_an_answer_to_the_open_task_of_a_failed_execution_raises_and_acks_it(open_engine):
    async with open_engine(registry_of_delegations()) as engine:
        eid = await engine.start("translate_then_fail", "hello")
        with pytest.raises(StepFailed):
            await engine.result(eid, timeout=30)
        consumer = engine.consumer(QUEUE, "anna")
        [task] = await consumer.dequeue()  # only a cancel withdraws the delegations
        assert task.id == task_id(TaskKind.DELEGATE, eid, "translation")
        with pytest.raises(ExecutionTerminalError, match=f"{eid}.*failed"):
            await consumer.answer(task, "hallo")
        assert await engine.tasks(queue=QUEUE) == []
