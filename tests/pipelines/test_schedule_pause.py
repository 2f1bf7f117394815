"""A schedule paused while one of its firings is under way: the firing read the schedule enabled,
the pause was written before the firing's pipeline was. The pipeline's write advances the
schedule only as the firing read it, so it is refused whole: once a pause has answered, no
pipeline of an earlier read appears."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from flowli import Registry
from flowli.pipelines import Applications, Pipelines, Schedules, install
from flowli.testing import Clock

pytestmark = pytest.mark.integration

PIPELINE = {"name": "nightly", "stages": [{"stageName": "s", "stageHandlerName": "H"}]}


async def test_a_pause_written_before_a_firings_pipeline_leaves_no_pipeline(open_engine):
    clock = Clock()
    registry = Registry()
    install(registry)
    async with open_engine(registry, clock=clock, worker=False) as engine:
        apps = Applications(engine)
        _, key = await apps.create("billing")
        access = await apps.authenticate(key)
        pipelines = Pipelines(engine)
        schedules = Schedules(engine, pipelines)
        made = await schedules.create(access, {"name": "nightly", "intervalSeconds": 60, "pipeline": PIPELINE})
        create = pipelines.create

        async def paused_first(*args: Any, **kwargs: Any) -> Any:
            # no hook opens the window between the firing's read of its schedule and its pipeline's
            # write: the instance's public create is wrapped to land an operator's pause there, once
            pipelines.create = create  # type: ignore[method-assign]
            await schedules.set_state(access, made["id"], "paused")
            return await create(*args, **kwargs)

        pipelines.create = paused_first  # type: ignore[method-assign]
        await clock.advance(timedelta(seconds=61))
        assert await engine.fire_schedules() == 0
        got = await schedules.get(access, made["id"])
        assert (got["state"], got["firings"], got["lastFireAt"]) == ("paused", 0, None)
        assert (await pipelines.list(access))["totalCount"] == 0

        await schedules.set_state(access, made["id"], "enabled")
        assert await engine.fire_schedules() == 1
        got = await schedules.get(access, made["id"])
        assert (got["state"], got["firings"]) == ("enabled", 1) and got["lastFireAt"] is not None
        listed = await pipelines.list(access)
        assert listed["totalCount"] == 1 and listed["items"][0]["name"] == "nightly"
        assert await engine.fire_schedules() == 0  # the firing happened: nothing more
