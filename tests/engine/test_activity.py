"""``engine.activity``: the runs started and ended in a window, per workflow and interval, read by
an index on both backends (the overview's figures); and ``engine.queue_depths`` of one
application. A child is not a run of its own, another application's runs are not counted, and a
run started before the window counts where it ended."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from flowli import Context, Registry
from flowli.testing import Clock

from .conftest import wait_status

pytestmark = pytest.mark.integration

START = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)


def registry() -> Registry:
    reg = Registry()

    @reg.workflow("checks")
    async def checks(ctx: Context, n: int) -> int:
        if n < 0:
            raise ValueError(f"{n} is negative")
        return n

    @reg.workflow("parent")
    async def parent(ctx: Context) -> int:
        return int(await ctx.child("checks", 1))

    @reg.workflow("waits")
    async def waits(ctx: Context) -> Any:
        return await ctx.receive("go")

    return reg


def counted(rows: list[tuple[str, str | None, int, str, int]]) -> dict[tuple[str, int, str], int]:
    found: dict[tuple[str, int, str], int] = {}
    for workflow, name, interval, what, n in rows:
        assert name is None  # no decider's name: a workflow's runs
        found[(workflow, interval, what)] = found.get((workflow, interval, what), 0) + n
    return found


async def test_activity_counts_runs_per_interval_by_how_they_ended(open_engine: Any) -> None:
    clock = Clock(START)
    async with open_engine(registry(), clock=clock) as engine:
        early = await engine.start("waits", application="app")  # started before the window
        await wait_status(engine, early, "suspended")
        await clock.advance(timedelta(minutes=10))
        since = clock.now()
        started = [await engine.start("checks", n, application="app") for n in (1, 2, -1)]
        started.append(await engine.start("parent", application="app"))
        started.append(await engine.start("checks", 3, application="other"))
        for eid, ends in zip(started, ("completed", "completed", "failed", "completed", "completed"), strict=True):
            await wait_status(engine, eid, ends)  # within the first interval: the clock stands still
        await clock.advance(timedelta(minutes=5))
        await engine.signal(early, "go", "now")
        await wait_status(engine, early, "completed")
        width = timedelta(minutes=5)
        found = counted(await engine.activity(since, width, application="app"))
        assert found == {("checks", 0, "started"): 3, ("checks", 0, "completed"): 2, ("checks", 0, "failed"): 1,
                         ("parent", 0, "started"): 1, ("parent", 0, "completed"): 1,
                         ("waits", 1, "completed"): 1}  # the child of parent is not a run of its own
        assert counted(await engine.activity(since, width, application="other")) == {
            ("checks", 0, "started"): 1, ("checks", 0, "completed"): 1}
        everyone = counted(await engine.activity(since, width))
        assert everyone[("checks", 0, "started")] == 4
        assert counted(await engine.activity(clock.now() + timedelta(minutes=1), width)) == {}
        with pytest.raises(ValueError, match="width must be positive"):
            await engine.activity(since, timedelta(0))


async def test_queue_depths_of_one_application(open_engine: Any) -> None:
    clock = Clock(START)
    async with open_engine(registry(), clock=clock, worker=False) as engine:
        await engine.start("checks", 1, application="app", queue="reports")
        await engine.start("checks", 2, application="app", queue="reports")
        await engine.start("checks", 3, application="other", queue="reports")
        await clock.advance(timedelta(seconds=30))
        assert [(q, n) for q, n, _ in await engine.queue_depths(application="app")] == [("reports", 2)]
        assert [(q, n) for q, n, _ in await engine.queue_depths(application="other")] == [("reports", 1)]
        assert [(q, n) for q, n, _ in await engine.queue_depths()] == [("reports", 3)]
        [(_, _, age)] = await engine.queue_depths(application="app")
        assert age == pytest.approx(30, abs=1)
