"""The workflow cache: a suspended execution's activation kept in its process continues where it
waits when the execution resumes there, instead of replaying its journal; anything that moved the
journal otherwise (another process, a migrate, a cancel), an eviction or a crash makes the next
activation replay as without a cache. Each workflow here counts the times its function starts
from its first line (its first run and each replay): the one thing a continuation does not do."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

import flowli
from flowli import Context, Registry
from flowli.domain import EntryKind, NondeterminismError, Status
from flowli.metrics import Metrics

from .conftest import FAST, wait_status

pytestmark = pytest.mark.integration


def noop(k: int) -> int:
    return k


def rounds(registry: Registry, starts: list[str], *, version: str = "1", add: int = 0) -> None:
    """``rounds(n)``: n times a step, then a receive on ``go``; the result is what came, plus ``add``."""

    @registry.workflow("rounds", version=version)
    async def run(ctx: Context, n: int) -> list[int]:
        starts.append(ctx.eid)
        got = []
        for k in range(n):
            await ctx.step(noop, k)
            got.append(await ctx.receive("go") + add)
        return got


async def waiting_at(engine: flowli.Engine, eid: str, k: int, timeout: float = 15.0) -> None:
    """Until the execution is suspended at its receive number ``k``."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        journal = await engine.journal(eid)
        if any(e.kind is EntryKind.FRAME_STARTED and e.fid == f"root/receive#{k}" for e in journal) \
                and (await engine.status(eid)).status is Status.SUSPENDED:
            return
        assert loop.time() < end, f"{eid} never waited at receive #{k}"
        await asyncio.sleep(0.01)


async def play(engine: flowli.Engine, eid: str, ks: range) -> None:
    for k in ks:
        await waiting_at(engine, eid, k)
        await engine.signal(eid, "go", k)


def outcomes(journal: list[Any]) -> Counter[str]:
    return Counter(e.fid for e in journal if e.kind in (EntryKind.FRAME_COMPLETED, EntryKind.FRAME_FAILED))


@pytest.mark.parametrize("cache, starts_expected", [(512, 1), (0, 6)])
async def test_a_resumed_run_continues_where_it_waits_and_journals_what_a_replay_would(
    open_engine, cache: int, starts_expected: int
) -> None:
    registry, starts = Registry(), []
    rounds(registry, starts)
    async with open_engine(registry, workflow_cache=cache) as engine:
        eid = await engine.start("rounds", 5)
        await play(engine, eid, range(5))
        assert await engine.result(eid, timeout=15) == [0, 1, 2, 3, 4]
        journal = await engine.journal(eid)
        figures = engine.workflow_cache
        scraped = (await Metrics(engine).render()).decode()
    assert starts == [eid] * starts_expected
    continued = 6 - starts_expected  # the five resumes, less those that replayed
    assert (figures.hits, figures.misses, figures.runs) == (continued, 0, 0)  # an ended run is not kept
    assert f"flowli_workflow_cache_hits_total {float(continued)}" in scraped
    assert "flowli_workflow_cache_runs 0.0" in scraped
    assert outcomes(journal) == {**{f"root/noop#{k}": 1 for k in range(5)}, **{f"root/receive#{k}": 1 for k in range(5)}}
    # each activation, continued or replayed, says which journal it saw: its lease's epoch, in order
    resumed = [e.value for e in journal if e.kind is EntryKind.EXECUTION_RESUMED]
    assert [r["epoch"] for r in resumed] == list(range(2, 7))
    assert all(r["seen"] < r2["seen"] for r, r2 in zip(resumed, resumed[1:]))
    # the journal the continuations wrote replays in memory against the same code, frame by frame
    again = Registry()
    rounds(again, [])
    async with open_engine(again, worker=False) as replayer:
        report = await replayer.verify(again)
    [checked] = [c for c in report.checked if c.eid == eid]
    assert checked.compatible, checked


async def answer_score(engine: Any) -> None:
    """A consumer of the queue ``scoring`` answers the one task that comes there (bounded wait)."""
    bot = engine.consumer("scoring", "bot", lease=timedelta(seconds=10))
    for _ in range(300):
        tasks = await bot.dequeue()
        if tasks:
            [task] = tasks
            await bot.answer(task, {"score": 0.9})
            return
        await asyncio.sleep(0.02)
    raise AssertionError("no task came to the queue scoring")


async def test_timers_children_and_answers_are_taken_by_the_kept_activation(open_engine) -> None:
    registry, starts = Registry(), []

    @registry.workflow("leaf")
    async def leaf(ctx: Context, x: int) -> int:
        await ctx.sleep(timedelta(milliseconds=50))
        return x * 2

    @registry.workflow("mixed")
    async def mixed(ctx: Context) -> list[Any]:
        starts.append(ctx.eid)
        await ctx.sleep(timedelta(milliseconds=100))
        child = await ctx.child("leaf", 21)
        answer = await ctx.delegate("scoring", {"who": "ann"}, key="score")
        return [child, answer]

    async with open_engine(registry) as engine:
        eid = await engine.start("mixed")
        await answer_score(engine)
        assert await engine.result(eid, timeout=15) == [42, {"score": 0.9}]
        journal = await engine.journal(eid)
    assert starts == [eid]  # the sleep's timer, the child's end and the answer: three continuations
    assert sum(1 for e in journal if e.kind is EntryKind.EXECUTION_RESUMED) >= 3


async def test_an_answer_that_acquires_the_run_before_it_was_kept_continues_it(open_engine) -> None:
    """An answer sent while the activation still runs finds nothing kept, so the lease it
    acquires for its process reads the whole journal; by the time that write applies, the
    activation has suspended and is kept. The next activation continues it all the same (it
    replayed here, once in every few runs under load, where the answer's write and the
    suspension's raced)."""
    registry, starts = Registry(), []

    @registry.workflow("asks")
    async def asks(ctx: Context) -> Any:
        starts.append(ctx.eid)
        return await ctx.delegate("scoring", {"who": "ann"}, key="score")

    answer_built, suspended = asyncio.Event(), asyncio.Event()

    async def interleave(transition: Any, call_next: Any) -> Any:
        # the order of the race, made certain: the suspension waits until the answer's write is
        # built (nothing kept yet), the answer's write until the run is kept
        if transition.kind == "suspend" and not suspended.is_set():
            await asyncio.wait_for(answer_built.wait(), 10)
            try:
                return await call_next()
            finally:
                suspended.set()
        if transition.kind == "answer":
            answer_built.set()
            await asyncio.wait_for(suspended.wait(), 10)
            for _ in range(500):  # kept right after its suspension's write returns
                if engine.workflow_cache.runs:
                    break
                await asyncio.sleep(0.01)
        return await call_next()

    async with open_engine(registry) as engine:
        engine.use(interleave)
        eid = await engine.start("asks")
        await answer_score(engine)
        assert await engine.result(eid, timeout=15) == {"score": 0.9}
        assert engine.workflow_cache.hits == 1
    assert starts == [eid]


async def test_a_journal_another_engine_moved_on_is_replayed_not_continued(open_engine, db_url, tmp_path) -> None:
    """Engine a keeps the run; engine b (another process, as far as the store can tell) runs its
    next activation; a, given the run again, finds entries it did not write and replays."""
    at_a, at_b = Registry(), Registry()
    starts_a: list[str] = []
    starts_b: list[str] = []
    rounds(at_a, starts_a)
    rounds(at_b, starts_b)
    b = await flowli.connect(db_url, at_b, bucket=str(tmp_path / "bucket-b"), **FAST)
    async with open_engine(at_a, worker=False) as a, b:
        eid = await a.start("rounds", 3)
        async with a.worker(concurrency=4):
            await play(a, eid, range(1))  # a: the first run, then a continuation to receive #1
            await waiting_at(a, eid, 1)
        async with b.worker(concurrency=4):
            await play(b, eid, range(1, 2))  # b replays: its first activation of the run
            await waiting_at(b, eid, 2)
        async with a.worker(concurrency=4):
            await play(a, eid, range(2, 3))  # a holds a run that b moved on: it replays
            assert await a.result(eid, timeout=15) == [0, 1, 2]
        journal = await a.journal(eid)
        assert (a.workflow_cache.hits, a.workflow_cache.misses) == (1, 1)
    assert starts_a == [eid, eid]
    assert starts_b == [eid]
    assert outcomes(journal) == {**{f"root/noop#{k}": 1 for k in range(3)}, **{f"root/receive#{k}": 1 for k in range(3)}}


async def test_a_migrated_run_replays_in_its_new_version(open_engine) -> None:
    registry, starts_1, starts_2 = Registry(), [], []
    rounds(registry, starts_1, version="1")
    rounds(registry, starts_2, version="2", add=100)
    async with open_engine(registry) as engine:
        eid = await engine.start("rounds", 2, version="1")
        await play(engine, eid, range(1))
        await waiting_at(engine, eid, 1)
        await engine.migrate(eid, "2")
        await play(engine, eid, range(1, 2))
        # version 2 ran from its first line: the first round's message from the journal, then the second
        assert await engine.result(eid, timeout=15) == [100, 101]
    assert starts_1 == [eid]  # version 1: its first run, then a continuation
    assert starts_2 == [eid, eid]  # version 2: the migrate's dry replay, then the activation that replayed


async def test_a_cancel_of_a_kept_run_cancels_it(open_engine) -> None:
    registry, starts = Registry(), []
    rounds(registry, starts)
    async with open_engine(registry) as engine:
        eid = await engine.start("rounds", 3)
        await play(engine, eid, range(1))
        await waiting_at(engine, eid, 1)
        await engine.cancel(eid)
        await wait_status(engine, eid, "cancelled")
        journal = await engine.journal(eid)
    assert journal[-1].kind is EntryKind.EXECUTION_CANCELLED
    assert outcomes(journal)["root/receive#1"] == 0


async def test_the_least_recently_kept_run_is_evicted_and_replays(open_engine) -> None:
    registry, starts = Registry(), []
    rounds(registry, starts)
    async with open_engine(registry, workflow_cache=1) as engine:
        first = await engine.start("rounds", 1)
        await waiting_at(engine, first, 0)
        second = await engine.start("rounds", 1)
        await waiting_at(engine, second, 0)  # kept: the first is evicted
        await engine.signal(first, "go", 7)
        await engine.signal(second, "go", 8)
        assert await engine.result(first, timeout=15) == [7]
        assert await engine.result(second, timeout=15) == [8]
        figures = engine.workflow_cache
    assert Counter(starts) == {first: 2, second: 1}
    assert (figures.hits, figures.evictions) == (1, 1)


async def test_a_run_heavier_than_the_cache_memory_is_not_kept(open_engine) -> None:
    registry, starts = Registry(), []
    rounds(registry, starts)
    async with open_engine(registry, workflow_cache_memory=1024) as engine:
        eid = await engine.start("rounds", 3)
        await play(engine, eid, range(3))
        assert await engine.result(eid, timeout=15) == [0, 1, 2]
    assert starts == [eid] * 4


async def test_a_continued_run_still_meets_a_changed_code_at_its_next_replay(open_engine, db_url, tmp_path) -> None:
    """The journal of continuations carries what a replay checks: code that inserted a frame
    before the ones the journal holds blocks the run, naming the frame."""
    registry, starts = Registry(), []
    rounds(registry, starts)
    async with open_engine(registry) as engine:
        eid = await engine.start("rounds", 3)
        await play(engine, eid, range(2))
        await waiting_at(engine, eid, 2)
    assert starts == [eid]

    changed = Registry()

    @changed.workflow("rounds")
    async def run(ctx: Context, n: int) -> list[int]:
        await ctx.step(noop, -1)  # inserted ahead of the frames the journal holds
        got = []
        for k in range(n):
            await ctx.step(noop, k)
            got.append(await ctx.receive("go"))
        return got

    async with open_engine(changed) as engine:
        await engine.signal(eid, "go", 2)
        loop = asyncio.get_running_loop()
        end = loop.time() + 15
        while (record := await engine.status(eid)).blocked is None:
            assert loop.time() < end, "the changed code never blocked the run"
            await asyncio.sleep(0.02)
        journal = await engine.journal(eid)
    assert record.blocked["reason"] == "nondeterminism"
    [blocked] = [e for e in journal if e.kind is EntryKind.EXECUTION_SUSPENDED and e.error]
    assert blocked.error["type"] == NondeterminismError.__name__
    assert "root/noop#0" in blocked.error["message"]


async def test_a_negative_cache_bound_is_refused(open_engine) -> None:
    with pytest.raises(ValueError, match="the workflow cache takes sizes of 0 or more, got -1 executions"):
        async with open_engine(Registry(), worker=False, workflow_cache=-1):
            pass
