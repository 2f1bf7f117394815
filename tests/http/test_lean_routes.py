"""The lean routes (``flowli.http._lean``) against the FastAPI routes they stand in front of, in
this process over httpx's ASGI transport, both behind the same Host check and body limit: every
lean route is a route of the OpenAPI document with the same method, the dispatcher takes no other
route, and each answers a bad request (no credential, a body that is not JSON, too deep, not
finite, a field of the wrong type, an unknown id, a foreign Host or Origin, a body over the limit)
with the same status, body and content headers as the FastAPI route; the reads of a pipeline and of
a page of them answer as FastAPI's, a query it would refuse left to it. Both backends."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from flowli import Registry
from flowli.http import create_app
from flowli.http._app import guarded
from flowli.http._lean import LEAN_ROUTES
from flowli.pipelines import Applications, install

from ..engine.conftest import db_url as db_url  # noqa: F401 - the fixtures, re-exported
from ..engine.conftest import open_engine as open_engine  # noqa: F401

pytestmark = pytest.mark.integration

BIG = "99999999999999999999"


class Pair:
    """The same service twice: ``lean`` is the app ``flowli serve`` runs (the lean routes in front
    of FastAPI), ``plain`` is its FastAPI app alone, behind the same checks and limit."""

    def __init__(self, front: Any, lean: httpx.AsyncClient, plain: httpx.AsyncClient, key: str, engine: Any):
        self.front, self.lean, self.plain, self.key, self.engine = front, lean, plain, key, engine

    async def both(self, path: str, **kw: Any) -> tuple[httpx.Response, httpx.Response]:
        return await self.lean.post(path, **kw), await self.plain.post(path, **kw)


@pytest.fixture
async def pair(open_engine: Any) -> AsyncIterator[Pair]:  # noqa: F811
    registry = Registry()
    install(registry)
    async with open_engine(registry, worker=False) as engine, contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(engine.worker(concurrency=16, queues=("pipelines", "default")))  # as serve
        _, key = await Applications(engine).create("billing")
        front = create_app(engine, lease_ttl=30)
        plain_app = guarded(front.api, front.hosts)
        clients = []
        for app in (front, plain_app):
            transport = httpx.ASGITransport(app=app)
            clients.append(await stack.enter_async_context(
                httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=30)))
        yield Pair(front, clients[0], clients[1], key, engine)


def same(lean: httpx.Response, plain: httpx.Response) -> None:
    what = (lean.request.method, str(lean.request.url), lean.status_code, lean.text, plain.status_code, plain.text)
    assert lean.status_code == plain.status_code, what
    assert lean.content == plain.content, what
    for header in ("content-type", "content-length"):
        assert lean.headers.get(header) == plain.headers.get(header), (header, what)
    assert lean.status_code != 500, what


def concrete(template: str) -> str:
    return re.sub(r"\{[^}]+\}", "7", template)


async def test_every_lean_route_is_a_route_of_the_openapi_document_and_no_other_is_lean(pair):
    doc = (await pair.lean.get("/openapi.json")).json()
    for method, path in LEAN_ROUTES:
        assert method.lower() in doc["paths"].get(path, {}), (method, path, sorted(doc["paths"]))
        if method == "GET":
            continue  # a read: no body
        body = doc["paths"][path][method.lower()]["requestBody"]["content"]["application/json"]["schema"]
        assert body["$ref"].split("/")[-1] in doc["components"]["schemas"], (path, body)
    lean = pair.front.routes.lean
    routed = set()
    for path, methods in doc["paths"].items():
        for method in methods:
            scope = {"type": "http", "method": method.upper(), "path": concrete(path), "root_path": ""}
            if lean.route(scope) is not None:
                routed.add((method.upper(), path))
    assert routed == set(LEAN_ROUTES)
    # a path the FastAPI app answers otherwise is not taken: a trailing slash, another method, no id
    for method, path in [("GET", "/jobs/pull"), ("POST", "/jobs/pull/"), ("POST", "/stages//result"),
                         ("POST", "/stages/7/lease"), ("PUT", "/pipelines"), ("POST", "/pipelines/7"),
                         ("GET", "/pipelines/"), ("GET", "/pipelines/7/history"), ("HEAD", "/pipelines")]:
        assert lean.route({"type": "http", "method": method, "path": path, "root_path": ""}) is None, (method, path)
    # a list's query that FastAPI would refuse or pick among is FastAPI's to read
    for query in (b"pageNumber=x", b"pageSize=", b"pageSize=-1", b"pageNumber=1&pageNumber=2", b"search=a&search=b",
                  b"pageSize=1e3", b"name=a&name=a"):
        scope = {"type": "http", "method": "GET", "path": "/pipelines", "root_path": "", "query_string": query}
        assert lean.route(scope) is None, query


async def test_a_lean_route_refuses_a_bad_request_as_its_fastapi_route(pair):
    boot = (await pair.lean.post("/workers/bootstrap", headers={"X-API-Key": pair.key},
                                 json={"workerName": "w", "supportedHandlers": ["H"]})).json()
    session = {"X-Worker-Session": boot["workerSessionToken"]}
    api = {"X-API-Key": pair.key}
    json_kind = {"Content-Type": "application/json"}
    bodies: list[bytes] = [b"", b"   ", b'{"x": ', b"[" * 50_000, b"[1]", b'"text"', b"null", b"{\xff}",
                           b'{"waitSeconds": NaN}', b'{"waitSeconds": 1e400}', b'{"attempt": Infinity}',
                           b"[" * 65 + b"]" * 65, b"{}"]
    typed = {
        "/pipelines": [{"name": 1, "stages": []}, {"name": "n", "stages": [{"stageName": "s"}]},
                       {"name": "n", "stages": [{"stageName": "v", "stageHandlerName": "H", "options": {"x": 1}}]},
                       {"name": "n", "stages": [{"stageName": "v", "stageHandlerName": "H", "input": 5}]}],
        "/pipelines/idempotent": [{"name": "n", "stages": []}, {"idempotencyKey": 5, "name": "n", "stages": []}],
        "/jobs/pull": [{"waitSeconds": "ten"}, {"waitSeconds": 31}, {"waitSeconds": -1}, {"handlers": "H"},
                       {"handlers": [1]}, {"waitSeconds": True}],
        "/stages/{stage_id}/lease/acquire": [{"executionId": 5}, {"workerId": "w"}, {"executionId": "x" * 500}],
        "/stages/{stage_id}/lease/renew": [{"executionId": None}, {"executionId": "nope"}],
        "/stages/{stage_id}/result": [{"executionId": "e", "attempt": "1", "isSuccess": True},
                                      {"executionId": "e", "attempt": 1}, {"executionId": "e", "attempt": 1,
                                                                           "isSuccess": True, "logs": "x"},
                                      {"executionId": "nope", "attempt": 1, "isSuccess": True}],
        "/jobs/ack": [{"token": 5}, {"requeue": True}, {"token": "nope"}, {"token": "nope", "requeue": "yes"}],
        "/workers/heartbeat": [{"state": "asleep"}, {"inFlight": "2"}],
        "/jobs/pull-batch": [{"max": 0}, {"max": 101}, {"max": "2"}, {"max": 2, "waitSeconds": 31}, {"max": 2, "x": 1}],
        "/stages/results": [{"results": "x"}, {"results": [{}] * 101}, {"results": [1, {"stageId": "abc"}]},
                            {"results": [{"stageId": BIG, "executionId": "e", "attempt": 1, "isSuccess": True}]}],
        "/pipelines/idempotent/batch": [{"pipelines": {}}, {"pipelines": [{"name": 1}, "x"]},
                                        {"pipelines": [{"name": "n", "idempotencyKey": "k", "stages": []}]}],
    }
    compared = 0
    for method, template in LEAN_ROUTES:
        if method == "GET":
            continue  # the reads: see test_the_lean_reads_answer_as_the_fastapi_routes
        credential = api if template.startswith("/pipelines") else session
        paths = [concrete(template)] + ([template.replace("{stage_id}", x) for x in (BIG, "abc", "-1", "0")]
                                        if "{stage_id}" in template else [])
        for path in paths:
            # the credential first: none, an unknown one, then the other kind, each before the body is read
            for headers in ({}, {"X-API-Key": "nope"}, {"X-Worker-Session": "nope"},
                            {"Authorization": "Bearer nope"}, session if credential is api else api):
                same(*await pair.both(path, content=b'{"x": ', headers={**json_kind, **headers}))
                compared += 1
            for raw in bodies:
                same(*await pair.both(path, content=raw, headers={**json_kind, **credential}))
                compared += 1
            for body in typed[template]:
                same(*await pair.both(path, json=body, headers=credential))
                compared += 1
            # the checks in front of both: a foreign Host, a foreign Origin, a body over the limit
            same(*await pair.both(path, json={}, headers={**credential, "Host": "evil.example"}))
            same(*await pair.both(path, json={}, headers={**credential, "Origin": "https://evil.example"}))
            same(*await pair.both(path, content=b"x" * (2 << 20), headers={**json_kind, **credential}))
    assert compared > 300
    # a pull with nothing to do is 204 with no body either way
    same(*await pair.both("/jobs/pull", json={"waitSeconds": 0}, headers=session))


async def test_a_bad_body_on_a_lean_route_is_the_400_naming_its_field(pair):
    boot = (await pair.lean.post("/workers/bootstrap", headers={"X-API-Key": pair.key},
                                 json={"workerName": "w", "supportedHandlers": ["H"]})).json()
    session = {"X-Worker-Session": boot["workerSessionToken"]}
    r = await pair.lean.post("/jobs/pull", json={"waitSeconds": "ten"}, headers=session)
    assert r.status_code == 400 and r.json() == {"error": 'waitSeconds must be a number, got "ten"'}, r.text
    r = await pair.lean.post("/stages/7/result", json={"executionId": "e", "attempt": 1}, headers=session)
    assert r.status_code == 400 and r.json() == {"error": "isSuccess is required"}, r.text
    r = await pair.lean.post("/pipelines/idempotent", headers={"X-API-Key": pair.key},
                             json={"idempotencyKey": "k", "name": "n",
                                   "stages": [{"stageName": "v", "stageHandlerName": "H", "options": {"x": 1}}]})
    assert r.status_code == 400 and r.json() == {"error": "stage 'v': options.x is not a known field"}, r.text
    json_type = {"Content-Type": "application/json"}
    r = await pair.lean.post("/jobs/ack", content=b"[" * 65 + b"]" * 65, headers={**session, **json_type})
    assert r.status_code == 400 and "nested deeper than 64" in r.json()["error"], r.text
    for http in (pair.lean, pair.plain):  # a body that does not say it is JSON: told so, on either path
        r = await http.post("/jobs/ack", content=b'{"token": "x"}', headers={**session, "Content-Type": "text/plain"})
        assert r.status_code == 415, r.text
        assert r.json() == {"error": "the body must be JSON, sent with Content-Type: application/json"}
    r = await pair.lean.post("/jobs/ack", content=b'{"token": "x"}')
    assert r.status_code == 401 and "X-Worker-Session" in r.json()["error"], r.text


async def test_a_pipeline_worked_through_the_lean_routes_answers_as_through_fastapi(pair):
    """The successful answers: the same statuses and fields through either path (ids differ)."""
    answers: list[list[tuple[int, Any]]] = []
    for http in (pair.lean, pair.plain):
        api = {"X-API-Key": pair.key}
        boot = (await http.post("/workers/bootstrap", headers=api,
                                json={"workerName": "w", "supportedHandlers": ["H"]})).json()
        session = {"X-Worker-Session": boot["workerSessionToken"]}
        seen: list[tuple[int, Any]] = []
        stage = {"stageName": "s", "stageHandlerName": "H", "input": "in"}
        made = await http.post("/pipelines/idempotent", headers=api,
                               json={"idempotencyKey": f"k-{len(answers)}", "name": "n", "stages": [stage]})
        again = await http.post("/pipelines/idempotent", headers=api,
                                json={"idempotencyKey": f"k-{len(answers)}", "name": "n", "stages": [stage]})
        legacy = await http.post("/pipelines", headers=api, json={"name": "n", "stages": [dict(stage, input="x")]})
        seen += [(made.status_code, sorted(made.json())), (again.status_code, again.json()["wasExisting"]),
                 (legacy.status_code, sorted(legacy.json()))]
        pulled = await http.post("/jobs/pull", headers=session, json={"waitSeconds": 5})
        job = pulled.json()
        lease = {"executionId": job["executionId"], "workerId": boot["workerId"]}
        got = await http.post(f"/stages/{job['stageId']}/lease/acquire", headers=session, json=lease)
        renewed = await http.post(f"/stages/{job['stageId']}/lease/renew", headers=session, json=lease)
        done = await http.post(f"/stages/{job['stageId']}/result", headers=session, json={
            "executionId": job["executionId"], "attempt": job["attempt"], "isSuccess": True, "output": "out"})
        ack = await http.post("/jobs/ack", headers=session, json={"token": job["token"]})
        beat = await http.post("/workers/heartbeat", headers=session, json={"state": "ready"})
        for r in (pulled, got, renewed, done, ack, beat):
            assert r.headers["content-type"] == "application/json", r.text
            seen.append((r.status_code, sorted(r.json()) if r.content else r.text))
        assert got.json()["acquired"] is True and done.json()["accepted"] is True, (got.text, done.text)
        answers.append(seen)
    assert answers[0] == answers[1], answers


async def test_the_lean_reads_answer_as_the_fastapi_routes(pair):
    """``GET /pipelines`` (each filter, paging, a query FastAPI refuses) and ``GET /pipelines/{id}``
    (found, unknown, not a number, another application's, no credential) answer the same through
    the lean routes as through FastAPI."""
    api = {"X-API-Key": pair.key}
    made = []
    for i in range(5):
        r = await pair.lean.post("/pipelines/idempotent", headers=api, json={
            "name": f"name-{i % 2}", "idempotencyKey": f"k-{i}", "pipelineKeywords": [{"key": "k", "value": f"v{i % 2}"}],
            "pipelineContextItems": [{"key": "secret", "value": "s3cret", "isSensitive": True}],
            "stages": [{"stageName": "s", "stageHandlerName": "H"}]})
        assert r.status_code == 201, r.text
        made.append(r.json()["pipeline"]["id"])
    _, other_key = await Applications(pair.engine).create("other")
    queries = ["", "?pageSize=2", "?pageSize=2&pageNumber=2", "?name=name-1", "?statuses=Running&statuses=Failed",
               "?keywords=k:v0", "?search=name-0", "?search=", "?statuses=Nope", "?keywords=novalue",
               "?pageNumber=0", "?pageSize=501", "?pageNumber=x", "?pageSize=", "?pageNumber=1&pageNumber=2",
               "?unknown=1"]
    for q in queries:
        lean, plain = await pair.lean.get(f"/pipelines{q}", headers=api), await pair.plain.get(f"/pipelines{q}", headers=api)
        same(lean, plain)
    assert (await pair.lean.get("/pipelines?keywords=k:v0", headers=api)).json()["totalCount"] == 3
    assert "s3cret" not in (await pair.lean.get("/pipelines", headers=api)).text
    for path, headers in [(f"/pipelines/{made[0]}", api), ("/pipelines/999999", api), ("/pipelines/abc", api),
                          (f"/pipelines/{made[0]}", {"X-API-Key": other_key}), (f"/pipelines/{made[0]}", {}),
                          ("/pipelines", {}), ("/pipelines", {"X-API-Key": "flk_wrong"})]:
        same(await pair.lean.get(path, headers=headers), await pair.plain.get(path, headers=headers))
    assert (await pair.lean.get(f"/pipelines/{made[0]}", headers={"X-API-Key": other_key})).status_code == 404
