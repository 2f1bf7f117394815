"""Schedules: cron (in a time zone), interval and once triggers; each firing starts exactly one
execution, also when several engines on one database fire at the same time."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

import flowli
from flowli import Context, Registry
from flowli.domain import keyed_eid
from flowli.engine import ScheduleError, firing_key, next_fire, trigger
from flowli.testing import Clock

from .conftest import FAST

pytestmark = pytest.mark.integration


def app() -> Registry:
    registry = Registry()

    @registry.workflow("report")
    async def report(ctx: Context, who: str) -> str:
        return f"report for {who}"

    return registry


async def runs(engine: Any) -> list[Any]:
    return [r for r in (await engine.list(workflow="report")).items]


async def test_an_interval_schedule_fires_once_per_firing(open_engine):
    clock = Clock()
    async with open_engine(app(), clock=clock) as engine:
        made = await engine.schedule("hourly", "report", "ops", interval=3600)
        start = clock.now()
        assert made["nextFireAt"] == (start + timedelta(hours=1)).isoformat().replace("+00:00", "Z")
        assert await engine.fire_schedules() == 0  # not due yet
        for n in (1, 2):
            await clock.advance(timedelta(hours=1))
            await engine.fire_schedules()
            await engine.fire_schedules()  # again: the firing happened, nothing more starts
            [item] = await engine.items.list("schedule", "")
            assert item.body["firings"] == n
        eids = [keyed_eid("report", firing_key(item, start + timedelta(hours=h))) for h in (1, 2)]
        assert [await engine.result(e, timeout=30) for e in eids] == ["report for ops"] * 2
        assert item.body["nextFireAt"] == (start + timedelta(hours=3)).isoformat().replace("+00:00", "Z")
        with pytest.raises(ScheduleError, match="exists already"):
            await engine.schedule("hourly", "report", "ops", interval=60)


async def test_a_once_schedule_fires_one_time():
    clock = Clock()
    engine = await flowli.connect("sqlite://:memory:", app(), clock=clock, **FAST)
    async with engine:
        at = clock.now() + timedelta(minutes=5)
        made = await engine.schedule("once", "report", "ann", at=at)
        assert made["nextFireAt"].startswith(at.isoformat()[:19])
        await clock.advance(timedelta(minutes=5, seconds=1))
        assert await engine.fire_schedules() == 1
        assert await engine.fire_schedules() == 0
        [item] = await engine.items.list("schedule", "")
        assert item.body["nextFireAt"] is None and item.body["firings"] == 1


def test_cron_in_a_time_zone_and_the_trigger_checks():
    t = trigger(cron="0 9 * * 1-5", tz="Europe/Berlin")
    tuesday_noon = datetime(2026, 12, 1, 11, 0, tzinfo=timezone.utc)  # 12:00 in Berlin
    assert next_fire(t, tuesday_noon, tuesday_noon) == datetime(2026, 12, 2, 8, 0, tzinfo=timezone.utc)
    friday = datetime(2026, 12, 4, 9, 0, tzinfo=timezone.utc)
    assert next_fire(t, friday, friday) == datetime(2026, 12, 7, 8, 0, tzinfo=timezone.utc)  # Monday
    for bad, match in [({"cron": "every day"}, "not a cron"), ({"cron": "0 9 * * *", "tz": "Mars/Base"}, "time zone"),
                       ({}, "exactly one trigger"), ({"cron": "0 9 * * *", "interval": 5}, "exactly one trigger"),
                       ({"interval": -1}, "positive"), ({"run_at": "tomorrow"}, "ISO 8601"),
                       ({"run_at": "2026-12-01T10:00:00"}, "offset")]:
        with pytest.raises(ScheduleError, match=match):
            trigger(**bad)


async def test_engines_on_one_database_fire_each_firing_exactly_once(db_url):
    clock = Clock()
    engines = [await flowli.connect(db_url, app(), clock=clock, **FAST) for _ in range(3)]
    try:
        await engines[0].schedule("minutely", "report", "ops", interval=60)
        start = clock.now()
        for _ in range(3):
            await clock.advance(timedelta(seconds=60))
            await asyncio.gather(*(e.fire_schedules() for e in engines))
        [item] = await engines[0].items.list("schedule", "")
        eids = [keyed_eid("report", firing_key(item, start + timedelta(seconds=60 * m))) for m in (1, 2, 3)]
        assert [(await engines[0].status(e)).workflow for e in eids] == ["report"] * 3
        starts = [t for t in await engines[0].tasks() if t.kind.value == "START"]
        assert sorted(t.eid for t in starts) == sorted(eids)  # and no other
    finally:
        for e in engines:
            await e.close()


async def test_a_pause_written_while_a_firing_is_under_way_leaves_nothing_started(open_engine):
    """The firing read the schedule enabled; an operator's pause was written before the firing's
    run was (the firer below writes it first, as a pause landing in that window does): the run's
    write, which advances the schedule only as the firing read it, is refused whole. Nothing
    starts, the schedule stays paused and unfired; resumed, it fires once."""
    clock = Clock()
    async with open_engine(app(), clock=clock) as engine:
        started: list[str] = []
        pauses = [True]  # the first firing meets a pause

        async def fire(item: Any, instant: datetime, items: Any = ()) -> None:
            if pauses and pauses.pop():
                paused = {**item.body, "state": "paused"}
                assert await engine.items.update("schedule", item.id, paused, clock.now(), expect=item.body)
            eid = await engine.start("report", "ops", key=firing_key(item, instant), items=items)
            started.append(eid)

        engine.on_fire("probe", fire)
        await engine.add_schedule("probe", {"kind": "probe"}, interval=60)
        await clock.advance(timedelta(seconds=61))
        assert await engine.fire_schedules() == 0
        [item] = await engine.items.list("schedule", "")
        assert (item.body["state"], item.body["firings"], item.body["lastFireAt"]) == ("paused", 0, None)
        assert started == [] and await runs(engine) == []
        assert await engine.fire_schedules() == 0  # paused: not due

        assert await engine.items.update("schedule", item.id, {**item.body, "state": "enabled"}, clock.now(),
                                         expect=item.body)
        [item] = await engine.items.list("schedule", "")
        assert await engine.fire_schedules() == 1
        [after] = await engine.items.list("schedule", "")
        assert (after.body["state"], after.body["firings"]) == ("enabled", 1)
        assert after.body["nextFireAt"] != item.body["nextFireAt"]
        assert [r.eid for r in await runs(engine)] == started
        assert await engine.result(started[0], timeout=30) == "report for ops"


async def test_a_firing_advances_its_schedule_in_the_write_of_its_run(open_engine):
    """The run of a firing and the schedule advanced past it commit together: a firer whose
    start is refused (here, by a run that exists already under its key: a process that died
    after starting it) still sees the schedule advanced once, by the fallback."""
    clock = Clock()
    async with open_engine(app(), clock=clock, worker=False) as engine:
        await engine.schedule("minutely", "report", "ops", interval=60)
        [item] = await engine.items.list("schedule", "")
        await clock.advance(timedelta(seconds=61))
        instant = datetime.fromisoformat(item.body["nextFireAt"].replace("Z", "+00:00"))
        early = await engine.start("report", "ops", key=firing_key(item, instant))  # an earlier process's start
        assert await engine.fire_schedules() == 1
        [after] = await engine.items.list("schedule", "")
        assert after.body["firings"] == 1 and after.body["lastFireAt"] == item.body["nextFireAt"]
        assert [r.eid for r in await runs(engine)] == [early]
