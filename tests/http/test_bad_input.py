"""Bad input against a real ``flowli serve``: ids past 64 bits, numbers past their documented
ranges (or not finite), a dependency chain as long as a pipeline may be, JSON nested too deep,
bodies over the limit however they are sent, and a request without a credential. Each is refused
with its documented status and a sentence naming the field; none answers 500."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from ..served import Service, log_checked

pytestmark = pytest.mark.e2e

BIG = "99999999999999999999"
"""An id past 2^64."""
STAGE = {"stageName": "validate", "stageHandlerName": "ValidateInvoiceHandler", "input": "{}"}


def body(**over: Any) -> dict[str, Any]:
    return {"name": "validate-invoice", "stages": [dict(STAGE)], **over}


def refusal(r: httpx.Response, status: int, *words: str) -> str:
    """The error sentence of a refusal with ``status`` that names each of ``words``."""
    assert r.status_code == status, (r.request.method, r.request.url, r.status_code, r.text)
    assert "Traceback" not in r.text
    error = str(r.json()["error"])
    for word in words:
        assert word in error, (word, error)
    return error


@pytest.fixture
async def http(service: Service, billing: tuple[dict[str, Any], str]) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the test's application on the shared server; the test writes no traceback to
    the server's log."""
    _, key = billing
    with log_checked(service):
        async with httpx.AsyncClient(base_url=service.url, headers={"X-API-Key": key}, timeout=60) as client:
            yield client


async def test_an_id_past_64_bits_is_a_404_in_every_path_and_body(http):
    for method, path in [("GET", f"/pipelines/{BIG}"), ("GET", f"/pipelines/{BIG}/history"),
                         ("POST", f"/pipelines/{BIG}/resume"), ("POST", f"/pipelines/{BIG}/pause"),
                         ("POST", f"/pipelines/{BIG}/cancel"), ("GET", f"/schedules/{BIG}"),
                         ("DELETE", f"/schedules/{BIG}"), ("POST", f"/schedules/{BIG}/pause"),
                         ("GET", f"/policies/{BIG}"), ("DELETE", f"/policies/{BIG}"),
                         ("POST", f"/policies/{BIG}/enable"), ("GET", f"/stages/{BIG}/effective-policy")]:
        refusal(await http.request(method, path), 404, BIG)
    refusal(await http.post(f"/pipelines/{BIG}/stages", json={"stages": [STAGE]}), 404, BIG)
    refusal(await http.post(f"/stages/{BIG}/resume", json={"approved": True}), 404, BIG)
    policy = {"name": "p", "rules": {"maxRetries": 1, "intervalSeconds": 1}}
    refusal(await http.put(f"/policies/{BIG}", json=policy), 404, BIG)
    for path in ("/pipelines/skipStage", "/pipelines/rerunStage"):
        refusal(await http.post(path, json={"stageId": int(BIG)}), 404, BIG)
    boot = await http.post("/workers/bootstrap", json={"workerName": "w", "supportedHandlers": ["H"]})
    session = {"X-Worker-Session": boot.json()["workerSessionToken"]}
    for route in ("lease/acquire", "lease/renew"):
        refusal(await http.post(f"/stages/{BIG}/{route}", json={"executionId": "x"}, headers=session), 404, BIG)
    r = await http.post(f"/stages/{BIG}/result", json={"executionId": "x", "attempt": 1, "isSuccess": True},
                        headers=session)
    refusal(r, 404, BIG)


async def test_a_chain_as_long_as_a_pipeline_may_be_is_validated_without_recursion(http):
    # each stage waits for the one declared after it, the last for the first (which waits for
    # none): checking for a cycle walks the whole chain
    stages = [{"stageName": "root", "stageHandlerName": "H"}] + [
        {"stageName": f"s{i}", "stageHandlerName": "H", "options": {"dependsOn": [f"s{i + 1}"]}} for i in range(998)] + [
        {"stageName": "s998", "stageHandlerName": "H", "options": {"dependsOn": ["root"]}}]
    r = await http.post("/pipelines", json=body(stages=stages))
    assert r.status_code == 200, r.text[:2000]
    assert len(r.json()["stages"]) == 1000
    assert (await http.post(f"/pipelines/{r.json()['id']}/cancel")).status_code == 200
    more = [*stages, {"stageName": "one-more", "stageHandlerName": "H"}]
    refusal(await http.post("/pipelines", json=body(stages=more)), 400, "stages", "1000")
    # a cycle at the end of the chain is found and named
    stages[-1] = {**stages[-1], "options": {"dependsOn": ["s0"]}}
    refusal(await http.post("/pipelines", json=body(stages=stages)), 400, "cycle")


async def test_json_nested_too_deep_is_refused_naming_the_depth(http):
    deep = b"[" * 50_000 + b"]" * 50_000
    nested = b'{"name": "x", "layers": ' + deep + b"}"
    for path in ("/catalog/compositions/validate", "/catalog/compositions", "/pipelines", "/schedules",
                 "/catalog/runs"):
        r = await http.post(path, content=nested, headers={"Content-Type": "application/json"})
        refusal(r, 400, "nested deeper than 64")
    # 64 levels are fine (the body is refused for what it says, not for its depth)
    shallow = b'{"name": "x", "layers": ' + b"[" * 63 + b"]" * 63 + b"}"
    r = await http.post("/catalog/compositions/validate", content=shallow, headers={"Content-Type": "application/json"})
    assert r.status_code in (200, 400) and "nested" not in r.text


@pytest.mark.parametrize(("trigger", "field"), [
    ({"intervalSeconds": 1e-7}, "intervalSeconds"), ({"intervalSeconds": 1e20}, "intervalSeconds"),
    ({"runAt": "0001-01-01T00:00:00+01:00"}, "runAt"), ({"runAt": "9999-12-31T23:59:59-01:00"}, "runAt"),
    ({"runAt": "9999-12-31T00:00:00Z"}, "runAt"), ({"cron": "0 0 31 2 *"}, "cron"),
], ids=["interval-tiny", "interval-huge", "year-1", "year-9999-offset", "year-9999", "cron-never"])
async def test_a_schedule_trigger_out_of_range_is_refused_naming_the_field(http, trigger, field):
    r = await http.post("/schedules", json={"name": "s", **trigger, "pipeline": body()})
    refusal(r, 400, field)
    assert (await http.get("/schedules")).json() == []


@pytest.mark.parametrize("field", ["timeOut", "retryInterval", "maxRetryInterval", "maxRetries"])
async def test_stage_numbers_past_their_range_are_refused_at_create_naming_the_field(http, field):
    r = await http.post("/pipelines", json=body(stages=[{**STAGE, "options": {field: 1e20}}]))
    refusal(r, 400, "stage 'validate'", f"options.{field}")
    for past in ("Infinity", "1e400"):  # JSON's parser makes 1e400 an infinity
        raw = json.dumps(body(stages=[{**STAGE, "options": {field: 1}}])).replace(": 1}", f": {past}}}").encode()
        r = await http.post("/pipelines", content=raw, headers={"Content-Type": "application/json"})
        refusal(r, 400, field)
    assert (await http.get("/pipelines")).json()["totalCount"] == 0


async def test_caps_on_names_handlers_and_policy_numbers_are_refused_naming_the_field(http):
    refusal(await http.post("/pipelines", json=body(name="n" * 201)), 400, "name", "200")
    refusal(await http.post("/pipelines", json=body(stages=[{**STAGE, "stageName": "s" * 201}])), 400, "stageName")
    refusal(await http.post("/pipelines", json=body(stages=[{**STAGE, "stageHandlerName": "h" * 201}])), 400,
            "stageHandlerName")
    handlers = [f"H{i}" for i in range(101)]
    refusal(await http.post("/workers/bootstrap", json={"workerName": "w", "supportedHandlers": handlers}), 400,
            "supportedHandlers")
    for rule, value in (("maxRetries", 101), ("intervalSeconds", 1e20), ("backoffMultiplier", 1e20)):
        policy = {"name": "p", "rules": {"maxRetries": 1, "intervalSeconds": 1, rule: value}}
        refusal(await http.post("/policies", json=policy), 400, f"rules.{rule}")
    assert (await http.get("/policies")).json() == []


@pytest.mark.parametrize("value", ["1e308", "inf", "nan", "-1"])
async def test_catalog_seconds_must_be_finite_and_in_range(http, value):
    refusal(await http.get("/catalog/stuck", params={"older_than_seconds": value}), 400, "older_than_seconds")
    raw = b'{"reason": "r", "min_idle_seconds": ' + {"inf": b"Infinity", "nan": b"NaN"}.get(value, value.encode()) + b"}"
    # a well-formed eid: a malformed one is 404 before its body is read
    r = await http.post("/catalog/runs/0190f0f0-0000-7000-8000-000000000000/terminate", content=raw,
                        headers={"Content-Type": "application/json"})
    refusal(r, 400, "min_idle_seconds")


async def chunks(size: int) -> AsyncIterator[bytes]:
    sent = 0
    while sent < size:
        yield b"x" * 65536
        sent += 65536


@pytest.mark.parametrize("path", ["/pipelines", "/mcp", "/login", "/catalog/compositions/validate"])
async def test_a_body_over_the_limit_is_413_sent_chunked_or_not(http, path):
    # a streamed body has no Content-Length: its size is known only by reading it
    kind = {"Content-Type": "application/x-www-form-urlencoded" if path == "/login" else "application/json"}
    r = await http.post(path, content=chunks(2 << 20), headers=kind)
    assert "content-length" not in r.request.headers
    refusal(r, 413, "larger than")
    r = await http.post(path, content=b"x" * (2 << 20), headers=kind)
    refusal(r, 413, "larger than")


async def test_a_request_without_a_credential_is_401_before_its_body_is_read(service):
    async with httpx.AsyncClient(base_url=service.url) as anonymous:
        for path in ("/pipelines", "/pipelines/idempotent", "/schedules", "/policies", "/catalog/runs",
                     "/catalog/compositions/validate", "/pipelines/skipStage", "/workers/bootstrap"):
            for raw in (b'{"name": ', b"[" * 50_000, b'{"stageId": "x"}'):
                r = await anonymous.post(path, content=raw, headers={"Content-Type": "application/json"})
                refusal(r, 401)
        for path in ("/jobs/pull", "/stages/1/result"):
            r = await anonymous.post(path, content=b'{"x": ', headers={"Content-Type": "application/json"})
            refusal(r, 401)
