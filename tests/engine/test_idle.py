"""``engine.idle``: the candidates of stuck runs, read by an index on both backends. An
execution waiting for a message since before the horizon is one; one that a future timer will
wake, one that ended, one that changed since the horizon, and another application's are not."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from flowli import Context, Registry
from flowli.testing import Clock

from .conftest import wait_status

pytestmark = pytest.mark.integration


def registry() -> Registry:
    reg = Registry()

    @reg.workflow("waits")
    async def waits(ctx: Context) -> Any:
        return await ctx.receive("go")

    @reg.workflow("sleeps")
    async def sleeps(ctx: Context) -> None:
        await ctx.sleep(timedelta(days=2))

    return reg


async def test_idle_lists_what_waits_since_the_horizon_and_nothing_else(open_engine: Any) -> None:
    clock = Clock()
    async with open_engine(registry(), clock=clock) as engine:
        old = await engine.start("waits", application="app")
        ended = await engine.start("waits", application="app")
        asleep = await engine.start("sleeps", application="app")
        other = await engine.start("waits", application="other")
        for eid in (old, ended, asleep, other):
            await wait_status(engine, eid, "suspended")
        await engine.signal(ended, "go", 1)
        await wait_status(engine, ended, "completed")
        await clock.advance(timedelta(hours=2))
        recent = await engine.start("waits", application="app")
        await wait_status(engine, recent, "suspended")

        idle = await engine.idle(timedelta(hours=1), application="app")
        assert [r.eid for r in idle] == [old]
        assert {r.eid for r in await engine.idle(timedelta(hours=1))} == {old, other}
        assert await engine.idle(timedelta(hours=3), application="app") == []
        await clock.advance(timedelta(minutes=5))
        assert [r.eid for r in await engine.idle(timedelta(minutes=1), application="app")] == [old, recent]
