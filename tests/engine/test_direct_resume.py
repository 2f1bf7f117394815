"""A direct resume: an answer to a delegated task, made in a process whose worker has a free slot
on the execution's queue, takes the execution's lease in its own write and runs the resumed
activation there at once; its RESUME task is written acked, so no worker dequeues it. Without
such a slot (no worker, another queue, a full worker, an execution not suspended), the answer
enqueues its RESUME as before and a worker dequeues it."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from flowli import Context, Registry
from flowli.domain import Actor, Code, Provenance, Site, Status, TaskKind, task_id
from flowli.store import Acquisition, Resume, Write
from flowli.testing import store_of

from ..crash import until
from .conftest import wait_status
from .test_hot_path import accepting

pytestmark = pytest.mark.integration

QUEUE = "reviewers"
LEASE = timedelta(seconds=10)


def app() -> Registry:
    registry = Registry()

    @registry.workflow("review")
    async def review(ctx: Context, doc: str) -> Any:
        verdict = await ctx.delegate(QUEUE, {"doc": doc}, key="verdict")
        return {"doc": doc, "verdict": verdict}

    @registry.workflow("occupy")
    async def occupy(ctx: Context) -> str:
        return await ctx.step(hold)

    return registry


RELEASE: dict[str, asyncio.Event] = {}


async def hold() -> str:
    await RELEASE["occupy"].wait()
    return "held"


async def delegated(engine: Any, eid: str) -> Any:
    """The DELEGATE task of ``eid``, once its execution suspended on it, dequeued by a consumer."""
    await wait_status(engine, eid, "suspended", timeout=30)
    bot = engine.consumer(QUEUE, "bot", lease=LEASE)

    async def dequeued() -> Any:
        got = await bot.dequeue()
        return got[0] if got else None

    return bot, await until(dequeued, 30, f"the delegated task of {eid}")


def resume_of(task: Any) -> str:
    return task_id(TaskKind.RESUME, task.eid, f"answer:{task.id}")


async def test_an_answer_beside_a_free_worker_slot_resumes_there_without_the_queue(open_engine):
    async with open_engine(app(), worker=False) as engine:
        async with engine.worker(concurrency=4, queues=("default",)) as worker:
            await accepting(worker)
            eid = await engine.start("review", "q3.pdf")
            bot, task = await delegated(engine, eid)
            epoch = (await engine.status(eid)).lease_epoch
            await bot.answer(task, "approved", by="ann@example.com")
            assert await engine.result(eid, timeout=30) == {"doc": "q3.pdf", "verdict": "approved"}
            assert worker.reserved == 0
        [resume] = [t for t in await engine.tasks(eid=eid, include_acked=True) if t.kind is TaskKind.RESUME]
        assert resume.id == resume_of(task)
        assert (resume.state, resume.deliveries) == ("acked", 0)  # never dequeued
        final = await engine.status(eid)
        assert final.status is Status.COMPLETED and final.lease_epoch == epoch + 1  # one lease: the answer's


async def test_an_answer_without_a_worker_here_enqueues_its_resume(open_engine):
    async with open_engine(app(), worker=False) as engine:
        async with engine.worker(concurrency=4) as worker:
            await accepting(worker)
            eid = await engine.start("review", "q4.pdf")
            bot, task = await delegated(engine, eid)
        await bot.answer(task, "rejected")  # this process runs no worker now
        [resume] = [t for t in await engine.tasks(eid=eid, include_acked=True) if t.kind is TaskKind.RESUME]
        assert (resume.id, resume.state, resume.lease_owner) == (resume_of(task), "ready", None)
        assert (await engine.status(eid)).status is Status.SUSPENDED
        async with engine.worker(concurrency=4):
            assert await engine.result(eid, timeout=30) == {"doc": "q4.pdf", "verdict": "rejected"}
        [resume] = [t for t in await engine.tasks(eid=eid, include_acked=True) if t.kind is TaskKind.RESUME]
        assert resume.state == "acked" and resume.deliveries == 1  # through the queue


async def test_a_worker_on_another_queue_or_without_a_free_slot_leaves_the_resume_to_the_queue(open_engine):
    async with open_engine(app(), worker=False) as engine:
        async with engine.worker(concurrency=4):
            eid = await engine.start("review", "q5.pdf")
            bot, task = await delegated(engine, eid)
        async with engine.worker(concurrency=4, queues=("other",)) as other:
            await accepting(other)
            await bot.answer(task, "approved")
            assert other.reserved == 0 and other.running == {}
        [resume] = [t for t in await engine.tasks(eid=eid, include_acked=True) if t.kind is TaskKind.RESUME]
        assert resume.state == "ready"

        release = RELEASE["occupy"] = asyncio.Event()
        second = await engine.start("review", "q6.pdf")
        async with engine.worker(concurrency=1) as full:
            await accepting(full)
            bot2, task2 = await delegated(engine, second)
            assert await engine.result(eid, timeout=30) == {"doc": "q5.pdf", "verdict": "approved"}
            blocker = await engine.start("occupy")  # takes the one slot
            await until(lambda: len(full.running) + full.reserved >= full.concurrency, 30, "the worker's one slot taken")
            await bot2.answer(task2, "approved")
            assert full.reserved == 0
            [resume2] = [t for t in await engine.tasks(eid=second, include_acked=True)
                         if t.kind is TaskKind.RESUME]
            assert (resume2.id, resume2.state) == (resume_of(task2), "ready")
            release.set()
            assert await engine.result(blocker, timeout=30) == "held"
            assert await engine.result(second, timeout=30) == {"doc": "q6.pdf", "verdict": "approved"}


async def test_a_take_leases_only_a_suspended_execution_of_its_queues_with_a_free_lease(open_engine):
    async with open_engine(app(), worker=False) as engine:
        async with engine.worker(concurrency=4):
            eid = await engine.start("review", "q7.pdf")
            await wait_status(engine, eid, "suspended", timeout=30)
        store, now, owner = store_of(engine), engine.clock.now(), "elsewhere:1"
        until_ = now + LEASE

        def resume(n: int) -> Resume:
            return Resume(id=task_id(TaskKind.RESUME, eid, f"probe:{n}"), eid=eid, payload=None,
                          provenance=Provenance(Actor("worker", owner), Site(worker=owner), Code(), now), visible_at=now)

        wrong_queue = await store.write(Write(resumes=[resume(1)], acquire=Acquisition(eid, resume(1).id, owner, until_, ("other",))), now)
        assert wrong_queue.acquired is None
        assert (await engine.status(eid)).lease_owner is None
        taken = await store.write(Write(resumes=[resume(2)], acquire=Acquisition(eid, resume(2).id, owner, until_, ("default",))), now)
        assert taken.acquired is not None and taken.acquired.record is not None
        record = await engine.status(eid)
        assert (record.status, record.lease_owner, record.lease_epoch) == (Status.RUNNING, owner, taken.acquired.epoch)
        assert [e.seq for e in taken.acquired.journal] == list(range(1, len(taken.acquired.journal) + 1))
        assert taken.acquired.journal[-1].kind.value == "execution.suspended"
        # held now (and running, not suspended): a second take changes nothing but its RESUME
        again = await store.write(Write(resumes=[resume(3)], acquire=Acquisition(eid, resume(3).id, "another:2", until_, ("default",))), now)
        assert again.acquired is None
        assert (await engine.status(eid)).lease_owner == owner
        states = {t.id: t.state for t in await store.read_tasks(eid=eid, include_acked=True)}
        assert (states[resume(1).id], states[resume(2).id], states[resume(3).id]) == ("ready", "acked", "ready")
