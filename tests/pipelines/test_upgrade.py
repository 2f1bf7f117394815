"""Pipelines created before ``flowli.pipeline`` became a decider (its workflow, version "1") in a
store that the new code opens: a finished one keeps its view and its history, one in flight
finishes through the same routes (results, a failed attempt retried, an approval, a rerun of a
failed one), and a new pipeline beside them is the decider's (version "2"). Each old pipeline
is created as the previous code created it: its pipeline and stage items, then a start of the
workflow of version 1 with the same spec. Both backends."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from flowli.domain import keyed_eid
from flowli.pipelines import WORKFLOW, plan

from .test_records import Service, served, statuses  # noqa: F401 - the fixture, re-exported

pytestmark = pytest.mark.integration


async def create_v1(svc: Service, name: str, *stages: dict[str, Any]) -> tuple[int, str]:
    """A pipeline as the code before the decider created it: its items, then its workflow's start."""
    engine = svc.engine
    key = str(uuid.uuid4())
    eid = keyed_eid(WORKFLOW, f"billing/{key}")
    now = engine.clock.now()
    specs = [{"input": None, "description": None, "isEvent": False, "options": {}, "dependsOn": [], **s} for s in stages]
    specs = [{**s, "plan": plan(s, name, [], [])} for s in specs]
    wanted = [("pipeline", "billing", eid, {"name": name, "idempotencyKey": None})]
    wanted += [("stage", "billing", f"{eid}/{s['stageName']}", {"eid": eid, "name": s["stageName"], "spec": s})
               for s in specs]
    stored = await engine.items.put_many(wanted, now)
    pid = stored[0][0].id
    spec = {"pipelineId": pid, "name": name, "idempotencyKey": None, "traceId": None, "application": "billing",
            "stages": [{**s, "id": item.id} for s, (item, _) in zip(specs, stored[1:])], "keywords": [], "context": []}
    await engine.start(WORKFLOW, spec, key=key, queue="pipelines", version="1", application="billing")
    return pid, eid


async def test_pipelines_of_the_workflow_finish_and_read_beside_the_deciders(served):  # noqa: F811 - the fixture
    async with served() as svc:
        await svc.bootstrap("Step", "Review")
        done_id, done_eid = await create_v1(svc, "old-done", {"stageName": "one", "stageHandlerName": "Step"})
        assert (await svc.result(await svc.job(), output="x")).status_code == 202
        done = await svc.until(done_id, lambda v: v["status"] == "Completed", "completed")
        assert (await svc.engine.status(done_eid)).version == "1"
        assert statuses(done) == [("one", "Completed")] and done["stages"][0]["output"] == "x"

        # in flight: a failed attempt retried, then a stage waiting for approval
        live_id, _ = await create_v1(svc, "old-live",
                                     {"stageName": "flaky", "stageHandlerName": "Step",
                                      "options": {"maxRetries": 1, "retryInterval": 0.01}},
                                     {"stageName": "review", "stageHandlerName": "Review", "dependsOn": ["flaky"]})
        job = await svc.job()
        assert (await svc.result(job, isSuccess=False, errorCode="UPSTREAM_ERROR", errorMessage="down")).status_code == 202
        again = await svc.job()
        assert again["attempt"] == 2
        assert (await svc.result(again, output="up")).status_code == 202
        review = await svc.job()
        assert (await svc.result(review, output="look", isWaitingForApproval=True)).status_code == 202
        await svc.until(live_id, lambda v: v["stages"][1]["status"] == "WaitingForApproval", "waiting")
        r = await svc.http.post(f"/stages/{review['stageId']}/resume", headers=svc.api, json={"approved": True})
        assert r.status_code == 204, r.text
        live = await svc.until(live_id, lambda v: v["status"] == "Completed", "completed")
        assert statuses(live) == [("flaky", "Completed"), ("review", "Completed")]
        assert live["stages"][0]["attempt"] == 2

        # a failed one is rerun (its workflow's frame reopened), and completes
        failed_id, _ = await create_v1(svc, "old-failed", {"stageName": "once", "stageHandlerName": "Step"})
        job = await svc.job()
        assert (await svc.result(job, isSuccess=False, errorCode="BAD", errorMessage="no", retryable=False)
                ).status_code == 202
        failed = await svc.until(failed_id, lambda v: v["status"] == "Failed", "failed")
        r = await svc.http.post("/pipelines/rerunStage", headers=svc.api, json={"stageId": failed["stages"][0]["id"]})
        assert r.status_code == 200, r.text
        assert (await svc.result(await svc.job(), output="fine")).status_code == 202
        await svc.until(failed_id, lambda v: v["status"] == "Completed", "completed")

        # a new pipeline beside them is the decider's; the lists show every kind
        new = await svc.create({"stageName": "fresh", "stageHandlerName": "Step"})
        assert (await svc.result(await svc.job(), output="y")).status_code == 202
        await svc.until(new["id"], lambda v: v["status"] == "Completed", "completed")
        record = (await svc.engine.list(workflow=WORKFLOW, application="billing"))
        assert sorted(r.version for r in record) == ["1", "1", "1", "2"]
        listed = (await svc.http.get("/pipelines", headers=svc.api, params={"statuses": "Completed"})).json()
        assert {p["id"] for p in listed["items"]} == {done_id, live_id, failed_id, new["id"]}
        history = (await svc.http.get(f"/pipelines/{done_id}/history", headers=svc.api)).json()
        assert any(h["kind"] == "execution.completed" for h in history)
