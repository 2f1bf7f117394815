"""Tasks, queues, leases and the control log."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest

from flowli import Context, Registry
from flowli.domain import EntryKind, LeaseLost, Status, TaskKind
from flowli.store import Write
from flowli.testing import Clock, store_of

from .conftest import kinds, wait_status

pytestmark = pytest.mark.integration


def heavy(x: int) -> int:
    """A module-level step: a RUN_STEP worker imports it by reference."""
    return x * x


async def test_start_with_a_key_is_idempotent(open_engine):
    registry = Registry()

    @registry.workflow("once")
    async def once(ctx: Context, n: int) -> int:
        return n

    async with open_engine(registry) as engine:
        first = await engine.start("once", 1, key="order-7")
        second = await engine.start("once", 2, key="order-7")
        assert first == second
        assert await engine.result(first, timeout=30) == 1
        assert len(await engine.list(workflow="once")) == 1


async def test_a_step_with_a_queue_runs_in_that_worker_pool(open_engine):
    registry = Registry()

    @registry.workflow("offload")
    async def offload(ctx: Context, x: int) -> int:
        return await ctx.step(heavy, x, queue="gpu") + 1

    async with open_engine(registry, worker=False) as engine:
        async with engine.worker(queues=["default"]):
            eid = await engine.start("offload", 7)
            await wait_status(engine, eid, "suspended")
            [task] = await engine.tasks(queue="gpu")
            assert task.kind is TaskKind.RUN_STEP and task.id == f"RUN_STEP:{eid}:root/heavy#0@1"
            async with engine.worker(queues=["gpu"], sweeper=False):
                assert await engine.result(eid, timeout=30) == 50
        journal = await engine.journal(eid)
        assert kinds(journal, "root/heavy#0") == ["frame.started", "frame.completed"]
        assert await engine.tasks(queue="gpu") == []


async def test_a_worker_never_runs_a_delegate_task(open_engine):
    registry = Registry()

    @registry.workflow("asks")
    async def asks(ctx: Context) -> str:
        await ctx.enqueue("default", TaskKind.DELEGATE, {"question": "approve?"}, key="q")
        return await ctx.receive("answer")

    async with open_engine(registry) as engine:
        eid = await engine.start("asks")
        await wait_status(engine, eid, "suspended")
        await asyncio.sleep(0.2)  # the worker polls the default queue meanwhile
        [task] = await engine.tasks(queue="default")
        assert task.kind is TaskKind.DELEGATE and task.deliveries == 0
        await engine.signal(eid, "answer", "approved")
        assert await engine.result(eid, timeout=30) == "approved"


async def test_a_stolen_lease_stops_the_worker_which_writes_nothing_more(open_engine, caplog):
    registry = Registry()
    began = asyncio.Event()
    release = asyncio.Event()

    async def slow() -> str:
        began.set()
        await release.wait()
        return "late"

    @registry.workflow("stolen")
    async def stolen(ctx: Context) -> str:
        return await ctx.step(slow)

    clock = Clock()
    caplog.set_level(logging.WARNING, logger="flowli.worker")
    async with open_engine(registry, clock=clock, lease_ttl=timedelta(seconds=30)) as engine:
        eid = await engine.start("stolen")
        await asyncio.wait_for(began.wait(), 10)
        epoch = (await engine.status(eid)).lease_epoch
        await clock.advance(timedelta(seconds=31))  # the lease expired: another worker may acquire it
        thief = await store_of(engine).acquire(eid, "thief", timedelta(seconds=30), clock.now())
        assert thief.epoch == epoch + 1
        before = await engine.journal(eid)
        release.set()
        for _ in range(500):
            if "lease" in caplog.text and "lost" in caplog.text:
                break
            await asyncio.sleep(0.01)
        assert "lease of execution" in caplog.text
        assert await engine.journal(eid) == before  # the frame.completed was refused
        assert engine.running() == []
        record = await engine.status(eid)
        assert record.lease_owner == "thief" and record.status is Status.RUNNING


async def test_a_write_with_an_old_epoch_is_refused_in_the_store(open_engine):
    from flowli.store import Fence

    registry = Registry()

    @registry.workflow("idle")
    async def idle(ctx: Context) -> None:
        await ctx.receive("never")

    async with open_engine(registry, worker=False) as engine:
        eid = await engine.start("idle")
        now, store = engine.clock.now(), store_of(engine)
        first = await store.acquire(eid, "a", timedelta(seconds=-1), now)  # acquired, already expired
        second = await store.acquire(eid, "b", timedelta(seconds=30), now)
        assert (first.epoch, second.epoch) == (1, 2)
        try:
            await store.write(Write(fence=Fence(eid, "a", 1), release=True), now)
        except LeaseLost as exc:
            assert exc.epoch == 1
        else:
            raise AssertionError("the fenced write went through")
        assert (await engine.status(eid)).lease_owner == "b"


async def test_sweeper_repairs_the_control_log_after_a_crash_between_the_two_appends(open_engine):
    """A lifecycle entry appended to the journal but never to the control log reaches the
    projection through the sweeper (where the store announces in its writes, the write itself
    put it on the control log: nothing to repair)."""
    from flowli.domain import Actor, Code, Entry, Provenance, Site
    from flowli.store import StatusChange

    registry = Registry()

    @registry.workflow("r")
    async def r(ctx: Context) -> None:
        await ctx.receive("never")

    async with open_engine(registry, worker=False) as engine:
        eid = await engine.start("r")
        now = engine.clock.now()
        # what a worker that died after its journal append leaves behind
        entry = Entry(eid=eid, kind=EntryKind.EXECUTION_SUSPENDED, fid="root",
                      provenance=Provenance(Actor("worker", "dead"), Site(), Code("r", "1"), now), value={"waits": []})
        await store_of(engine).write(Write(entries=[entry], status=StatusChange(eid, Status.SUSPENDED)), now)
        [listed] = await engine.list()
        if store_of(engine).announces_in_write:  # no second append: the write told the control log
            assert listed.status is Status.SUSPENDED
            assert await engine.sweep() == 0
            return
        assert listed.status is Status.PENDING  # the control log does not know yet
        assert await engine.sweep() >= 1
        [listed] = await engine.list()
        assert listed.status is Status.SUSPENDED
        assert await engine.sweep() == 0  # repaired once


async def test_the_sweeper_recovers_an_execution_whose_worker_died(open_engine):
    registry = Registry()

    @registry.workflow("rec")
    async def rec(ctx: Context) -> str:
        return "recovered"

    clock = Clock()
    async with open_engine(registry, clock=clock, worker=False) as engine:
        eid = await engine.start("rec")
        # a worker acquires the lease, then dies without a trace
        got = await store_of(engine).acquire(eid, "dead-worker", timedelta(seconds=10), clock.now(), ack=f"START:{eid}")
        assert got.epoch == 1
        async with engine.worker():
            await asyncio.sleep(0.1)
            assert (await engine.status(eid)).status is Status.RUNNING
            await clock.advance(timedelta(seconds=11))
            assert await engine.result(eid, timeout=30) == "recovered"
        journal = await engine.journal(eid)
        resumed = [e for e in journal if e.kind is EntryKind.EXECUTION_RESUMED]
        assert resumed == [] or resumed[0].value["epoch"] == 2
        assert (await engine.status(eid)).lease_epoch == 2


async def test_an_engine_error_hands_the_execution_back_instead_of_holding_the_lease(open_engine):
    """A store failure inside an activation (not the workflow's failure) releases the lease and
    enqueues a delayed RESUME, so the execution goes on without waiting out the lease."""
    registry = Registry()

    @registry.workflow("hb")
    async def hb(ctx: Context) -> str:
        return "done"

    async with open_engine(registry, worker=False) as engine:
        store = store_of(engine)
        real_write = store.write
        failed: list[int] = []

        async def failing_once(write, now):
            if not failed and any(e.kind is EntryKind.EXECUTION_COMPLETED for e in write.entries):
                failed.append(1)
                raise OSError("disk I/O error")
            return await real_write(write, now)

        store.write = failing_once  # type: ignore[method-assign]
        eid = await engine.start("hb")
        async with engine.worker():
            assert await engine.result(eid, timeout=30) == "done"
        journal = await engine.journal(eid)
        handed = [e for e in journal if e.kind is EntryKind.EXECUTION_SUSPENDED]
        assert failed == [1] and handed and handed[0].error["message"] == "disk I/O error"
        assert kinds(journal)[-1] == "execution.completed"


async def test_a_store_failure_under_a_frame_is_not_the_workflows_failure(open_engine):
    """A store error while a frame reads or writes (a lost connection, too many clients) must
    not fail the execution, even if the workflow catches every Exception: the worker hands the
    execution back, and it completes."""
    registry = Registry()

    @registry.workflow("robust")
    async def robust(ctx: Context) -> str:
        try:
            return await ctx.receive("in")
        except Exception:
            return "the workflow swallowed a store error"

    async with open_engine(registry, worker=False) as engine:
        store = store_of(engine)
        real = store.read_messages
        failed: list[int] = []

        async def failing_once(channel, after=0, limit=100):
            if not failed:
                failed.append(1)
                raise ConnectionResetError("the connection to the store was lost")
            return await real(channel, after, limit)

        store.read_messages = failing_once  # type: ignore[method-assign]
        eid = await engine.start("robust")
        await engine.signal(eid, "in", "delivered")
        async with engine.worker():
            assert await engine.result(eid, timeout=30) == "delivered"
        assert failed == [1]
        handed = [e for e in await engine.journal(eid) if e.kind is EntryKind.EXECUTION_SUSPENDED]
        assert handed and handed[0].error["type"] == "ConnectionResetError"



async def test_the_sweeper_wakes_the_workers_when_a_task_held_by_a_dead_worker_is_visible_again(open_engine):
    """A START task dequeued by a worker that died becomes visible again at the end of its lease:
    the sweeper plans its wake for that instant, then sends the workers to dequeue instead of
    leaving it to their slow poll (an hour here). Meanwhile another START task is visible, which
    no worker serves yet: the sweeper does not plan for it (it would sweep again and again)."""
    registry = Registry()

    @registry.workflow("late")
    async def late(ctx: Context, n: int) -> int:
        return n + 1

    clock = Clock()
    store_calls: list[str] = []
    async with open_engine(registry, clock=clock, worker=False, poll_interval=3600.0, sweep_interval=3600.0) as engine:
        eid = await engine.start("late", 1)
        store = store_of(engine)
        [held] = await store.dequeue(["default"], [TaskKind.START], "gone", 1, timedelta(seconds=10), clock.now())
        waiting = await engine.start("late", 2)  # visible now
        due_timers = store.due_timers

        async def counted(now, limit):  # a spy: the real store answers
            store_calls.append("due_timers")
            return await due_timers(now, limit)

        store.due_timers = counted  # type: ignore[method-assign]
        work = engine._rt.wakeups.work  # private: the wake-up that sends the workers to dequeue; nothing public shows who set it
        # a worker on another queue: this test's own wait sees the sweeper's wake, not a dequeue
        async with engine.worker(queues=["elsewhere"], concurrency=1):
            await asyncio.sleep(0.3)
            assert len(store_calls) <= 2, f"the sweeper swept {len(store_calls)} times before anything was due"
            assert not work.is_set()
            woken = asyncio.ensure_future(work.wait())
            await clock.advance(timedelta(seconds=10))
            await asyncio.wait_for(woken, 10)  # bounded: without the sweeper's wake it never comes
        async with engine.worker(concurrency=4):
            assert await engine.result(eid, timeout=30) == 2
            assert await engine.result(waiting, timeout=30) == 3
        assert held.eid == eid
