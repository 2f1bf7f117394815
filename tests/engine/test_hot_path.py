"""The hot path: a start in a process with a free worker slot runs there at once (a direct start:
the execution is created leased, no START task), and a fast step journals frame.started with its
outcome in one write."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

import flowli
from flowli import Context, Registry
from flowli.domain import EntryKind, RetryPolicy, Status, TaskKind, UnknownExecutionError, keyed_eid

from .conftest import kinds

pytestmark = pytest.mark.integration

SLOW = 1.0
"""Seconds of a slow step: well past the 50 ms after which a running step's frame.started is
written on its own (before that, it waits to share the write of the step's outcome)."""


async def accepting(worker: Any) -> None:
    """Wait (bounded) until the worker's run has begun: only then may a start hand it an execution."""
    for _ in range(1000):
        if worker.accepting:
            return
        await asyncio.sleep(0)
    raise AssertionError("the worker never began to accept direct starts")


async def until(predicate: Any, what: str, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not predicate():
        if loop.time() > end:
            raise AssertionError(f"still not {what} after {timeout} s")
        await asyncio.sleep(0.01)


def gated(registry: Registry, name: str) -> tuple[asyncio.Event, list[str]]:
    """A workflow ``name`` whose one step blocks until the returned event is set; ``ran`` counts
    its runs (one item per run of the body)."""
    release = asyncio.Event()
    ran: list[str] = []

    async def hold(tag: str) -> str:
        await release.wait()
        return tag

    @registry.workflow(name)
    async def wf(ctx: Context, tag: str) -> str:
        ran.append(tag)
        return await ctx.step(hold, tag)

    return release, ran


# ---- direct start ------------------------------------------------------------------------------


async def test_a_start_with_a_free_worker_slot_is_created_leased_and_writes_no_start_task(open_engine):
    registry = Registry()
    release, _ = gated(registry, "direct")
    async with open_engine(registry, worker=False) as engine:
        async with engine.worker(concurrency=4) as worker:
            await accepting(worker)
            eid = await engine.start("direct", "a")
            record = await engine.status(eid)
            assert record.status is Status.RUNNING
            assert record.lease_owner == engine.owner
            assert record.lease_epoch == 1
            assert await engine.tasks(eid=eid, include_acked=True) == []
            release.set()
            assert await engine.result(eid, timeout=30) == "a"
            assert worker.reserved == 0
        assert await engine.tasks(eid=eid, include_acked=True) == []
        final = await engine.status(eid)
        assert final.status is Status.COMPLETED and final.lease_epoch == 1  # never acquired again
        journal = await engine.journal(eid)
        assert kinds(journal)[0] == "execution.started" and kinds(journal)[-1] == "execution.completed"
        assert kinds(journal, "root/hold#0") == ["frame.started", "frame.completed"]


async def test_a_start_without_a_running_worker_writes_a_start_task(open_engine):
    registry = Registry()

    @registry.workflow("queued")
    async def queued(ctx: Context, n: int) -> int:
        return n + 1

    async with open_engine(registry, worker=False) as engine:
        eid = await engine.start("queued", 1)
        [task] = await engine.tasks(eid=eid, include_acked=True)
        assert task.kind is TaskKind.START and task.queue == "default"
        record = await engine.status(eid)
        assert record.status is Status.PENDING and record.lease_owner is None and record.lease_epoch == 0
        async with engine.worker(concurrency=4):
            assert await engine.result(eid, timeout=30) == 2
        assert (await engine.status(eid)).lease_epoch == 1


async def test_a_worker_on_another_queue_does_not_take_a_start_directly(open_engine):
    registry = Registry()

    @registry.workflow("elsewhere")
    async def elsewhere(ctx: Context) -> str:
        return "done"

    async with open_engine(registry, worker=False) as engine:
        async with engine.worker(concurrency=4, queues=("other",)) as other:
            await accepting(other)
            eid = await engine.start("elsewhere")
            assert other.reserved == 0 and other.running == {}
            [task] = await engine.tasks(eid=eid, include_acked=True)
            assert task.kind is TaskKind.START and task.queue == "default"
            record = await engine.status(eid)
            assert record.status is Status.PENDING and record.lease_owner is None
            async with engine.worker(concurrency=4):
                assert await engine.result(eid, timeout=30) == "done"


async def test_a_full_worker_sends_further_starts_through_start_tasks(open_engine):
    registry = Registry()
    release, ran = gated(registry, "busy")
    async with open_engine(registry, worker=False) as engine:
        async with engine.worker(concurrency=1) as worker:
            await accepting(worker)
            first = await engine.start("busy", "1")
            second = await engine.start("busy", "2")
            third = await engine.start("busy", "3")
            assert await engine.tasks(eid=first, include_acked=True) == []
            record = await engine.status(first)
            assert record.lease_owner == engine.owner and record.lease_epoch == 1
            for eid in (second, third):
                [task] = await engine.tasks(eid=eid, include_acked=True)
                assert task.kind is TaskKind.START
                assert (await engine.status(eid)).status is Status.PENDING
            release.set()
            results = await asyncio.gather(*(engine.result(eid, timeout=30) for eid in (first, second, third)))
            assert results == ["1", "2", "3"]
            await until(lambda: not worker.running, "idle")
            assert worker.reserved == 0
        assert sorted(ran) == ["1", "2", "3"]


async def test_a_keyed_start_twice_runs_once_and_gives_the_slot_back(open_engine):
    registry = Registry()
    ran: list[int] = []

    @registry.workflow("keyed")
    async def keyed(ctx: Context, n: int) -> int:
        ran.append(n)
        return n

    async with open_engine(registry, worker=False) as engine:
        async with engine.worker(concurrency=1) as worker:
            unreserved: list[int] = []
            real_unreserve = worker.unreserve

            def counting_unreserve() -> None:
                unreserved.append(1)
                real_unreserve()

            worker.unreserve = counting_unreserve  # type: ignore[method-assign]
            await accepting(worker)
            first = await engine.start("keyed", 1, key="k")
            assert await engine.result(first, timeout=30) == 1
            await until(lambda: not worker.running, "idle")
            # the slot is free: the second start reserves it, finds the execution exists, gives it back
            second = await engine.start("keyed", 2, key="k")
            assert second == first
            assert unreserved == [1]
            assert worker.reserved == 0
            later = await engine.start("keyed", 3)  # with one slot, a leaked reservation would block it
            assert await engine.result(later, timeout=30) == 3
            await until(lambda: not worker.running, "idle")
            assert worker.reserved == 0
        assert ran == [1, 3]
        assert await engine.tasks(eid=first, include_acked=True) == []
        assert len(await engine.list(workflow="keyed")) == 2


async def test_a_keyed_start_while_the_first_runs_gives_the_slot_back(open_engine):
    registry = Registry()
    release, ran = gated(registry, "keyed-busy")
    async with open_engine(registry, worker=False) as engine:
        async with engine.worker(concurrency=2) as worker:
            await accepting(worker)
            first = await engine.start("keyed-busy", "a", key="k")
            second = await engine.start("keyed-busy", "b", key="k")  # a slot is free: reserved, then given back
            assert second == first
            assert worker.reserved == 0
            release.set()
            assert await engine.result(first, timeout=30) == "a"
            later = await engine.start("keyed-busy", "c")
            assert await engine.result(later, timeout=30) == "c"
            await until(lambda: not worker.running, "idle")
            assert worker.reserved == 0
        assert ran == ["a", "c"]


# ---- one write per fast step -------------------------------------------------------------------


Writes = list[list[tuple[str, str, str | None, int | None]]]


def record_writes(engine: flowli.Engine) -> Writes:
    """Observe every commit of the engine (its frame appends included): each write's entries as
    (eid, kind, fid, attempt)."""
    writes: Writes = []

    def recorder(transition: Any, result: Any) -> None:
        writes.append([(e.eid, str(e.kind), e.fid, e.attempt) for e in transition.write.entries])

    engine.observe(recorder)
    return writes


def step_writes(writes: Writes, eid: str, fid: str) -> list[list[tuple[str, int | None]]]:
    """The writes holding an entry of frame ``fid``: that frame's (kind, attempt) in each, in order."""
    out = []
    for w in writes:
        mine = [(kind, attempt) for e, kind, f, attempt in w if e == eid and f == fid]
        if mine:
            out.append(mine)
    return out


def consecutive(journal: list[Any], fid: str, first: EntryKind, then: EntryKind, attempt: int = 1) -> None:
    [a] = [e for e in journal if e.fid == fid and e.kind is first and e.attempt == attempt]
    [b] = [e for e in journal if e.fid == fid and e.kind is then and e.attempt == attempt]
    assert b.seq == a.seq + 1, (a.seq, b.seq)


async def test_a_fast_step_writes_started_and_completed_in_one_write(open_engine):
    registry = Registry()

    async def fast(x: int) -> int:  # done without suspending: no timer can fire meanwhile
        return x * 2

    @registry.workflow("fast")
    async def wf(ctx: Context, x: int) -> int:
        return await ctx.step(fast, x)

    async with open_engine(registry, worker=False) as engine:
        writes = record_writes(engine)
        async with engine.worker(concurrency=4):
            eid = await engine.start("fast", 21)
            assert await engine.result(eid, timeout=30) == 42
        assert step_writes(writes, eid, "root/fast#0") == [[("frame.started", 1), ("frame.completed", 1)]]
        journal = await engine.journal(eid)
        assert kinds(journal, "root/fast#0") == ["frame.started", "frame.completed"]
        consecutive(journal, "root/fast#0", EntryKind.FRAME_STARTED, EntryKind.FRAME_COMPLETED)


async def test_a_slow_step_writes_started_on_its_own_before_its_outcome(open_engine):
    registry = Registry()

    async def slow(x: int) -> int:
        await asyncio.sleep(SLOW)
        return x + 1

    @registry.workflow("slow")
    async def wf(ctx: Context, x: int) -> int:
        return await ctx.step(slow, x)

    async with open_engine(registry, worker=False) as engine:
        writes = record_writes(engine)
        async with engine.worker(concurrency=4):
            eid = await engine.start("slow", 1)
            assert await engine.result(eid, timeout=30) == 2
        assert step_writes(writes, eid, "root/slow#0") == [[("frame.started", 1)], [("frame.completed", 1)]]
        journal = await engine.journal(eid)
        assert kinds(journal, "root/slow#0") == ["frame.started", "frame.completed"]
        consecutive(journal, "root/slow#0", EntryKind.FRAME_STARTED, EntryKind.FRAME_COMPLETED)


async def test_a_fast_failing_step_writes_started_and_failed_in_one_write(open_engine):
    registry = Registry()
    calls: list[int] = []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("first attempt fails")
        return "ok"

    @registry.workflow("flaky")
    async def wf(ctx: Context) -> str:
        return await ctx.step(flaky, retry=RetryPolicy(max_attempts=2, backoff=timedelta(0)))

    async with open_engine(registry, worker=False) as engine:
        writes = record_writes(engine)
        async with engine.worker(concurrency=4):
            eid = await engine.start("flaky")
            assert await engine.result(eid, timeout=30) == "ok"
        assert step_writes(writes, eid, "root/flaky#0") == [
            [("frame.started", 1), ("frame.failed", 1)],
            [("frame.started", 2), ("frame.completed", 2)],
        ]
        journal = await engine.journal(eid)
        assert kinds(journal, "root/flaky#0") == ["frame.started", "frame.failed", "frame.started", "frame.completed"]
        consecutive(journal, "root/flaky#0", EntryKind.FRAME_STARTED, EntryKind.FRAME_FAILED, attempt=1)
        consecutive(journal, "root/flaky#0", EntryKind.FRAME_STARTED, EntryKind.FRAME_COMPLETED, attempt=2)
        assert calls == [1, 1]


async def test_a_direct_start_whose_worker_stops_meanwhile_is_handed_back(open_engine):
    """The worker stops while the start of an execution leased to it is being written: the
    execution is handed back (released at epoch 1, a RESUME on its queue), and runs later."""
    registry = Registry()

    @registry.workflow("handed")
    async def handed(ctx: Context, x: int) -> int:
        return x + 1

    async with open_engine(registry, worker=False) as engine:
        async with engine.worker(concurrency=4) as worker:
            await accepting(worker)
            stopped: list[str] = []

            async def stop_first(t, call_next):  # before the start's write: the worker stops, then the start lands
                if t.kind == "start" and not stopped:
                    stopped.append(t.eid)
                    await worker.retire()
                return await call_next()

            engine.use(stop_first)
            eid = await engine.start("handed", 41)
            assert stopped == [eid]
        async with engine.worker(concurrency=4):
            assert await engine.result(eid, timeout=10) == 42
        # not run by the stopped worker under the lease of its start: handed back, then acquired again
        record = await engine.status(eid)
        assert record.lease_epoch >= 2
        suspended = [e for e in await engine.journal(eid) if e.kind is EntryKind.EXECUTION_SUSPENDED]
        assert suspended and suspended[0].value == {"reason": "worker stopped"}
        assert suspended[0].provenance.site.epoch == 1


async def test_a_read_that_sees_a_write_of_this_process_comes_after_its_caller_resumed(tmp_path):
    """SQLite reads a row by its key on the event loop's own connection, which sees a commit as
    soon as the writer thread made it. A read made while a write of this loop is out waits for its
    answer: whoever sees the row sees it after the write's caller resumed (and did what follows
    it). The reads here run back to back without yielding to the loop (a read answered at once
    does not), so a read that did not wait would see the row before the starting task resumed."""
    registry = Registry()  # SQLite's own: PostgreSQL's reads go through the network

    @registry.workflow("quiet")
    async def quiet(ctx: Context) -> None:
        return None

    engine = await flowli.connect(f"sqlite:///{tmp_path}/reads.db", registry, bucket=str(tmp_path / "bucket"))
    async with engine:
        resumed: list[str] = []

        async def start() -> None:
            resumed.append(await engine.start("quiet", key="k"))

        starting = asyncio.ensure_future(start())
        await asyncio.sleep(0)  # the start submits its write
        eid = keyed_eid("quiet", "k")
        for _ in range(1_000_000):
            try:
                await engine.status(eid)
            except UnknownExecutionError:
                continue
            break
        assert resumed == [eid]  # the start had its answer before the row was seen
        await starting
