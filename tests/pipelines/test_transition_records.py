"""The records of a pipeline's transitions are written in the write of the transition, never
beside it: its numeric ids and its sealed values in the write that starts its execution (a start
refused leaves none of them), a refused late result as an entry of its journal (its history
shows it), an idempotent create known by its execution's key (no claim record), while a claim
that older code wrote still finds its pipeline. Through the HTTP routes of a service in this
process (``tests/pipelines/test_records.py``), on both backends."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from flowli.domain import DatabaseUnavailable, keyed_eid
from flowli.pipelines import _retry
from flowli.pipelines._spec import declaration, intent_digest

from .test_records import history_with, served, statuses

pytestmark = pytest.mark.integration
__all__ = ["served"]

KINDS = ("pipeline", "stage", "secret", "idempotency", "refused")


async def counts(svc: Any) -> dict[str, int]:
    return {kind: await svc.engine.items.count(kind, "billing") for kind in KINDS}


async def test_a_create_whose_start_is_refused_leaves_no_ids_and_no_sealed_value(served):
    async with served() as svc:
        refused: list[Any] = []

        async def fail_once(t: Any, call_next: Any) -> Any:
            if not refused:  # the store goes away at the start's write: nothing of it is written
                refused.append(t.eid)
                raise DatabaseUnavailable("sqlite:///store", "the store went away (injected)", "yes")
            return await call_next()

        svc.engine.use(fail_once, kinds=("start",))
        body = {"name": "records", "stages": [{"stageName": "one", "stageHandlerName": "Step"},
                                              {"stageName": "two", "stageHandlerName": "Step"}],
                "pipelineContextItems": [{"key": "token", "value": "s3cret", "isSensitive": True}]}
        first = await svc.http.post("/pipelines", headers=svc.api, json=body)
        assert first.status_code == 503 and refused, first.text
        assert await counts(svc) == dict.fromkeys(KINDS, 0)
        listed = (await svc.http.get("/pipelines", headers=svc.api)).json()
        assert listed["totalCount"] == 0, listed
        # sent again, it is created with its ids and its sealed value, in its start's write
        again = await svc.http.post("/pipelines", headers=svc.api, json=body)
        assert again.status_code == 200, again.text
        made = again.json()
        assert await counts(svc) == {"pipeline": 1, "stage": 2, "secret": 1, "idempotency": 0, "refused": 0}
        item = await svc.engine.items.get("pipeline", made["id"])
        assert [(await svc.engine.items.get("stage", s["id"])).key for s in made["stages"]] == [
            f"{item.key}/one", f"{item.key}/two"]
        await svc.bootstrap("Step")
        job = await svc.job()
        assert [(c["key"], c["value"]) for c in job["contextItems"]] == [("token", "s3cret")]
        assert "s3cret" not in str(await svc.engine.journal(item.key))


async def test_a_refused_late_result_is_in_the_pipelines_journal_and_history(served):
    async with served() as svc:
        await svc.bootstrap("Step")
        made = await svc.create({"stageName": "one", "stageHandlerName": "Step"})
        job = await svc.job()
        assert (await svc.http.post(f"/pipelines/{made['id']}/cancel", headers=svc.api)).status_code == 200
        await svc.until(made["id"], lambda v: v["status"] == "Cancelled", "cancelled")
        late = await svc.result(job, output="late", contextItems=[{"key": "k", "value": "v", "isSensitive": True}],
                                appendStages=[{"stageName": "ghost", "stageHandlerName": "Step"}])
        assert late.status_code == 409, late.text
        stale = await svc.result({**job, "attempt": job["attempt"] + 1}, output="stale")
        assert stale.status_code == 409, stale.text
        history = await history_with(svc, made["id"], "result.refused")
        refused = [h for h in history if h["kind"] == "result.refused"]
        assert [(h["attempt"], h["value"]["executionId"], h["value"]["stageId"]) for h in refused] == [
            (job["attempt"], job["executionId"], job["stageId"]), (job["attempt"] + 1, job["executionId"], job["stageId"])]
        assert all(h["seq"] is not None and h["actor"] == "raw" for h in refused), refused
        assert "cancelled" in refused[0]["value"]["reason"] and "not the current attempt" in refused[1]["value"]["reason"]
        # no record beside the journal: no refused item, no sealed value, no stage of the refused result
        assert await counts(svc) == {"pipeline": 1, "stage": 1, "secret": 0, "idempotency": 0, "refused": 0}
        assert statuses(await svc.get(made["id"])) == [("one", "Cancelled")]


def idempotent(key: str, handler: str = "Step") -> dict[str, Any]:
    return {"name": "records", "idempotencyKey": key, "stages": [{"stageName": "one", "stageHandlerName": handler}]}


async def test_an_idempotent_create_is_known_by_its_executions_key(served):
    async with served() as svc:
        created = await asyncio.gather(*(svc.http.post("/pipelines/idempotent", headers=svc.api,
                                                       json=idempotent("order-7")) for _ in range(3)))
        assert sorted(r.status_code for r in created) == [200, 200, 201], [r.text for r in created]
        pid = {r.json()["pipeline"]["id"] for r in created}
        assert len(pid) == 1, pid
        [pid_] = pid
        assert [r.json()["wasExisting"] for r in created if r.status_code == 200] == [True, True]
        # one pipeline with its one stage: the creates that found the execution wrote nothing
        assert await counts(svc) == {"pipeline": 1, "stage": 1, "secret": 0, "idempotency": 0, "refused": 0}
        again = await svc.http.post("/pipelines/idempotent", headers=svc.api, json={**idempotent("order-7"),
                                                                                   "traceId": "another trace"})
        assert (again.status_code, again.json()["pipeline"]["id"], again.json()["created"]) == (200, pid_, False)
        other = await svc.http.post("/pipelines/idempotent", headers=svc.api, json=idempotent("order-7", "Other"))
        assert other.status_code == 409 and other.json()["pipelineId"] == pid_, other.text
        found = await svc.http.post("/pipelines/by-idempotency-key", headers=svc.api, json={"idempotencyKey": "order-7"})
        assert found.status_code == 200 and found.json()["id"] == pid_, found.text
        missing = await svc.http.post("/pipelines/by-idempotency-key", headers=svc.api, json={"idempotencyKey": "nope"})
        assert missing.status_code == 404, missing.text
        assert await counts(svc) == {"pipeline": 1, "stage": 1, "secret": 0, "idempotency": 0, "refused": 0}


async def created_by_older_code(svc: Any, body: dict[str, Any]) -> int:
    """A pipeline created as older code did: a claim of its key (its execution's key and its
    intent), its id and its stages' ids as items written before its start, its input without
    its intent. Returns its id."""
    decl = declaration(body)
    start_key = str(uuid.uuid4())
    items = svc.engine.items
    await items.put("idempotency", "billing", body["idempotencyKey"], {"eid": start_key, "intent": intent_digest(decl)},
                    svc.engine.clock.now())
    eid = keyed_eid("flowli.pipeline", f"billing/{start_key}")
    specs = [{**s, "plan": _retry.plan(s, decl["name"], decl["keywords"], [])} for s in decl["stages"]]
    stored = await items.put_many([("pipeline", "billing", eid, {"name": decl["name"], "idempotencyKey": body["idempotencyKey"]}),
                                   *[("stage", "billing", f"{eid}/{s['stageName']}", {"eid": eid, "name": s["stageName"], "spec": s})
                                     for s in specs]], svc.engine.clock.now())
    pid = stored[0][0].id
    spec = {"pipelineId": pid, "name": decl["name"], "idempotencyKey": body["idempotencyKey"], "traceId": None,
            "application": "billing", "stages": [{**s, "id": item.id} for s, (item, _) in zip(specs, stored[1:])],
            "keywords": decl["keywords"], "context": decl["context"]}
    await svc.engine.start("flowli.pipeline", spec, by="billing", application="billing", key=start_key,
                           queue="pipelines", version="2")
    return int(pid)


async def test_a_claim_written_by_older_code_still_finds_its_pipeline(served):
    async with served() as svc:
        pid = await created_by_older_code(svc, idempotent("legacy-1"))
        await svc.until(pid, lambda v: v["stages"][0]["status"] == "Pending", "started")
        found = await svc.http.post("/pipelines/by-idempotency-key", headers=svc.api, json={"idempotencyKey": "legacy-1"})
        assert found.status_code == 200 and found.json()["id"] == pid, found.text
        again = await svc.http.post("/pipelines/idempotent", headers=svc.api, json=idempotent("legacy-1"))
        assert (again.status_code, again.json()["pipeline"]["id"], again.json()["wasExisting"]) == (200, pid, True)
        other = await svc.http.post("/pipelines/idempotent", headers=svc.api, json=idempotent("legacy-1", "Other"))
        assert other.status_code == 409 and other.json()["pipelineId"] == pid, other.text
        assert await counts(svc) == {"pipeline": 1, "stage": 1, "secret": 0, "idempotency": 1, "refused": 0}
        # a key that older code never used: created the new way, beside it
        new = await svc.http.post("/pipelines/idempotent", headers=svc.api, json=idempotent("fresh-1"))
        assert new.status_code == 201 and new.json()["pipeline"]["id"] != pid, new.text
        await svc.bootstrap("Step")
        assert (await svc.result(await svc.job(), output="done")).status_code == 202
