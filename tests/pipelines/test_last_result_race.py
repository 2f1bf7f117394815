"""The last stage's result and an operator's append, in process: the pipeline's decider takes each
in the write that carries it, so there is no window between a result and the activation that
takes it. An append sent before the last result is run; one sent after it finds the pipeline
Completed (409), never accepted and then lost."""

from __future__ import annotations

import pytest

from flowli.pipelines import Conflict

pytestmark = pytest.mark.integration


async def test_stages_appended_before_the_last_result_are_run_and_after_it_refused(open_pipelines):
    async with open_pipelines() as (engine, access, pipelines):
        made, _ = await pipelines.create(access, {"name": "race", "stages": [
            {"stageName": "first", "stageHandlerName": "Step"}]}, idempotent=False)
        # no worker runs: every command, its start too, is decided in its own write
        eid = (await engine.list(workflow="flowli.pipeline", application="billing"))[0].eid
        assert (await engine.status(eid, application="billing")).status.value == "suspended"
        [job] = [t for t in await engine.tasks(eid=eid, application="billing") if t.state == "ready"]
        await pipelines.append(access, made["id"], {"stages": [{"stageName": "second", "stageHandlerName": "Step"}]})
        await engine.answer(job.id, {"ok": True, "output": "one", "attempt": 1}, application="billing")
        view = await pipelines.get(access, made["id"])
        assert view["status"] == "Running", view
        assert [(s["name"], s["status"]) for s in view["stages"]] == [("first", "Completed"), ("second", "Pending")]
        [job] = [t for t in await engine.tasks(eid=eid, application="billing") if t.state == "ready"]
        await engine.answer(job.id, {"ok": True, "output": "two", "attempt": 2}, application="billing")
        assert (await pipelines.get(access, made["id"]))["status"] == "Completed"
        with pytest.raises(Conflict):
            await pipelines.append(access, made["id"], {"stages": [{"stageName": "late", "stageHandlerName": "Step"}]})
        assert [s["name"] for s in (await pipelines.get(access, made["id"]))["stages"]] == ["first", "second"]
