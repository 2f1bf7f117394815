"""A pipeline's workflow in-process, with the order of its events forced: an operator's message
sent before the last stage's result is received, even when the result's outcome is journaled
first (both wait for the same activation). Without that, the pipeline completes with the
stages just appended never run."""

from __future__ import annotations

import asyncio

import pytest

from flowli import Registry
from flowli.pipelines import Applications, Pipelines, install

pytestmark = pytest.mark.integration


async def test_stages_appended_while_the_last_result_waits_are_run_not_lost(open_engine):
    registry = Registry()
    install(registry)
    async with open_engine(registry, worker=False) as engine:
        _, key = await Applications(engine).create("billing")
        access = await Applications(engine).authenticate(key)
        pipelines = Pipelines(engine)
        made, _ = await pipelines.create(access, {"name": "race", "stages": [
            {"stageName": "first", "stageHandlerName": "Step"}]}, idempotent=False)
        [task] = [t for t in await engine.tasks(application="billing") if t.queue == "pipelines:billing:Step"] or [None]
        assert task is None  # nothing dispatched before the workflow ran
        async with engine.worker(queues=("pipelines",)):
            eid = (await engine.list(workflow="flowli.pipeline", application="billing"))[0].eid
            await engine.wait_suspended(eid, application="billing")
        [job] = [t for t in await engine.tasks(eid=eid, application="billing") if t.state == "ready"]
        # no worker runs now: the result is journaled, then the append is sent; both wait
        await engine.answer(job.id, {"ok": True, "output": "one", "attempt": 1}, application="billing")
        await pipelines.append(access, made["id"], {"stages": [{"stageName": "second", "stageHandlerName": "Step"}]})
        async with engine.worker(queues=("pipelines",)):
            deadline = asyncio.get_running_loop().time() + 10
            while True:  # until the workflow took both events
                view = await pipelines.get(access, made["id"])
                if view["status"] == "Completed" or view["stages"][-1]["status"] != "NotStarted":
                    break
                assert asyncio.get_running_loop().time() < deadline, view
                await asyncio.sleep(0.02)
        assert view["status"] == "Running", view
        assert [(s["name"], s["status"]) for s in view["stages"]] == [("first", "Completed"), ("second", "Pending")]
