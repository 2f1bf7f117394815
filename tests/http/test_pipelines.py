"""Pipelines over HTTP against a real ``flowli serve``: create (legacy, idempotent 201/200/409),
lookup, list, order and dependsOn, the worker protocol, retries, approvals, operator actions,
redaction, isolation and bad input."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from flowli.client import HttpWorker, PipelinesClient, StageError, WaitForApproval

from ..served import everything, flowli, rows

pytestmark = pytest.mark.e2e

STAGE = {"stageName": "validate", "stageHandlerName": "ValidateInvoiceHandler", "input": '{"invoiceId":"invoice-42"}'}


def body(**over: Any) -> dict[str, Any]:
    return {"name": "validate-invoice", "stages": [dict(STAGE)], **over}


async def until_status(client: PipelinesClient, pid: int, *statuses: str, timeout: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        view = await client.get(pid)
        if view["status"] in statuses:
            return view
        if time.monotonic() > deadline:
            raise AssertionError(f"pipeline {pid} is {view['status']}, not {statuses}: {view}")
        await asyncio.sleep(0.05)


async def until_stage(client: PipelinesClient, pid: int, name: str, *statuses: str, timeout: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        view = await client.get(pid)
        stage = next(s for s in view["stages"] if s["name"] == name)
        if stage["status"] in statuses:
            return stage
        if time.monotonic() > deadline:
            raise AssertionError(f"stage {name} is {stage['status']}, not {statuses}: {view}")
        await asyncio.sleep(0.05)


class Worker:
    """An HttpWorker running in the background for the block."""

    def __init__(self, url: str, key: str, name: str = "w1", concurrency: int = 4):
        self.worker = HttpWorker(url, key, name, wait_seconds=2)
        self.concurrency = concurrency
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> HttpWorker:
        self.task = asyncio.create_task(self.worker.run(concurrency=self.concurrency))
        return self.worker

    async def __aexit__(self, *exc: object) -> None:
        self.worker.stop(grace=0)  # a test's handler may wait for ever: cancel it at once
        assert self.task is not None
        await asyncio.wait_for(self.task, 30)


async def test_idempotent_create_answers_201_then_200_then_409_and_lookup_by_key(service, billing):
    _, key = billing
    async with PipelinesClient(service.url, key) as client:
        first = await client.create_idempotent(body(), "invoice-42:validate:v1")
        assert (first["created"], first["wasExisting"]) == (True, False)
        pipeline = first["pipeline"]
        assert pipeline["name"] == "validate-invoice" and pipeline["idempotencyKey"] == "invoice-42:validate:v1"
        assert [s["name"] for s in pipeline["stages"]] == ["validate"] and pipeline["applicationId"] == billing[0]["id"]
        # the same intent (traceId is not intent): 200, the same pipeline
        r = await client.http.post("/pipelines/idempotent", json={**body(traceId="t-2"), "idempotencyKey": "invoice-42:validate:v1"})
        assert r.status_code == 200 and r.json()["pipeline"]["id"] == pipeline["id"]
        assert (r.json()["created"], r.json()["wasExisting"]) == (False, True)
        # another intent: 409 naming the pipeline
        other = body(stages=[{**STAGE, "input": "{}"}])
        r = await client.http.post("/pipelines/idempotent", json={**other, "idempotencyKey": "invoice-42:validate:v1"})
        assert r.status_code == 409 and r.json()["pipelineId"] == pipeline["id"] and "idempotencyKey" in r.json()["error"]
        assert (await client.by_idempotency_key("invoice-42:validate:v1"))["id"] == pipeline["id"]
        r = await client.http.post("/pipelines/by-idempotency-key", json={"idempotencyKey": "nope"})
        assert r.status_code == 404
        # the legacy create answers the pipeline itself, a new one each time
        a, b = await client.create(body()), await client.create(body())
        assert a["id"] != b["id"] and a["name"] == "validate-invoice"


async def test_a_dispatch_invoice_pipeline_runs_in_dependency_order_with_an_http_worker(service, billing):
    _, key = billing
    seen: list[tuple[str, str | None]] = []
    async with PipelinesClient(service.url, key) as client:
        async with Worker(service.url, key) as worker:
            @worker.handler("LoadInvoiceHandler")
            async def load(job: dict[str, Any]) -> str:
                seen.append(("load", job["prevStageOutput"]))
                return "loaded"

            @worker.handler("EmailInvoiceHandler")
            async def email(job: dict[str, Any]) -> str:
                seen.append(("email", job["prevStageOutput"]))
                return "emailed"

            @worker.handler("ArchiveInvoiceHandler")
            async def archive(job: dict[str, Any]) -> str:
                seen.append(("archive", job["prevStageOutput"]))
                return "archived"

            created = await client.create({"name": "dispatch-invoice", "stages": [
                {"stageName": "load", "stageHandlerName": "LoadInvoiceHandler"},
                {"stageName": "email", "stageHandlerName": "EmailInvoiceHandler", "options": {"dependsOn": ["load"]}},
                {"stageName": "archive", "stageHandlerName": "ArchiveInvoiceHandler", "options": {"dependsOn": ["load"]}},
            ]})
            done = await until_status(client, created["id"], "Completed")
        assert seen[0] == ("load", None) and sorted(seen[1:]) == [("archive", "loaded"), ("email", "loaded")]
        assert [(s["name"], s["status"], s["output"], s["attempt"]) for s in done["stages"]] == [
            ("load", "Completed", "loaded", 1), ("email", "Completed", "emailed", 1),
            ("archive", "Completed", "archived", 1)]
        assert done["stages"][1]["dependsOn"] == ["load"] and done["finishedAt"] is not None
        listed = await client.list(statuses=["Completed"])
        assert [p["id"] for p in listed["items"]] == [created["id"]] and listed["totalCount"] == 1


async def test_declaration_order_a_stage_waits_for_the_one_before_it(service, billing):
    _, key = billing
    order: list[str] = []
    async with PipelinesClient(service.url, key) as client, Worker(service.url, key) as worker:
        @worker.handler("H")
        async def h(job: dict[str, Any]) -> str:
            order.append(job["stageName"])
            await asyncio.sleep(0.05)
            return job["stageName"]

        created = await client.create({"name": "ordered", "stages": [
            {"stageName": n, "stageHandlerName": "H"} for n in ("one", "two", "three")]})
        done = await until_status(client, created["id"], "Completed")
        assert order == ["one", "two", "three"]
        assert [s["dependsOn"] for s in done["stages"]] == [[], ["one"], ["two"]]


async def test_retries_follow_the_options_and_terminal_codes_never_retry(service, billing):
    _, key = billing
    calls: dict[str, int] = {}
    async with PipelinesClient(service.url, key) as client, Worker(service.url, key) as worker:
        @worker.handler("Flaky")
        async def flaky(job: dict[str, Any]) -> str:
            calls[job["stageName"]] = calls.get(job["stageName"], 0) + 1
            if job["stageName"] == "upstream" and job["attempt"] < 3:
                raise StageError("UPSTREAM_ERROR", "502 from upstream")
            if job["stageName"] == "rejected":
                raise StageError("BUSINESS_REJECTED", "no")
            if job["stageName"] == "not-listed":
                raise StageError("OTHER", "not in the allowlist")
            if job["stageName"] == "no-retry":
                raise StageError("UPSTREAM_ERROR", "told not to", retryable=False)
            return f"ok after {job['attempt']}"

        retry = {"maxRetries": 3, "retryInterval": 0.2, "backoff": "fixed",
                 "retryOnErrorCodes": ["UPSTREAM_ERROR", "BUSINESS_REJECTED"]}
        made = {}
        for name in ("upstream", "rejected", "not-listed", "no-retry"):
            made[name] = (await client.create({"name": name, "stages": [
                {"stageName": name, "stageHandlerName": "Flaky", "options": retry}]}))["id"]
        ok = await until_status(client, made["upstream"], "Completed")
        assert ok["stages"][0]["output"] == "ok after 3" and ok["stages"][0]["attempt"] == 3
        for name in ("rejected", "not-listed", "no-retry"):
            failed = await until_status(client, made[name], "Failed")
            assert failed["stages"][0]["status"] == "Failed" and failed["stages"][0]["attempt"] == 1, failed
        assert calls == {"upstream": 3, "rejected": 1, "not-listed": 1, "no-retry": 1}
        assert (await client.get(made["rejected"]))["stages"][0]["errorCode"] == "BUSINESS_REJECTED"
        # each failed attempt's event names the worker that held its lease (this test's one worker)
        failures = [h for h in await client.history(made["upstream"]) if h["kind"] == "stage.failed"]
        assert [h["attempt"] for h in failures] == [1, 2]
        assert len({h["value"]["leasedBy"] for h in failures}) == 1 and failures[0]["value"]["leasedBy"]


async def test_approvals_are_idempotent_and_a_conflict_is_409(service, billing):
    _, key = billing
    async with PipelinesClient(service.url, key) as client, Worker(service.url, key) as worker:
        @worker.handler("Review")
        async def review(job: dict[str, Any]) -> Any:
            return WaitForApproval(output=f"review {job['stageName']}")

        yes = await client.create({"name": "approve", "stages": [{"stageName": "review", "stageHandlerName": "Review"}]})
        no = await client.create({"name": "reject", "stages": [{"stageName": "review", "stageHandlerName": "Review"}]})
        waiting = await until_stage(client, yes["id"], "review", "WaitingForApproval")
        assert waiting["output"] == "review review"
        r = await client.http.post(f"/stages/{waiting['id']}/resume", json={"approved": True})
        assert r.status_code == 204
        r = await client.http.post(f"/stages/{waiting['id']}/resume", json={"approved": True})
        assert r.status_code == 204  # an identical repeat
        r = await client.http.post(f"/stages/{waiting['id']}/resume", json={"approved": False, "rejectionReason": "x"})
        assert r.status_code == 409 and "decided" in r.json()["error"]
        assert (await until_status(client, yes["id"], "Completed"))["stages"][0]["output"] == "review review"

        parked = await until_stage(client, no["id"], "review", "WaitingForApproval")
        r = await client.http.post(f"/stages/{parked['id']}/resume", json={"approved": False})
        assert r.status_code == 400 and "rejectionReason" in r.json()["error"]
        await client.resume_stage(parked["id"], False, "The requested operation was declined.")
        failed = await until_status(client, no["id"], "Failed")
        assert failed["stages"][0]["errorMessage"] == "The requested operation was declined."
        # a stage that is not waiting and was never decided: 409
        other = await client.create({"name": "none", "stages": [{"stageName": "s", "stageHandlerName": "Nobody"}]})
        r = await client.http.post(f"/stages/{other['stages'][0]['id']}/resume", json={"approved": True})
        assert r.status_code == 409


async def test_pause_resume_skip_rerun_and_cancel(service, billing):
    _, key = billing
    gate = asyncio.Event()
    runs: list[str] = []
    async with PipelinesClient(service.url, key) as client, Worker(service.url, key) as worker:
        @worker.handler("Step")
        async def step(job: dict[str, Any]) -> str:
            runs.append(job["stageName"])
            if job["stageName"] == "b" and not gate.is_set():
                raise StageError("VALIDATION_ERROR", "bad data")
            return job["stageName"]

        made = await client.create({"name": "ops", "stages": [
            {"stageName": n, "stageHandlerName": "Step"} for n in ("a", "b", "c")]})
        pid = made["id"]
        failed = await until_status(client, pid, "Failed")
        assert [s["status"] for s in failed["stages"]] == ["Completed", "Failed", "NotStarted"]
        # rerun the failed stage and the ones after it, on the failed pipeline
        gate.set()
        b = failed["stages"][1]["id"]
        await client.rerun_stage(b, rerun_all_next_stages=True)
        done = await until_status(client, pid, "Completed")
        assert [s["status"] for s in done["stages"]] == ["Completed"] * 3 and runs == ["a", "b", "b", "c"]
        r = await client.http.post(f"/pipelines/{pid}/stages", json={"stages": [{"stageName": "d", "stageHandlerName": "Step"}]})
        assert r.status_code == 409  # terminal

        # pause stops dispatch; skip lets dependents run; resume goes on
        held = await client.create({"name": "held", "stages": [
            {"stageName": "x", "stageHandlerName": "Nobody"}, {"stageName": "y", "stageHandlerName": "Step"}]})
        await client.pause(held["id"])
        await until_status(client, held["id"], "Paused")
        await client.skip_stage(held["stages"][0]["id"])
        await asyncio.sleep(0.5)
        view = await client.get(held["id"])
        assert [s["status"] for s in view["stages"]] == ["Skipped", "NotStarted"] and view["status"] == "Paused"
        await client.resume(held["id"])
        assert [s["status"] for s in (await until_status(client, held["id"], "Completed"))["stages"]] == ["Skipped", "Completed"]

        # append to a running pipeline, then cancel it: unfinished stages are Cancelled
        live = await client.create({"name": "live", "stages": [{"stageName": "p", "stageHandlerName": "Nobody"}]})
        added = await client.append_stages(live["id"], [{"stageName": "q", "stageHandlerName": "Step"}])
        assert [(s["name"], s["dependsOn"]) for s in added] == [("q", ["p"])]
        cancelled = await client.cancel(live["id"])
        cancelled = await until_status(client, live["id"], "Cancelled")
        assert [s["status"] for s in cancelled["stages"]] == ["Cancelled", "Cancelled"]
        r = await client.http.post(f"/pipelines/{live['id']}/resume")
        assert r.status_code == 409
        history = await client.history(live["id"])
        assert any("cancel" in str(h["value"]) or h["kind"] == "execution.cancelled" for h in history)


async def test_the_raw_worker_protocol_stale_results_and_leases(service, billing):
    _, key = billing
    async with PipelinesClient(service.url, key) as client, httpx.AsyncClient(base_url=service.url) as http:
        made = await client.create(body())
        boot = (await http.post("/workers/bootstrap", headers={"X-API-Key": key}, json={
            "workerName": "raw", "supportedHandlers": ["ValidateInvoiceHandler"]})).json()
        assert boot["lease"]["ttlSeconds"] == 3.0 and boot["application"]["name"] == billing[0]["name"]
        s = {"X-Worker-Session": boot["workerSessionToken"]}
        job = (await http.post("/jobs/pull", headers=s, json={"waitSeconds": 5})).json()
        assert (job["pipelineId"], job["stageName"], job["attempt"]) == (made["id"], "validate", 1)
        stage = job["stageId"]
        lease = {"executionId": job["executionId"], "workerId": boot["workerId"]}
        got = (await http.post(f"/stages/{stage}/lease/acquire", headers=s, json=lease)).json()
        assert got["acquired"] is True and got["attempt"] == 1
        assert (await client.get(made["id"]))["stages"][0]["status"] == "Running"
        # stop renewing: the lease expires, the stage gets a new executionId and attempt
        second = None
        for _ in range(3):
            r = await http.post("/jobs/pull", headers=s, json={"waitSeconds": 10})
            if r.status_code == 200:
                second = r.json()
                break
        assert second is not None and second["executionId"] != job["executionId"] and second["attempt"] == 2
        renew = (await http.post(f"/stages/{stage}/lease/renew", headers=s, json=lease)).json()
        assert renew["acquired"] is False
        late = await http.post(f"/stages/{stage}/result", headers=s, json={
            "executionId": job["executionId"], "attempt": 1, "isSuccess": True, "output": "late"})
        assert late.status_code == 409 and late.json()["accepted"] is False
        lease2 = {"executionId": second["executionId"], "workerId": boot["workerId"]}
        assert (await http.post(f"/stages/{stage}/lease/acquire", headers=s, json=lease2)).json()["acquired"]
        result = {"executionId": second["executionId"], "attempt": 2, "isSuccess": True, "output": "valid",
                  "contextItems": [{"key": "checked", "value": "yes"}]}
        assert (await http.post(f"/stages/{stage}/result", headers=s, json=result)).status_code == 202
        assert (await http.post(f"/stages/{stage}/result", headers=s, json=result)).status_code == 202  # a repeat
        assert (await http.post("/jobs/ack", headers=s, json={"token": second["token"]})).status_code == 200
        done = await until_status(client, made["id"], "Completed")
        assert done["stages"][0]["output"] == "valid" and done["stages"][0]["attempt"] == 2
        assert {"key": "checked", "value": "yes", "valueType": "string", "isSensitive": False} in done["pipelineContextItems"]
        history = await client.history(made["id"])
        refused = [h for h in history if h["kind"] == "result.refused"]
        assert refused and refused[0]["value"]["executionId"] == job["executionId"] and refused[0]["attempt"] == 1
        # the history says which worker held each attempt's lease: the one that expired, the one answered
        expired = [h for h in history if h["kind"] == "stage.lease_expired"]
        completed = [h for h in history if h["kind"] == "stage.completed"]
        assert [(h["attempt"], h["value"]["leasedBy"]) for h in expired] == [(1, boot["workerId"])]
        assert [(h["attempt"], h["value"]["leasedBy"]) for h in completed] == [(2, boot["workerId"])]
        assert (await http.post("/workers/heartbeat", headers=s, json={"state": "draining", "inFlight": 0})).status_code == 200
        listed = (await http.get("/workers", headers={"X-API-Key": key})).json()
        assert [(w["workerName"], w["state"], w["supportedHandlers"]) for w in listed] == [
            ("raw", "draining", ["ValidateInvoiceHandler"])]
        assert (await http.post("/workers/shutdown", headers=s)).status_code == 200
        assert (await http.post("/jobs/pull", headers=s, json={})).status_code == 401
        # no job within waitSeconds: 204
        boot2 = (await http.post("/workers/bootstrap", headers={"X-API-Key": key}, json={
            "workerName": "idle", "supportedHandlers": ["NoSuchHandler"]})).json()
        t0 = time.monotonic()
        r = await http.post("/jobs/pull", headers={"Authorization": f"Bearer {boot2['workerSessionToken']}"},
                            json={"waitSeconds": 1})
        assert r.status_code == 204 and 0.9 <= time.monotonic() - t0 < 5


async def test_sensitive_context_is_redacted_everywhere_public_and_real_in_the_job(service, billing, names):
    _, key = billing
    secret = names("tok-9f8e7d6c5b4a")
    seen: list[Any] = []
    async with PipelinesClient(service.url, key) as client, Worker(service.url, key) as worker:
        @worker.handler("ValidateInvoiceHandler")
        async def validate(job: dict[str, Any]) -> str:
            seen.append({c["key"]: c["value"] for c in job["contextItems"]})
            return "ok"

        made = await client.create(body(pipelineContextItems=[
            {"key": "accessToken", "value": secret, "isSensitive": True}, {"key": "invoiceId", "value": "invoice-42"}]))
        done = await until_status(client, made["id"], "Completed")
        assert seen == [{"accessToken": secret, "invoiceId": "invoice-42"}]
        public = [made, done, await client.list(), await client.history(made["id"])]
        assert secret not in str(public)
        assert {"key": "accessToken", "value": "***", "valueType": "string", "isSensitive": True} in done["pipelineContextItems"]
    assert secret not in service.logs()
    [(eid,)] = await rows(service.db, "SELECT key FROM items WHERE kind = 'pipeline' AND id = ?", made["id"])
    assert secret in await everything(service.db)  # kept (as an item, for the workers) ...
    journal = "\n".join(str(r) for r in await rows(service.db, "SELECT * FROM journal"))
    assert secret not in journal  # ... and never in the journal
    for args in (("show", eid), ("ls",)):
        shown = flowli(service.db, *args)
        assert shown.returncode == 0, shown.stderr
        assert secret not in shown.stdout + shown.stderr
    assert eid[:8] in flowli(service.db, "ls").stdout  # pipelines show in flowli ls


async def test_one_application_never_reads_acts_on_or_receives_the_jobs_of_another(service, billing, names):
    _, key = billing
    _, other_key, _ = await service.application(names("shop"))
    async with PipelinesClient(service.url, key) as mine, PipelinesClient(service.url, other_key) as theirs, \
            httpx.AsyncClient(base_url=service.url) as http:
        made = await mine.create(body())
        for call in (theirs.http.get(f"/pipelines/{made['id']}"), theirs.http.post(f"/pipelines/{made['id']}/cancel"),
                     theirs.http.post("/pipelines/skipStage", json={"stageId": made["stages"][0]["id"]}),
                     theirs.http.get(f"/pipelines/{made['id']}/history")):
            r = await call
            assert r.status_code == 404 and "no " in r.json()["error"]
        assert (await theirs.list())["totalCount"] == 0
        boot = (await http.post("/workers/bootstrap", headers={"X-API-Key": other_key}, json={
            "workerName": "thief", "supportedHandlers": ["ValidateInvoiceHandler"]})).json()
        r = await http.post("/jobs/pull", headers={"X-Worker-Session": boot["workerSessionToken"]}, json={"waitSeconds": 1})
        assert r.status_code == 204
        assert (await mine.get(made["id"]))["status"] in ("Running", "NotStarted")


async def test_keys_roles_and_credentials(service, billing):
    _, key = billing
    viewer = await service.key(billing[0]["name"], "viewer", "looker")
    async with httpx.AsyncClient(base_url=service.url) as http:
        assert (await http.get("/pipelines")).status_code == 401
        assert (await http.get("/pipelines", headers={"X-API-Key": "flk_nope"})).status_code == 401
        r = await http.post("/pipelines", headers={"X-API-Key": viewer}, json=body())
        assert r.status_code == 403 and "viewer" in r.json()["error"]
        assert (await http.get("/pipelines", headers={"X-API-Key": viewer})).status_code == 200
        assert (await http.get("/pipelines", headers={"Authorization": f"Bearer {key}"})).status_code == 200


async def test_bad_input_gets_a_400_naming_the_field_and_never_a_500(service, billing):
    _, key = billing
    h = {"X-API-Key": key}
    async with httpx.AsyncClient(base_url=service.url, headers=h) as http:
        async def err(path: str, payload: Any, status: int = 400, raw: bytes | None = None) -> str:
            r = await (http.post(path, content=raw, headers={"Content-Type": "application/json"}) if raw is not None
                       else http.post(path, json=payload))
            assert r.status_code == status, (path, payload, r.status_code, r.text)
            assert "Traceback" not in r.text
            return str(r.json()["error"])

        assert "JSON" in await err("/pipelines", None, raw=b'{"name": ')
        e = await err("/pipelines", body(stages=[{**STAGE, "options": {"maxRetries": "3"}}]))
        assert e.startswith("stage 'validate': options.maxRetries"), e
        assert "jitter" in await err("/pipelines", body(stages=[{**STAGE, "options": {"jitter": "yes"}}]))
        assert "name" in await err("/pipelines", {"stages": [STAGE]})
        assert "at least one stage" in await err("/pipelines", body(stages=[]))
        e = await err("/pipelines", body(stages=[STAGE, {**STAGE, "stageHandlerName": "X"}]))
        assert "'validate'" in e and "twice" in e
        e = await err("/pipelines", body(stages=[{**STAGE, "options": {"dependsOn": ["ghost"]}}]))
        assert "'validate'" in e and "ghost" in e
        e = await err("/pipelines", body(stages=[{**STAGE, "options": {"dependsOn": ["b"]}},
                                              {"stageName": "b", "stageHandlerName": "H", "options": {"dependsOn": ["validate"]}}]))
        assert "cycle" in e
        assert "comma" in await err("/pipelines", body(stages=[{**STAGE, "stageName": "a,b"}]))
        assert "input" in await err("/pipelines", body(stages=[{**STAGE, "input": {"invoiceId": 1}}]))
        assert "retryInterval" in await err("/pipelines", body(stages=[{**STAGE, "options": {"retryInterval": -1}}]))
        assert "backoff" in await err("/pipelines", body(stages=[{**STAGE, "options": {"backoff": "random"}}]))
        assert "idempotencyKey" in await err("/pipelines/idempotent", body())
        await err("/pipelines", None, 413, raw=b'{"name": "' + b"x" * (2 << 20) + b'"}')
        for path in ("/pipelines/999999", "/pipelines/abc"):
            r = await http.get(path)
            assert r.status_code == 404 and "no pipeline" in r.json()["error"]
        r = await http.get("/pipelines", params={"statuses": "Sleeping"})
        assert r.status_code == 400 and "Sleeping" in r.json()["error"]
        assert (await http.get("/pipelines")).json()["totalCount"] == 0  # nothing was stored
        assert (await http.get("/openapi.json")).json()["paths"]["/pipelines/idempotent"]["post"]


async def test_retry_policies_take_precedence_and_effective_policy_says_which(service, billing):
    _, key = billing
    calls: dict[int, int] = {}
    async with PipelinesClient(service.url, key) as client, Worker(service.url, key) as worker:
        http = client.http

        @worker.handler("Send")
        async def send(job: dict[str, Any]) -> str:
            calls[job["pipelineId"]] = calls.get(job["pipelineId"], 0) + 1
            raise StageError(job["input"] or "UPSTREAM_ERROR", "upstream is down")

        policy = {"name": "send-timeouts", "type": "retry",
                  "rules": {"maxRetries": 2, "intervalSeconds": 0.1, "backoffMultiplier": 2, "errorCodes": ["TIMEOUT"]},
                  "targeting": {"stageNames": ["send"]}, "state": "enabled"}
        r = await http.post("/policies", json=policy)
        assert r.status_code == 201, r.text
        pid = r.json()["id"]
        assert (await http.post("/policies", json=policy)).status_code == 409
        bad = await http.post("/policies", json={**policy, "name": "x", "rules": {"maxRetries": "2", "intervalSeconds": 1}})
        assert bad.status_code == 400 and "maxRetries" in bad.json()["error"]
        stage = {"stageName": "send", "stageHandlerName": "Send",
                 "options": {"maxRetries": 5, "retryInterval": 0.1}}
        # the policy matches the stage; its filter does not match UPSTREAM_ERROR: no retry, no fallback
        unmatched = await client.create({"name": "p1", "stages": [stage]})
        effective = (await http.get(f"/stages/{unmatched['stages'][0]['id']}/effective-policy")).json()
        assert effective == {"source": "policy", "policyId": pid,
                             "retry": {"maxRetries": 2, "delays": [0.1, 0.2], "retryOnErrorCodes": ["TIMEOUT"]}}
        assert (await until_status(client, unmatched["id"], "Failed"))["stages"][0]["attempt"] == 1
        # a matching code: the policy's two retries
        matched = await client.create({"name": "p2", "stages": [{**stage, "input": "TIMEOUT"}]})
        assert (await until_status(client, matched["id"], "Failed"))["stages"][0]["attempt"] == 3
        # disabled: the stage options decide again, for stages declared from now on
        assert (await http.post(f"/policies/{pid}/disable")).json()["state"] == "disabled"
        fallback = await client.create({"name": "p3", "stages": [{**stage, "options": {"maxRetries": 1, "retryInterval": 0.1}}]})
        effective = (await http.get(f"/stages/{fallback['stages'][0]['id']}/effective-policy")).json()
        assert effective == {"source": "stage", "retry": {"maxRetries": 1, "delays": [0.1], "retryOnErrorCodes": []}}
        assert (await until_status(client, fallback["id"], "Failed"))["stages"][0]["attempt"] == 2
        none = await client.create({"name": "p4", "stages": [{"stageName": "s", "stageHandlerName": "Send"}]})
        assert (await http.get(f"/stages/{none['stages'][0]['id']}/effective-policy")).json()["source"] == "none"
        await until_status(client, none["id"], "Failed")
        assert calls == {unmatched["id"]: 1, matched["id"]: 3, fallback["id"]: 2, none["id"]: 1}
        # read, replace, delete
        assert (await http.get(f"/policies/{pid}")).json()["name"] == "send-timeouts"
        replaced = await http.put(f"/policies/{pid}", json={**policy, "rules": {"maxRetries": 1, "intervalSeconds": 3}})
        assert replaced.status_code == 200 and replaced.json()["rules"]["maxRetries"] == 1
        assert [p["id"] for p in (await http.get("/policies")).json()] == [pid]
        assert (await http.delete(f"/policies/{pid}")).status_code == 204
        assert (await http.get(f"/policies/{pid}")).status_code == 404


async def test_schedules_create_ordinary_pipelines_one_per_firing(service, billing):
    _, key = billing
    async with PipelinesClient(service.url, key) as client:
        http = client.http
        r = await http.post("/schedules", json={"name": "nightly", "intervalSeconds": 1, "pipeline": body(name="scheduled")})
        assert r.status_code == 201, r.text
        schedule = r.json()
        assert schedule["intervalSeconds"] == 1 and schedule["nextFireAt"] and schedule["state"] == "enabled"
        deadline = time.monotonic() + 20
        while (await client.list(name="scheduled"))["totalCount"] < 2:
            assert time.monotonic() < deadline, "no two firings within 20 s"
            await asyncio.sleep(0.2)
        paused = (await http.post(f"/schedules/{schedule['id']}/pause")).json()
        assert paused["state"] == "paused"
        await asyncio.sleep(0.5)
        made = (await client.list(name="scheduled"))["items"]
        await asyncio.sleep(2)
        after = (await client.list(name="scheduled"))["items"]
        assert len(after) == len(made)  # paused: no more firings
        keys = [p["idempotencyKey"] for p in after]
        assert len(set(keys)) == len(keys) and all(k.startswith(f"schedule:{schedule['id']}:") for k in keys)
        assert (await http.get(f"/schedules/{schedule['id']}")).json()["firings"] == len(after)
        for bad, word in [({"name": "x", "pipeline": body()}, "exactly one trigger"),
                          ({"name": "x", "cron": "0 9 * * 1-5", "timezone": "Mars/Base", "pipeline": body()}, "timezone"),
                          ({"name": "x", "cron": "nope", "pipeline": body()}, "cron"),
                          ({"name": "x", "runAt": "2030-01-01T09:00:00Z", "pipeline": {"name": "p", "stages": []}}, "stage")]:
            r = await http.post("/schedules", json=bad)
            assert r.status_code == 400 and word in r.json()["error"], (bad, r.text)
        once = (await http.post("/schedules", json={"name": "once", "runAt": "2030-01-01T09:00:00Z", "pipeline": body()})).json()
        assert once["nextFireAt"] == "2030-01-01T09:00:00Z"
        assert [s["name"] for s in (await http.get("/schedules")).json()] == ["nightly", "once"]
        assert (await http.delete(f"/schedules/{once['id']}")).status_code == 204
        assert (await http.get(f"/schedules/{once['id']}")).status_code == 404


async def test_a_result_appends_stages_and_edits_context_and_timeout_fails_an_attempt(service, billing):
    _, key = billing
    async with PipelinesClient(service.url, key) as client, Worker(service.url, key) as worker:
        @worker.handler("Discover")
        async def discover(job: dict[str, Any]) -> Any:
            raise AssertionError("not used: the raw result below")

        @worker.handler("Slow")
        async def slow(job: dict[str, Any]) -> str:
            if job["attempt"] == 1:
                await asyncio.sleep(8)  # past the stage's timeOut of 3 s
            return f"attempt {job['attempt']}"

        @worker.handler("Tail")
        async def tail(job: dict[str, Any]) -> str:
            return "tail " + ",".join(sorted(c["key"] for c in job["contextItems"]))

        # timeOut bounds one attempt: TIMEOUT, and the retry rules decide
        timed = await client.create({"name": "timed", "pipelineKeywords": [{"key": "workflow", "value": "invoicing"}],
                                     "stages": [{"stageName": "slow", "stageHandlerName": "Slow", "options": {
                                         "timeOut": 3, "maxRetries": 1, "retryInterval": 0.1,
                                         "retryOnErrorCodes": ["TIMEOUT"]}}]})
        done = await until_status(client, timed["id"], "Completed")
        assert (done["stages"][0]["output"], done["stages"][0]["attempt"]) == ("attempt 2", 2)
        history = await client.history(timed["id"])
        # the history speaks the pipeline's words: the attempt that ran past its timeOut failed with TIMEOUT
        assert any(h["kind"] == "stage.failed" and (h["error"] or {}).get("errorCode") == "TIMEOUT"
                   and h["attempt"] == 1 for h in history)
        # a timeout is the engine's, not a worker's answer: it names no worker; the answer that completed does
        assert all("leasedBy" not in h["value"] for h in history if h["kind"] == "stage.failed")
        assert [bool(h["value"].get("leasedBy")) for h in history if h["kind"] == "stage.completed"] == [True]
        assert any(h["kind"] == "stage.retry_scheduled" for h in history)
        assert any(h["actor"].endswith("default") for h in history if h["kind"] == "execution.started")

        # a result with appendStages and context edits, sent through the raw protocol
        made = await client.create({"name": "grows", "stages": [{"stageName": "discover", "stageHandlerName": "Manual"}],
                                    "pipelineContextItems": [{"key": "old", "value": "x"}, {"key": "keep", "value": "y"}]})
        async with httpx.AsyncClient(base_url=service.url) as http:
            boot = (await http.post("/workers/bootstrap", headers={"X-API-Key": key}, json={
                "workerName": "manual", "supportedHandlers": ["Manual"]})).json()
            s = {"X-Worker-Session": boot["workerSessionToken"]}
            job = (await http.post("/jobs/pull", headers=s, json={"waitSeconds": 5})).json()
            assert {c["key"] for c in job["contextItems"]} == {"old", "keep"}
            lease = {"executionId": job["executionId"], "workerId": boot["workerId"]}
            assert (await http.post(f"/stages/{job['stageId']}/lease/acquire", headers=s, json=lease)).json()["acquired"]
            r = await http.post(f"/stages/{job['stageId']}/result", headers=s, json={
                "executionId": job["executionId"], "attempt": job["attempt"], "isSuccess": True, "output": "found 1",
                "contextItems": [{"key": "old", "isDeleted": True}, {"key": "new", "value": "z"}],
                "appendStages": [{"stageName": "tail", "stageHandlerName": "Tail"}],
                "logs": [{"message": "found one more stage", "logLevel": "Information", "created": "2026-12-01T10:00:00Z"}]})
            assert r.status_code == 202, r.text
        grown = await until_status(client, made["id"], "Completed")
        assert [(s["name"], s["status"], s["dependsOn"]) for s in grown["stages"]] == [
            ("discover", "Completed", []), ("tail", "Completed", ["discover"])]
        assert grown["stages"][1]["output"] == "tail keep,new"
        assert {c["key"] for c in grown["pipelineContextItems"]} == {"keep", "new"}
        found = await client.list(keywords={"workflow": "invoicing"})
        assert [p["id"] for p in found["items"]] == [timed["id"]]
        assert (await client.list(search="grows"))["items"][0]["id"] == made["id"]
        page = await client.list(page_size=1, page_number=2)
        assert page["totalCount"] == 2 and [p["id"] for p in page["items"]] == [timed["id"]]  # newest first


async def test_stages_appended_over_http_run_after_the_last_declared(service, billing):
    _, key = billing
    order: list[str] = []
    gate = asyncio.Event()
    async with PipelinesClient(service.url, key) as client, Worker(service.url, key) as worker:
        @worker.handler("Step")
        async def step(job: dict[str, Any]) -> str:
            if job["stageName"] == "first":
                await gate.wait()
            order.append(job["stageName"])
            return job["stageName"]

        made = await client.create({"name": "extended", "stages": [{"stageName": "first", "stageHandlerName": "Step"}]})
        added = await client.append_stages(made["id"], [{"stageName": "second", "stageHandlerName": "Step"},
                                                        {"stageName": "third", "stageHandlerName": "Step"}])
        assert [(s["name"], s["dependsOn"], s["status"]) for s in added] == [
            ("second", ["first"], "NotStarted"), ("third", ["second"], "NotStarted")]
        r = await client.http.post(f"/pipelines/{made['id']}/stages", json={"stages": [{"stageName": "first",
                                                                                         "stageHandlerName": "Step"}]})
        assert r.status_code == 400 and "twice" in r.json()["error"]
        gate.set()
        done = await until_status(client, made["id"], "Completed")
        assert order == ["first", "second", "third"] and [s["status"] for s in done["stages"]] == ["Completed"] * 3
