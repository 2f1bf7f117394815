"""on_tick under normal runs, with the test clock: one child per tick, and several executions of
one schedule run each tick exactly once between them; and the claim that on_tick relies on."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest

from flowli import Context, Engine, Registry
from flowli.domain import EntryKind
from flowli.patterns import on_tick
from flowli.testing import Clock

from ..crash import until

pytestmark = pytest.mark.integration

EVERY = timedelta(hours=1)
TICKS = 4
LONG = {"lease_ttl": timedelta(days=30), "task_ttl": timedelta(days=30)}
"""The test clock jumps by hours: leases must not look expired when it does."""


def tick_registry(ran: list[str]) -> Registry:
    registry = Registry()

    def bill(stamp: str) -> str:
        ran.append(stamp)
        return f"billed {stamp}"

    @registry.workflow("billing")
    async def billing(ctx: Context, stamp: str) -> str:
        return await ctx.step(bill, stamp)

    @registry.workflow("hourly")
    async def hourly(ctx: Context, start: str | None) -> list[str]:
        first = datetime.fromisoformat(start) if start else None
        return await on_tick(ctx, "billing", every=EVERY, schedule="hourly", start=first, ticks=TICKS)

    return registry


async def settle(engine: Engine, clock: Clock) -> None:
    """Wait until nothing runs or waits to run: no activation, no ready task on the default
    queue, no due timer, and every execution suspended or completed (bounded)."""

    async def settled() -> bool:
        if engine.running() or await engine.tasks(queue="default"):
            return False
        if [t for t in await engine.timers() if t.at <= clock.now()]:
            return False
        return {e.status.value for e in await engine.list()} <= {"suspended", "completed"}

    await until(settled, 20, "the executions to settle")


async def tick_through(engine: Engine, clock: Clock, hours: int) -> None:
    for _ in range(hours):
        await settle(engine, clock)
        await clock.advance(EVERY)


async def test_on_tick_runs_one_child_per_tick_at_the_tick(open_engine):
    ran: list[str] = []
    clock = Clock()
    first = clock.now()
    stamps = [(first + n * EVERY).isoformat() for n in range(TICKS)]
    async with open_engine(tick_registry(ran), clock=clock, **LONG) as engine:
        eid = await engine.start("hourly", None)  # start: the execution's now()
        await settle(engine, clock)
        assert ran == stamps[:1]
        assert [t.at for t in await engine.timers(eid)] == [first + EVERY]  # the next tick waits on a timer
        await clock.advance(timedelta(minutes=59))
        await settle(engine, clock)
        assert ran == stamps[:1]  # not before its instant
        await clock.advance(timedelta(minutes=1))
        await tick_through(engine, clock, TICKS - 2)
        assert await engine.result(eid, timeout=30) == stamps
        journal = await engine.journal(eid)
    assert ran == stamps
    claims = [e.value for e in journal if e.kind is EntryKind.FRAME_COMPLETED and e.fid.startswith("root/claim#")]
    assert claims == [True] * TICKS
    children = [e.fid for e in journal if e.kind is EntryKind.FRAME_COMPLETED and e.fid.startswith("root/billing")]
    assert sorted(children) == sorted(f"root/billing:hourly@{s}" for s in stamps)


async def test_three_executions_of_one_schedule_run_each_tick_once(open_engine):
    ran: list[str] = []
    clock = Clock()
    start = clock.now() + timedelta(minutes=30)
    stamps = [(start + n * EVERY).isoformat() for n in range(TICKS)]
    async with open_engine(tick_registry(ran), clock=clock, **LONG) as engine:
        eids = [await engine.start("hourly", start.isoformat()) for _ in range(3)]
        await settle(engine, clock)
        assert ran == []
        await clock.advance(timedelta(minutes=30))
        await tick_through(engine, clock, TICKS - 1)
        mine: list[Any] = [await engine.result(e, timeout=30) for e in eids]
        children = await engine.list(workflow="billing")
        args = Counter([(await engine.status(c.eid)).args[0] for c in children])

    assert sorted(ran) == stamps and len(ran) == TICKS  # each tick's step ran once
    assert args == Counter(stamps)  # one child execution per tick
    assert sorted(s for m in mine for s in m) == stamps  # the ticks are split among the executions


async def test_executions_of_one_schedule_started_apart_without_a_start_share_its_ticks(open_engine):
    """The docstring of on_tick: several executions of one schedule, "say, one started by each
    worker process", run each tick once. Worker processes start at different moments, and the
    docstring's own example gives no start: two such executions must not run the schedule twice
    in one period."""
    ran: list[str] = []
    clock = Clock()
    async with open_engine(tick_registry(ran), clock=clock, **LONG) as engine:
        first = await engine.start("hourly", None)
        await settle(engine, clock)
        await clock.advance(timedelta(minutes=1))
        second = await engine.start("hourly", None)
        await tick_through(engine, clock, TICKS)
        for eid in (first, second):
            await engine.result(eid, timeout=30)

    ticks = sorted(datetime.fromisoformat(s) for s in ran)
    assert all(b - a >= EVERY for a, b in zip(ticks, ticks[1:])), f"one schedule ran twice in an hour: {sorted(ran)}"


def prepare() -> str:
    return "prepared"


async def test_a_claim_that_is_the_first_write_after_a_resume_returns_its_outcome(open_engine):
    """A resumed activation prepends its ``execution.resumed`` entry to its first write. When that
    write is a claim (here: the step before it ran on another queue, so the resumed activation
    replays it from its memo), the claim's outcome must still be its memo. on_tick meets this
    after a replay (the sleep memoized, the claim next): a memo of None there skips the tick in
    every execution of the schedule, since the claim is taken."""
    registry = Registry()

    @registry.workflow("prepare_then_claim")
    async def prepare_then_claim(ctx: Context, key: str) -> list[Any]:
        await ctx.step(prepare, queue="side")
        return [await ctx.claim(key), await ctx.claim(key)]

    async with open_engine(registry, worker=False) as engine:
        async with engine.worker(concurrency=4, queues=("default", "side")):
            eid = await engine.start("prepare_then_claim", "nightly@2026-01-01")
            assert await engine.result(eid, timeout=30) == [True, False]
        journal = await engine.journal(eid)
    claims = [e.value for e in journal if e.kind is EntryKind.FRAME_COMPLETED and e.fid.startswith("root/claim#")]
    assert claims == [True, False]
