"""Many executions through the batched hot path: the START and RESUME tasks of one dequeue
acquired in one store call (acquire_many), suspensions on timers and ends that clear them written
in one statement each (PostgreSQL), batched with the other writes of the worker."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from flowli import Context, Registry
from flowli.domain import EntryKind, Status, TaskKind
from flowli.testing import store_of

from .conftest import wait_idle, wait_status

pytestmark = pytest.mark.integration


def double(x: int) -> int:
    return 2 * x


def add(a: int, b: int) -> int:
    return a + b


async def no_ready_tasks(engine, timeout: float = 5.0) -> list:
    """The ready tasks left once the worker is idle (polled briefly: a task of an execution that
    ended is acked when it is dequeued)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        left = await engine.tasks()
        if not left or loop.time() > end:
            return left
        await asyncio.sleep(0.05)


async def test_fifty_executions_that_sleep_then_step_all_complete_and_leave_nothing(open_engine):
    registry = Registry()

    @registry.workflow("nap")
    async def nap(ctx: Context, n: int) -> int:
        await ctx.sleep(timedelta(seconds=0.2))
        return await ctx.step(double, n)

    async with open_engine(registry) as engine:
        eids = [await engine.start("nap", n) for n in range(50)]
        results = await asyncio.gather(*(engine.result(eid, timeout=30) for eid in eids))
        assert results == [2 * n for n in range(50)]
        await wait_idle(engine)
        assert await engine.timers() == []
        assert await no_ready_tasks(engine) == []
        for eid in eids:
            journal = await engine.journal(eid)
            kinds = [e.kind for e in journal]
            assert kinds[0] is EntryKind.EXECUTION_STARTED and kinds[-1] is EntryKind.EXECUTION_COMPLETED
            assert kinds.count(EntryKind.EXECUTION_COMPLETED) == 1
            assert EntryKind.EXECUTION_SUSPENDED in kinds  # it did wait on its timer
            assert [e.seq for e in journal] == list(range(1, len(journal) + 1))
            record = await engine.status(eid)
            assert (record.status, record.lease_owner) == (Status.COMPLETED, None)


async def test_executions_waiting_in_a_receive_across_a_worker_stop_all_complete(open_engine):
    """30 executions wait in a receive; the worker stops; their signals pile up as RESUME tasks
    (two for some executions: the same eid twice in one dequeue); a new worker takes them."""
    registry = Registry()

    @registry.workflow("inbox")
    async def inbox(ctx: Context, n: int) -> int:
        got = await ctx.receive("go")
        if n % 3 == 0:
            got += await ctx.receive("go")
        return await ctx.step(add, n, got)

    async with open_engine(registry, worker=False) as engine:
        async with engine.worker(concurrency=16):
            eids = [await engine.start("inbox", n) for n in range(30)]
            for eid in eids:
                await wait_status(engine, eid, "suspended")
            await wait_idle(engine)
        # no worker now: every signal leaves a RESUME for the next one
        for n, eid in enumerate(eids):
            if n % 2 == 0:
                await engine.signal(eid, "go", 100)
                if n % 3 == 0:
                    await engine.signal(eid, "go", 1000)
        waiting = [t for t in await engine.tasks() if t.kind is TaskKind.RESUME]
        assert len(waiting) == sum(1 + (n % 3 == 0) for n in range(0, 30, 2))
        # the eids the worker asks for in each acquire_many (a recorder: the real store answers)
        asked: list[list[str]] = []
        store = store_of(engine)
        acquire_many = store.acquire_many

        async def recorded(wanted, *args, **kwargs):
            asked.append([eid for eid, _ in wanted])
            return await acquire_many(wanted, *args, **kwargs)

        store.acquire_many = recorded  # type: ignore[method-assign]
        async with engine.worker(concurrency=16):
            # the others while the new worker runs
            for n, eid in enumerate(eids):
                if n % 2 == 1:
                    await engine.signal(eid, "go", 100)
                    if n % 3 == 0:
                        await engine.signal(eid, "go", 1000)
            results = await asyncio.gather(*(engine.result(eid, timeout=30) for eid in eids))
            assert results == [n + 100 + (1000 if n % 3 == 0 else 0) for n in range(30)]
            await wait_idle(engine)
            assert await no_ready_tasks(engine) == []
        # the piled-up RESUMEs went in one call (up to the worker's 16 slots), with an eid twice
        assert max(map(len, asked)) == 16, asked
        assert any(len(set(a)) < len(a) for a in asked), asked
        for eid in eids:
            record = await engine.status(eid)
            assert (record.status, record.lease_owner) == (Status.COMPLETED, None)
            assert await store.waiters(f"{eid}.go") == []


async def test_a_worker_stopped_while_it_dequeues_gives_the_tasks_back(open_engine):
    """A stop that lands while the store dequeues: the tasks that dequeue took are given back at
    once (ready, leased to no one), not left leased to the stopped worker for task_ttl (30 s)."""
    registry = Registry()

    @registry.workflow("waiter")
    async def waiter(ctx: Context, n: int) -> int:
        return n + await ctx.receive("go")

    async with open_engine(registry, worker=False) as engine:
        async with engine.worker(concurrency=16):
            eids = [await engine.start("waiter", n) for n in range(30)]
            for eid in eids:
                await wait_status(engine, eid, "suspended")
            await wait_idle(engine)
        for eid in eids:
            await engine.signal(eid, "go", 100)
        async with engine.worker(concurrency=16):
            await asyncio.sleep(0)  # the worker's first dequeue is in flight as its block ends
        leased = [t.id for t in await engine.tasks() if t.lease_owner is not None]
        assert leased == [], f"tasks left leased to a stopped worker: {leased}"
        async with engine.worker(concurrency=16):
            results = await asyncio.gather(*(engine.result(eid, timeout=20) for eid in eids))
        assert results == [n + 100 for n in range(30)]
