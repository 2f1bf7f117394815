"""Credentials over HTTP against a real ``flowli serve``: a worker session lives and dies with the
key it was bootstrapped with and acts with that key's role as it is now; an assistant's key
(``flowli keys create APP --assistant``) reads, and its writes are refused on every route without
a person's approval (``/catalog``, ``/pipelines``, schedules, workers)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from ..served import Names, Service, clerk, flowli

pytestmark = pytest.mark.e2e

STAGE = {"stageName": "validate", "stageHandlerName": "ValidateInvoiceHandler"}


async def bootstrap(http: httpx.AsyncClient, key: str, handler: str) -> dict[str, str]:
    r = await http.post("/workers/bootstrap", headers={"X-API-Key": key},
                        json={"workerName": "w", "supportedHandlers": [handler]})
    assert r.status_code == 200, r.text
    return {"X-Worker-Session": r.json()["workerSessionToken"]}


async def test_a_worker_session_dies_with_its_key(service: Service, names: Names) -> None:
    billing = names("billing")
    _, admin, (worker_key,) = await service.application(billing, ("operator", "worker"))
    secret = names("tok-5e1f")
    async with httpx.AsyncClient(base_url=service.url, timeout=30) as http:
        session = await bootstrap(http, worker_key, "ValidateInvoiceHandler")
        assert (await http.post("/workers/heartbeat", headers=session, json={})).status_code == 200
        made = await http.post("/pipelines", headers={"X-API-Key": admin}, json={"name": "p", "stages": [STAGE],
                               "pipelineContextItems": [{"key": "token", "value": secret, "isSensitive": True}]})
        assert made.status_code == 200, made.text
        async with clerk(service.db) as apps:
            [key] = [k for k in await apps.keys(billing) if k["name"] == "worker"]
            await apps.disable_key(key["id"])
        for route, payload in (("/workers/heartbeat", {}), ("/jobs/pull", {"waitSeconds": 1})):
            r = await http.post(route, headers=session, json=payload)
            assert r.status_code == 401, (route, r.status_code, r.text)
            assert "disabled" in r.json()["error"] and secret not in r.text
        # the pipeline waits for a worker of a live key, which gets the job and its real value
        other = await bootstrap(http, admin, "ValidateInvoiceHandler")
        job = await http.post("/jobs/pull", headers=other, json={"waitSeconds": 10})
        assert job.status_code == 200 and {"key": "token", "value": secret} in [
            {k: c[k] for k in ("key", "value")} for c in job.json()["contextItems"]]


async def test_a_worker_session_acts_with_its_keys_role_as_it_is_now(service: Service, names: Names) -> None:
    billing = names("billing")
    _, _, (worker_key,) = await service.application(billing, ("operator", "worker"))
    async with httpx.AsyncClient(base_url=service.url, timeout=30) as http:
        session = await bootstrap(http, worker_key, "NothingHere")
        assert (await http.post("/jobs/pull", headers=session, json={"waitSeconds": 0})).status_code == 204
        # no command changes a key's role: the key's stored record is changed as one would
        async with clerk(service.db) as apps:
            [key] = [k for k in await apps.keys(billing) if k["name"] == "worker"]
            item = await apps.engine.items.get("apikey", key["id"])
            assert item is not None
            await apps.engine.items.update("apikey", item.id, {**item.body, "role": "viewer"}, apps.now)
        r = await http.post("/jobs/pull", headers=session, json={"waitSeconds": 0})
        assert r.status_code == 403 and "viewer" in r.json()["error"], r.text
        assert (await http.post("/workers/heartbeat", headers=session, json={})).status_code == 403
        boot = await http.post("/workers/bootstrap", headers={"X-API-Key": worker_key},
                               json={"workerName": "w", "supportedHandlers": ["NothingHere"]})
        assert boot.status_code == 403


def assistant_key(db: str, application: str, role: str = "operator") -> dict[str, Any]:
    """``flowli keys create APP --assistant --json``, as a process."""
    made = flowli(db, "keys", "create", application, "--name", "claude", "--role", role, "--assistant", "--json")
    assert made.returncode == 0, made.stderr
    key = json.loads(made.stdout)
    assert key["assistant"] is True and key["role"] == role
    return dict(key)


async def test_an_assistants_key_reads_and_no_route_lets_it_write(service: Service, names: Names) -> None:
    billing = names("billing")
    _, admin, _ = await service.application(billing)
    key = assistant_key(service.db, billing, "admin")
    listed = flowli(service.db, "keys", "ls", billing)
    assert "admin (assistant)" in listed.stdout, listed.stdout
    bot = {"X-API-Key": key["apiKey"]}
    async with httpx.AsyncClient(base_url=service.url, timeout=30) as http:
        # reads, a start of a data type (a read) included
        assert (await http.get("/catalog/types", headers=bot)).status_code == 200
        assert (await http.get("/pipelines", headers=bot)).status_code == 200
        data = await http.post("/catalog/runs", headers=bot, json={"workflow_type": "aws.s3.list_buckets"})
        assert data.status_code == 201, data.text
        # a run and a pipeline of a person, to act on
        run = await http.post("/catalog/runs", headers={"X-API-Key": admin},
                              json={"workflow_type": "ops.flaky", "inputs": {"name": names("down")}})
        assert run.status_code == 201, run.text
        wid = run.json()["workflow_id"]
        pipeline = await http.post("/pipelines", headers={"X-API-Key": admin}, json={"name": "p", "stages": [STAGE]})
        pid = pipeline.json()["id"]
        writes = [
            ("/catalog/runs", {"workflow_type": "aws.s3.create_bucket", "inputs": {"bucket": names("b")}}),
            (f"/catalog/runs/{wid}/retry", {}),
            (f"/catalog/runs/{wid}/terminate", {"reason": "stale", "min_idle_seconds": 0}),
            ("/catalog/compositions", {"name": "c", "version": "1", "layers": []}),
            ("/pipelines", {"name": "p2", "stages": [STAGE]}),
            (f"/pipelines/{pid}/cancel", {}),
            (f"/pipelines/{pid}/pause", {}),
            ("/schedules", {"name": "s", "intervalSeconds": 60, "pipeline": {"name": "p3", "stages": [STAGE]}}),
            ("/workers/bootstrap", {"workerName": "w", "supportedHandlers": ["ValidateInvoiceHandler"]}),
        ]
        for route, payload in writes:
            r = await http.post(route, headers=bot, json=payload)
            assert r.status_code == 403, (route, r.status_code, r.text)
            assert "approv" in r.json()["error"] and "assistant" in r.json()["error"], (route, r.text)
        view = (await http.get(f"/pipelines/{pid}", headers={"X-API-Key": admin})).json()
        assert view["status"] in ("NotStarted", "Running")  # neither cancelled nor paused
        assert (await http.get("/schedules", headers=bot)).json() == []


async def test_each_route_takes_the_credential_the_document_says_and_no_other(service: Service, names: Names) -> None:
    """The OpenAPI document's security of each route is read from the route's own credential:
    a route documented with a worker's session refuses an application's key (401), one documented
    with a key refuses a session, and only the routes documented with neither answer without one."""
    _, admin, (worker_key,) = await service.application(names("docs"), ("operator", "w"))
    async with httpx.AsyncClient(base_url=service.url, timeout=30) as http:
        session = await bootstrap(http, worker_key, "H")
        doc = (await http.get("/openapi.json")).json()
        seen = {"apiKey": 0, "workerSession": 0, None: 0}
        for path, operations in doc["paths"].items():
            concrete = path.replace("{", "").replace("}", "")  # any id: the credential is checked first
            for method, op in operations.items():
                scheme = next(iter(op["security"][0]), None) if op.get("security") else None
                seen[scheme] += 1
                wrong = {"apiKey": session, "workerSession": {"X-API-Key": admin}, None: {}}[scheme]
                body = {"content": b"{}", "headers": {**wrong, "Content-Type": "application/json"}} \
                    if method != "get" else {"headers": wrong}
                r = await http.request(method.upper(), concrete, **body)
                if scheme is None:
                    assert r.status_code != 401, (method, path)
                else:
                    assert r.status_code == 401, (method, path, scheme, r.status_code, r.text)
        assert seen["workerSession"] == 9 and seen["apiKey"] > 30 and seen[None] == 1, seen
