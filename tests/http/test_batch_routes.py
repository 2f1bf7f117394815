"""The batch routes against a real ``flowli serve`` (both backends): the bootstrap answer offers
them; ``POST /pipelines/idempotent/batch`` answers each pipeline as ``POST /pipelines/idempotent``
would, in the request's order (created, repeated, a key of another intent, a bad body); ``POST
/jobs/pull-batch`` hands several jobs at once, each leased already; ``POST /stages/results``
answers several results at once, each fenced on its own (accepted, stale, bad, unknown stage),
and the pipelines go on as after the one-item routes. A request that is bad as a whole (no
credential, another role, ``max`` out of range, too many items, not a list) is refused whole."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx
import pytest

from flowli.client import HttpWorker, PipelinesClient, StageError

from ..served import Service
from .test_pipelines import until_status

pytestmark = pytest.mark.e2e


def pipeline(handler: str, key: str, name: str = "batch") -> dict[str, Any]:
    return {"name": name, "idempotencyKey": key,
            "stages": [{"stageName": "only", "stageHandlerName": handler, "input": key}]}


async def bootstrap(http: httpx.AsyncClient, key: str, handler: str) -> tuple[dict[str, Any], dict[str, str]]:
    boot = (await http.post("/workers/bootstrap", headers={"X-API-Key": key},
                            json={"workerName": "batcher", "supportedHandlers": [handler]})).json()
    return boot, {"X-Worker-Session": boot["workerSessionToken"]}


async def test_creates_in_one_request_are_each_answered_as_the_one_item_route(service: Service, billing: Any) -> None:
    _, key = billing
    api = {"X-API-Key": key}
    handler = f"H{uuid.uuid4().hex[:6]}"
    async with httpx.AsyncClient(base_url=service.url, timeout=30) as http:
        first = await http.post("/pipelines/idempotent", headers=api, json=pipeline(handler, "k-1"))
        assert first.status_code == 201
        r = await http.post("/pipelines/idempotent/batch", headers=api, json={"pipelines": [
            pipeline(handler, "k-2"),                                # new
            pipeline(handler, "k-1"),                                # the same intent again
            pipeline(handler, "k-1", name="another"),                # the key of another intent
            {"name": "bad", "idempotencyKey": "k-3", "stages": [{"stageName": "s"}]},  # no handler
            "not an object",
            pipeline(handler, "k-4"),                                # new, after the bad ones
        ]})
        assert r.status_code == 200, r.text
        got = r.json()["results"]
        assert [g["status"] for g in got] == [201, 200, 409, 400, 400, 201]
        assert got[1]["pipeline"]["id"] == first.json()["pipeline"]["id"]
        assert got[2]["pipelineId"] == first.json()["pipeline"]["id"] and "k-1" in got[2]["error"]
        assert "stageHandlerName" in got[3]["error"]
        assert got[0]["pipeline"]["name"] == "batch" and got[0]["pipeline"]["status"] == "Running"
        assert got[0]["pipeline"]["id"] != got[5]["pipeline"]["id"]
        # each is what the one-item route would have answered, and stored as it would have
        again = await http.post("/pipelines/idempotent", headers=api, json=pipeline(handler, "k-2"))
        assert again.status_code == 200 and again.json()["pipeline"]["id"] == got[0]["pipeline"]["id"]
        # refused whole: no credential, a viewer's key, too many, not a list
        assert (await http.post("/pipelines/idempotent/batch", json={"pipelines": []})).status_code == 401
        viewer = await service.key(billing[0]["name"], "viewer")
        refused = await http.post("/pipelines/idempotent/batch", headers={"X-API-Key": viewer},
                                  json={"pipelines": [pipeline(handler, "k-5")]})
        assert refused.status_code == 403
        many = await http.post("/pipelines/idempotent/batch", headers=api,
                               json={"pipelines": [pipeline(handler, f"m-{i}") for i in range(101)]})
        assert many.status_code == 400 and "pipelines" in many.json()["error"]
        assert (await http.post("/pipelines/idempotent/batch", headers=api, json={"pipelines": {}})).status_code == 400
        listed = (await http.get("/pipelines", headers=api, params={"pageSize": 50})).json()
        assert listed["totalCount"] == 3  # k-1, k-2, k-4: nothing of the refused ones


async def test_jobs_pulled_and_answered_in_batches(service: Service, billing: Any) -> None:
    _, key = billing
    api = {"X-API-Key": key}
    handler = f"H{uuid.uuid4().hex[:6]}"
    async with httpx.AsyncClient(base_url=service.url, timeout=30) as http, PipelinesClient(service.url, key) as client:
        boot, s = await bootstrap(http, key, handler)
        assert boot["batch"] == {"maxJobs": 100, "maxResults": 100, "maxCreates": 100}
        made = (await http.post("/pipelines/idempotent/batch", headers=api, json={"pipelines": [
            pipeline(handler, f"j-{i}") for i in range(3)]})).json()["results"]
        ids = {m["pipeline"]["id"] for m in made}
        jobs: list[dict[str, Any]] = []
        while len(jobs) < 3:
            r = await http.post("/jobs/pull-batch", headers=s, json={"max": 5, "waitSeconds": 5})
            assert r.status_code == 200, r.text
            jobs += r.json()["jobs"]
        assert {j["pipelineId"] for j in jobs} == ids and all(j["leaseExpiresAt"] for j in jobs)
        # leased already: an acquire finds the lease held by this worker
        lease = {"executionId": jobs[0]["executionId"], "workerId": boot["workerId"]}
        held = (await http.post(f"/stages/{jobs[0]['stageId']}/lease/acquire", headers=s, json=lease)).json()
        assert held["acquired"] is True and held["leaseExpiresAt"] == jobs[0]["leaseExpiresAt"]
        assert (await http.post("/jobs/pull-batch", headers=s, json={"max": 5, "waitSeconds": 0})).status_code == 204

        def answer(job: dict[str, Any], **over: Any) -> dict[str, Any]:
            return {"stageId": job["stageId"], "token": job["token"], "executionId": job["executionId"],
                    "attempt": job["attempt"], "isSuccess": True, "output": f"out-{job['pipelineId']}", **over}

        r = await http.post("/stages/results", headers=s, json={"results": [
            answer(jobs[0]),
            answer(jobs[1], attempt=7),                              # stale: not the current attempt
            answer(jobs[2], attempt="one"),                          # bad: attempt is not a number
            {**answer(jobs[2]), "stageId": 999_999_999},             # no such stage
            7,                                                       # not an object
            answer(jobs[2]),
        ]})
        assert r.status_code == 200, r.text
        got = r.json()["results"]
        assert [g["status"] for g in got] == [202, 409, 400, 404, 400, 202]
        assert [g["accepted"] for g in got] == [True, False, False, False, False, True]
        assert [g["stageId"] for g in got[:4]] == [jobs[0]["stageId"], jobs[1]["stageId"], jobs[2]["stageId"], 999_999_999]
        assert "attempt 7" in got[1]["reason"] and "attempt" in got[2]["reason"]
        for job in (jobs[0], jobs[2]):
            done = await until_status(client, job["pipelineId"], "Completed")
            assert done["stages"][0]["output"] == f"out-{job['pipelineId']}"
        history = await client.history(jobs[1]["pipelineId"])
        assert any(h["kind"] == "result.refused" and h["attempt"] == 7 for h in history)  # recorded, as route 5 does
        # a repeat of an accepted result is accepted again; the stale one's stage still takes its own
        again = await http.post("/stages/results", headers=s, json={"results": [answer(jobs[0]), answer(jobs[1])]})
        assert [g["status"] for g in again.json()["results"]] == [202, 202]
        await until_status(client, jobs[1]["pipelineId"], "Completed")
        # refused whole: no session, max out of range, too many results, not a list
        assert (await http.post("/jobs/pull-batch", json={"max": 1})).status_code == 401
        for bad in ({"max": 0}, {"max": 101}, {"max": "two"}, {}, {"max": 1, "waitSeconds": 31}):
            r = await http.post("/jobs/pull-batch", headers=s, json=bad)
            assert r.status_code == 400, (bad, r.text)
        assert (await http.post("/stages/results", headers=s, json={"results": [{}] * 101})).status_code == 400
        assert (await http.post("/stages/results", headers=s, json={"results": "x"})).status_code == 400


class Recording(httpx.AsyncBaseTransport):
    """A real HTTP transport that notes each request's path; with ``hide_offer``, the bootstrap
    answer loses its ``batch`` (as a service of an earlier release answers)."""

    def __init__(self, hide_offer: bool):
        self.inner = httpx.AsyncHTTPTransport()
        self.paths: list[str] = []
        self.hide_offer = hide_offer

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        response = await self.inner.handle_async_request(request)
        if self.hide_offer and request.url.path == "/workers/bootstrap" and response.status_code == 200:
            body = json.loads(await response.aread())
            body.pop("batch", None)
            return httpx.Response(200, json=body)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.mark.parametrize("offered", [True, False], ids=["batch", "reference"])
async def test_an_http_worker_uses_the_batch_routes_when_offered_and_the_reference_routes_otherwise(
        service: Service, billing: Any, offered: bool) -> None:
    _, key = billing
    handler = f"H{uuid.uuid4().hex[:6]}"
    transport = Recording(hide_offer=not offered)
    worker = HttpWorker(service.url, key, "both-ways", wait_seconds=1, transport=transport)

    @worker.handler(handler)
    async def work(job: dict[str, Any]) -> str:
        if job["input"] == "k-fail":
            raise StageError("BUSINESS_REJECTED", "no")
        return f"done {job['input']}"

    async with PipelinesClient(service.url, key) as client:
        running = asyncio.create_task(worker.run(concurrency=4))
        try:
            made = [(await client.create_idempotent(pipeline(handler, f"k-{i}")))["pipeline"] for i in range(6)]
            failing = (await client.create_idempotent(pipeline(handler, "k-fail")))["pipeline"]
            for p in made:
                done = await until_status(client, p["id"], "Completed")
                assert done["stages"][0]["output"] == f"done k-{made.index(p)}"
            failed = await until_status(client, failing["id"], "Failed")
            assert failed["stages"][0]["errorCode"] == "BUSINESS_REJECTED"
        finally:
            worker.stop()
            await asyncio.wait_for(running, 30)
    paths = set(transport.paths)
    batch = {"/jobs/pull-batch", "/stages/results"}
    if offered:
        assert batch <= paths and "/jobs/pull" not in paths and "/jobs/ack" not in paths
        assert not any(p.endswith("/lease/acquire") or p.endswith("/result") for p in paths), paths
    else:
        assert not batch & paths and "/jobs/pull" in paths and "/jobs/ack" in paths
        assert any(p.endswith("/lease/acquire") for p in paths) and any(p.endswith("/result") for p in paths)
