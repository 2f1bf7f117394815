"""Redaction follows the key: a schedule's stored pipeline shows its sensitive context values as a
pipeline does; a result that updates a sensitive key without repeating ``isSensitive`` keeps it
sensitive; a deletion marker carries no value; every history (the pipeline's, the catalog's, the
MCP server's) redacts. Against the shared ``flowli serve``, with a raw worker over HTTP."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest

from ..assistants.test_mcp import call, over_http
from ..served import Names, Service, log_checked, rows

pytestmark = pytest.mark.e2e

HANDLER = "ValidateInvoiceHandler"


def stage(name: str, handler: str = HANDLER) -> dict[str, Any]:
    return {"stageName": name, "stageHandlerName": handler, "input": "{}"}


class RawWorker:
    """A worker that speaks the protocol itself, so that a test decides each result it sends."""

    def __init__(self, http: httpx.AsyncClient, key: str, handlers: list[str], seen: list[str] | None = None):
        self.http, self.key, self.handlers = http, key, handlers
        self.headers: dict[str, str] = {}
        self.seen = seen
        """Where the text of each answer goes, but the jobs' (``POST /jobs/pull``), when given."""

    def _saw(self, r: httpx.Response) -> httpx.Response:
        if self.seen is not None:
            self.seen.append(r.text)
        return r

    async def start(self) -> RawWorker:
        r = self._saw(await self.http.post("/workers/bootstrap", headers={"X-API-Key": self.key},
                                           json={"workerName": "raw", "supportedHandlers": self.handlers}))
        assert r.status_code == 200, r.text
        self.headers = {"X-Worker-Session": r.json()["workerSessionToken"]}
        self.worker_id = r.json()["workerId"]
        return self

    async def job(self, timeout: float = 30) -> dict[str, Any]:
        """The next job (a long poll until one comes), its lease acquired."""
        deadline = time.monotonic() + timeout
        while True:
            r = await self.http.post("/jobs/pull", headers=self.headers, json={"waitSeconds": 5})
            if r.status_code == 200:
                job: dict[str, Any] = r.json()
                acquired = self._saw(await self.http.post(
                    f"/stages/{job['stageId']}/lease/acquire", headers=self.headers,
                    json={"executionId": job["executionId"], "workerId": self.worker_id}))
                assert acquired.json()["acquired"] is True, acquired.text
                return job
            assert r.status_code == 204, r.text
            assert time.monotonic() < deadline, "no job came"

    async def result(self, job: dict[str, Any], **fields: Any) -> None:
        """Send the job's result (success unless ``fields`` say otherwise) and acknowledge it."""
        body = {"executionId": job["executionId"], "attempt": job["attempt"], "isSuccess": True, "output": "ok",
                **fields}
        r = self._saw(await self.http.post(f"/stages/{job['stageId']}/result", headers=self.headers, json=body))
        assert r.status_code == 202, r.text
        acked = self._saw(await self.http.post("/jobs/ack", headers=self.headers, json={"token": job["token"]}))
        assert acked.status_code == 200, acked.text


def context_of(job: dict[str, Any]) -> dict[str, Any]:
    return {c["key"]: c["value"] for c in job["contextItems"]}


async def eid_of(service: Service, pid: int) -> str:
    """The eid of a pipeline's execution (the catalog and the MCP tools take it)."""
    [(eid,)] = await rows(service.db, "SELECT key FROM items WHERE kind = 'pipeline' AND id = ?", pid)
    return str(eid)


async def until_stage(http: httpx.AsyncClient, pid: int, name: str, status: str, timeout: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        view: dict[str, Any] = (await http.get(f"/pipelines/{pid}")).json()
        if next(s for s in view["stages"] if s["name"] == name)["status"] == status:
            return view
        assert time.monotonic() < deadline, f"stage {name} is not {status}: {view}"
        await asyncio.sleep(0.05)


async def journal_text(service: Service) -> str:
    return "\n".join(str(r) for r in await rows(service.db, "SELECT * FROM journal"))


async def test_every_view_of_a_schedule_shows_its_sensitive_context_values_as_a_pipeline_does(
        service: Service, billing: tuple[dict[str, Any], str], names: Names) -> None:
    application, key = billing
    viewer = await service.key(application["name"], "viewer", "looker")
    secret = names("schedule-secret")
    declared = {"name": "nightly", "intervalSeconds": 86400, "pipeline": {
        "name": "invoice", "stages": [stage("validate")],
        "pipelineContextItems": [{"key": "accessToken", "value": secret, "isSensitive": True},
                                 {"key": "region", "value": "eu"}]}}
    async with httpx.AsyncClient(base_url=service.url, headers={"X-API-Key": key}) as admin, \
            httpx.AsyncClient(base_url=service.url, headers={"X-API-Key": viewer}) as looker:
        r = await admin.post("/schedules", json=declared)
        assert r.status_code == 201, r.text
        made = r.json()
        sid = made["id"]
        seen = [made, (await looker.get("/schedules")).json(), (await looker.get(f"/schedules/{sid}")).json(),
                (await admin.post(f"/schedules/{sid}/pause")).json(), (await admin.post(f"/schedules/{sid}/resume")).json()]
    for shown in seen:
        assert secret not in json.dumps(shown), shown
    for shown in (made, seen[2]):
        assert shown["pipeline"]["pipelineContextItems"] == [
            {"key": "accessToken", "value": "***", "isSensitive": True}, {"key": "region", "value": "eu"}]
    assert [s["pipeline"]["pipelineContextItems"][0]["value"] for s in seen[1] if s["id"] == sid] == ["***"]


async def test_a_result_that_updates_a_sensitive_key_without_the_flag_keeps_it_sensitive(
        service: Service, billing: tuple[dict[str, Any], str], names: Names) -> None:
    _, key = billing
    first, second = names("first-secret"), names("second-secret")
    with log_checked(service):
        async with httpx.AsyncClient(base_url=service.url, headers={"X-API-Key": key}, timeout=30) as http:
            made = (await http.post("/pipelines", json={
                "name": "invoice", "stages": [stage("load"), stage("send")],
                "pipelineContextItems": [{"key": "accessToken", "value": first, "isSensitive": True}]})).json()
            worker = await RawWorker(http, key, [HANDLER]).start()
            job = await worker.job()
            assert context_of(job)["accessToken"] == first
            # the update does not repeat isSensitive: the key stays sensitive all the same
            await worker.result(job, contextItems=[{"key": "accessToken", "value": second}])
            view = await until_stage(http, made["id"], "load", "Completed")
            assert view["pipelineContextItems"] == [
                {"key": "accessToken", "value": "***", "valueType": "string", "isSensitive": True}]
            job = await worker.job()  # the next stage's worker gets the new value
            assert job["stageName"] == "send" and context_of(job)["accessToken"] == second
            # the result first: the reads below take time, and the job's lease is short
            await worker.result(job)
            done = await until_stage(http, made["id"], "send", "Completed")
            eid = await eid_of(service, made["id"])
            public = [view, (await http.get("/pipelines")).json(), (await http.get(f"/pipelines/{made['id']}/history")).json(),
                      (await http.get(f"/catalog/runs/{eid}")).json(),
                      (await http.get(f"/catalog/runs/{eid}/history", params={"include_state_data": "true"})).json(),
                      done]
    for shown in public:
        assert second not in json.dumps(shown)
    assert second not in await journal_text(service)


async def test_a_deletion_marker_carries_no_value_and_every_history_redacts(
        service: Service, billing: tuple[dict[str, Any], str], names: Names) -> None:
    _, key = billing
    secret = names("deleted-secret")
    with log_checked(service):
        async with httpx.AsyncClient(base_url=service.url, headers={"X-API-Key": key}, timeout=30) as http:
            made = (await http.post("/pipelines", json={
                "name": "invoice", "stages": [stage("load"), stage("send")],
                "pipelineContextItems": [{"key": "accessToken", "value": secret, "isSensitive": True},
                                         {"key": "region", "value": "eu"}]})).json()
            worker = await RawWorker(http, key, [HANDLER]).start()
            job = await worker.job()
            await worker.result(job, contextItems=[
                {"key": "accessToken", "value": secret, "isSensitive": True, "isDeleted": True},
                {"key": "region", "value": "eu", "isDeleted": True}])
            job = await worker.job()
            assert job["stageName"] == "send" and job["contextItems"] == []  # both deleted
            await worker.result(job)
            await until_stage(http, made["id"], "send", "Completed")
            eid = await eid_of(service, made["id"])
            history = (await http.get(f"/catalog/runs/{eid}/history", params={"include_state_data": "true"})).json()
            # the stages' outputs are in it (the pipeline's end: its decider journals no frames)
            assert any(h["event"] == "execution.completed" and "output" in h for h in history["history"])
            public = [history, (await http.get(f"/pipelines/{made['id']}/history")).json(),
                      (await http.get(f"/pipelines/{made['id']}")).json()]
        async with over_http(service.url, key) as client:
            public.append(await call(client, "get_workflow_history", workflow_id=eid, include_state_data=True))
            public.append(await call(client, "get_workflow_status", workflow_id=eid))
    for shown in public:
        assert secret not in json.dumps(shown)
    assert secret not in await journal_text(service)  # a deletion marker carries no value
    deleted = [r for r in await rows(service.db, "SELECT value FROM journal WHERE eid = ?", eid)
               if r[0] is not None and "isDeleted" in str(r[0])]
    assert deleted and all('"eu"' not in str(r[0]) for r in deleted)
