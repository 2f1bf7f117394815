"""The catalog over HTTP, against a real ``flowli serve`` that loads the test catalog: types,
schemas, starts validated before they run, the three-state view and history, compositions
validated and saved, operations, and the roles of API keys; never a 500 for bad input."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from flowli.catalog import content_hash

from ..catalog.app import effects
from ..catalog.test_compositions import error_example, vw_demo
from ..crash import until
from ..served import Names, Service, log_checked

pytestmark = pytest.mark.e2e


@pytest.fixture
async def served(service: Service, names: Names) -> AsyncIterator[Any]:
    """The shared server, an application of this test with an admin, a viewer and an operator key,
    and another application's key; the test writes no traceback to the server's log."""
    _, admin, (viewer, operator) = await service.application(names("acme"), ("viewer", "watcher"), ("operator", "ops"))
    _, other, _ = await service.application(names("globex"))
    with log_checked(service):
        yield service, {"admin": admin, "viewer": viewer, "operator": operator, "other": other}


def client(url: str, key: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}, timeout=30)


PAYLOAD = {"input", "output", "error", "state_data"}
"""The keys of a history transition that only ``include_state_data`` shows."""


async def check_history_without_state_data(http: httpx.AsyncClient, wid: str) -> list[dict[str, Any]]:
    """The history without include_state_data (left out, or false) is the one with it, less every
    payload key; returns the transitions with their payloads."""
    full = (await http.get(f"/catalog/runs/{wid}/history", params={"include_state_data": "true"})).json()
    assert full["workflow_id"] == wid and any(PAYLOAD & row.keys() for row in full["history"])
    for params in ({}, {"include_state_data": "false"}):
        bare = await http.get(f"/catalog/runs/{wid}/history", params=params)
        assert bare.status_code == 200
        assert bare.json() == {"workflow_id": wid, "history": [{k: v for k, v in row.items() if k not in PAYLOAD}
                                                                for row in full["history"]]}
        assert [row for row in bare.json()["history"] if PAYLOAD & row.keys()] == []
    return list(full["history"])


async def test_types_schemas_and_a_run_over_http(served):
    svc, keys = served
    async with client(svc.url, keys["admin"]) as http:
        spaces = (await http.get("/catalog/namespaces")).json()["namespaces"]
        assert {"namespace": "aws.s3", "types": 6} in spaces
        types = (await http.get("/catalog/types", params={"prefix": "aws.s3.", "q": "bucket"})).json()["types"]
        assert "aws.s3.create_bucket" in [t["name"] for t in types]
        one = (await http.get("/catalog/types/aws.s3.create_bucket")).json()
        assert one["has_prerequisites"] is True and one["fields"][0]["name"] == "bucket"
        assert (await http.get("/catalog/types/aws.s3.create_bucket/prerequisites",
                               params={"variant": "aws"})).json()["prerequisites"][0]["variant"] == "aws"
        missing = await http.get("/catalog/types/aws.s3.create_buckt")
        assert missing.status_code == 404 and missing.json() == {
            "error": "unknown workflow type 'aws.s3.create_buckt'; did you mean 'aws.s3.create_bucket'?",
            "suggestion": "aws.s3.create_bucket"}
        bad = await http.post("/catalog/runs", json={"workflow_type": "aws.s3.enable_versioning",
                                                     "inputs": {"count": "x"}})
        assert bad.status_code == 400 and bad.json()["problems"][0] == "bucket is required"
        started = await http.post("/catalog/runs", json={"workflow_type": "aws.s3.create_bucket",
                                                         "inputs": {"bucket": "web-1"}})
        assert started.status_code == 201 and started.json()["status"] == "PENDING"
        wid = started.json()["workflow_id"]

        async def completed() -> Any:
            body = (await http.get(f"/catalog/runs/{wid}")).json()
            return body if body["status"] == "COMPLETED" else None

        status = await until(completed, 20, "the run completes")
        assert status["output"]["bucket_name"] == "web-1"
        history = (await http.get(f"/catalog/runs/{wid}/history", params={"include_state_data": "true"})).json()
        assert history["history"][0]["input"] == {"bucket": "web-1"}
        assert await check_history_without_state_data(http, wid) == history["history"]
        listed = (await http.get("/catalog/runs", params={"workflow_type": "aws.s3.create_bucket"})).json()
        assert [r["workflow_id"] for r in listed["runs"]] == [wid]
    async with client(svc.url, keys["other"]) as http:  # another application sees none of it
        assert (await http.get(f"/catalog/runs/{wid}")).status_code == 404
        assert (await http.get("/catalog/runs")).json()["runs"] == []


async def test_compositions_over_http_and_roles(served):
    svc, keys = served
    async with client(svc.url, keys["viewer"]) as http:
        refused = await http.post("/catalog/runs", json={"workflow_type": "aws.s3.enable_versioning",
                                                         "inputs": {"bucket": "b"}})
        assert refused.status_code == 403 and refused.json()["capability"] == "runs:start"
        read = await http.post("/catalog/runs", json={"workflow_type": "aws.s3.list_buckets", "inputs": {}})
        assert read.status_code == 201  # a data type is a read
        broken = vw_demo()
        broken["layers"][1]["steps"][0]["workflow_type"] = "aws.s3.put_bucket_taging"
        checked = await http.post("/catalog/compositions/validate", json=broken)
        assert checked.status_code == 200 and checked.json() == error_example()
        assert (await http.post("/catalog/compositions", json=vw_demo())).status_code == 403
    async with client(svc.url, keys["operator"]) as http:
        saved = await http.post("/catalog/compositions", json=vw_demo())
        assert saved.status_code == 201 and saved.json()["workflow_type"] == "virtual.vw_demo@1.0"
        again = await http.post("/catalog/compositions", json=vw_demo())
        assert again.status_code == 200 and again.json()["created"] is False
        not_json = await http.post("/catalog/compositions/validate", content=b"{nope",
                                   headers={"content-type": "application/json"})
        assert not_json.status_code == 400 and "error" in not_json.json()
        assert (await http.post("/catalog/compositions", json={"name": "x"})).status_code == 400
        listed = (await http.get("/catalog/compositions")).json()["compositions"]
        assert [c["workflow_type"] for c in listed] == ["virtual.vw_demo@1.0"]
        # the operator role does not grant s3:write, which the composition's first step needs
        denied = await http.post("/catalog/runs", json={"workflow_type": "virtual.vw_demo@1.0",
                                                        "inputs": {"bucket_name": "b"}})
        assert denied.status_code == 403 and denied.json()["capability"] == "s3:write"
        dag = (await http.get("/catalog/types/virtual.vw_demo@1.0/dag")).json()
        assert [layer["name"] for layer in dag["layers"]] == ["layer_1", "layer_2"]
    async with client(svc.url, keys["admin"]) as http:
        wid = (await http.post("/catalog/runs", json={"workflow_type": "virtual.vw_demo@1.0",
                                                      "inputs": {"bucket_name": "b"}})).json()["workflow_id"]

        async def completed() -> Any:
            body = (await http.get(f"/catalog/runs/{wid}")).json()
            return body if body["status"] == "COMPLETED" else None

        done = await until(completed, 30, "the composition completes")
        assert done["output"] == {"s2": {"bucket": "b", "tags": 1}}
        full = await check_history_without_state_data(http, wid)
        assert full[-1]["output"] == done["output"] and "state_data" in full[-1]  # a dag's payloads hold state_data
        again = await http.post(f"/catalog/runs/{wid}/retry")
        assert again.status_code == 409 and "only a FAILED run can be retried" in again.json()["error"]
        parked = await http.post(f"/catalog/runs/{wid}/resolve", json={"resolution": "remediated"})
        assert parked.status_code == 409 and "not remediation_pending" in parked.json()["error"]
        assert (await http.post(f"/catalog/runs/{wid}/resolve", json={"resolution": 3})).status_code == 400
        assert (await http.post(f"/catalog/runs/{wid}/terminate", json={"reason": "x"})).status_code == 409
        assert (await http.get("/catalog/stuck", params={"older_than_seconds": 0})).json()["runs"] == []
    async with client(svc.url, keys["other"]) as http:  # compositions are per application
        assert (await http.get("/catalog/compositions")).json()["compositions"] == []
        assert (await http.get("/catalog/types/virtual.vw_demo@1.0/dag")).status_code == 404


NO_KEY = {"error": "no credential: send X-API-Key (or Authorization: Bearer <key>)"}
UNKNOWN_KEY = {"error": "the API key is unknown or disabled"}


async def test_a_changed_composition_is_refused_and_refused_requests_store_nothing(served, names):
    svc, keys = served
    kept, anon, b = names("kept"), names("anon"), names("b")
    demo_hash = content_hash(vw_demo())
    changed = vw_demo()  # a second tag: a run of this definition would answer tags 2
    changed["layers"][1]["steps"][0]["input_mapping"]["tagging"]["value"]["TagSet"].append({"Key": "team",
                                                                                            "Value": "ops"})
    other = {**vw_demo(), "name": "vw_other"}

    async def run_ids(http: httpx.AsyncClient) -> set[str]:
        answer = await http.get("/catalog/runs", params={"limit": 500})
        assert answer.status_code == 200 and answer.json()["next"] is None
        return {r["workflow_id"] for r in answer.json()["runs"]}

    async def stored(http: httpx.AsyncClient) -> list[tuple[str, str]]:
        return [(c["workflow_type"], c["content_hash"])
                for c in (await http.get("/catalog/compositions")).json()["compositions"]]

    async with client(svc.url, keys["admin"]) as http:
        saved = await http.post("/catalog/compositions", json=vw_demo())
        assert saved.status_code == 201 and saved.json()["content_hash"] == demo_hash
        before = await run_ids(http)
        assert before == {saved.json()["workflow_id"]}  # the composition.save run

        # a changed definition under the saved version: 409 naming the composition; nothing changes
        conflict = await http.post("/catalog/compositions", json=changed)
        assert conflict.status_code == 409 and conflict.json() == {
            "error": f"composition 'vw_demo' version '1.0' is saved already with another definition ({demo_hash});"
                     " give the changed definition a new version"}
        assert await stored(http) == [("virtual.vw_demo@1.0", demo_hash)]
        assert await run_ids(http) == before  # refused before anything ran: no failed save left behind

        # bad inputs to POST /catalog/runs: refused, and no run is stored
        refusals = [
            ({"workflow_type": "aws.s3.enable_versioning", "inputs": {"count": "x"}}, 400, {
                "error": "the inputs of 'aws.s3.enable_versioning' do not match its schema: bucket is required;"
                         " count: Input should be a valid integer, unable to parse string as an integer",
                "problems": ["bucket is required",
                             "count: Input should be a valid integer, unable to parse string as an integer"]}),
            ({"workflow_type": "aws.s3.enable_versioning", "inputs": {"bucket": b, "extra": 1}}, 400, {
                "error": "the inputs of 'aws.s3.enable_versioning' do not match its schema: extra is not a parameter",
                "problems": ["extra is not a parameter"]}),
            ({"workflow_type": "aws.s3.enable_versioning", "inputs": [1]}, 400,
             {"error": "inputs must be an object, got [1]"}),
            ({"workflow_type": "aws.s3.enable_versioning", "inputs": {"bucket": b}, "colour": 1}, 400,
             {"error": "colour is not a known field"}),
            ({"workflow_type": "virtual.vw_demo@1.0", "inputs": {}}, 400, {
                "error": "the inputs of 'virtual.vw_demo@1.0' do not match its schema: bucket_name is required",
                "problems": ["bucket_name is required"]}),
            ({"workflow_type": "aws.s3.create_buckt", "inputs": {"bucket": b}}, 404, {
                "error": "unknown workflow type 'aws.s3.create_buckt'; did you mean 'aws.s3.create_bucket'?",
                "suggestion": "aws.s3.create_bucket"}),
        ]
        for payload, code, answer in refusals:
            refused = await http.post("/catalog/runs", json=payload)
            assert (refused.status_code, refused.json()) == (code, answer), payload
        assert await run_ids(http) == before

    # no API key, or an unknown one: 401 on every catalog route, before the body is looked at
    requests: list[tuple[str, str, Any]] = [
        ("GET", "/catalog/namespaces", None), ("GET", "/catalog/types", None), ("GET", "/catalog/runs", None),
        ("GET", "/catalog/compositions", None), ("GET", "/catalog/stuck", None),
        ("GET", f"/catalog/runs/{saved.json()['workflow_id']}/history", None),
        ("POST", "/catalog/runs", {"workflow_type": "aws.s3.create_bucket", "inputs": {"bucket": anon}}),
        ("POST", "/catalog/runs", {"bogus": 1}),
        ("POST", "/catalog/compositions/validate", vw_demo()),
        ("POST", "/catalog/compositions", other),
    ]
    async with httpx.AsyncClient(base_url=svc.url, timeout=30) as anonymous:
        for method, path, payload in requests:
            bare = await anonymous.request(method, path, json=payload)
            assert (bare.status_code, bare.json()) == (401, NO_KEY), (method, path)
            for header in ({"X-API-Key": "not-a-key"}, {"Authorization": "Bearer not-a-key"}):
                unknown = await anonymous.request(method, path, json=payload, headers=header)
                assert (unknown.status_code, unknown.json()) == (401, UNKNOWN_KEY), (method, path, header)

    async with client(svc.url, keys["admin"]) as http:
        assert await run_ids(http) == before and await stored(http) == [("virtual.vw_demo@1.0", demo_hash)]
        # a good start is listed (the list is not blind), and the saved composition runs as first saved
        started = await http.post("/catalog/runs", json={"workflow_type": "virtual.vw_demo@1.0",
                                                         "inputs": {"bucket_name": kept}})
        assert started.status_code == 201
        wid = started.json()["workflow_id"]
        assert wid in await run_ids(http) and before < await run_ids(http)

        async def completed() -> Any:
            body = (await http.get(f"/catalog/runs/{wid}")).json()
            return body if body["status"] == "COMPLETED" else None

        done = await until(completed, 30, "the composition completes")
        assert done["output"] == {"s2": {"bucket": kept, "tags": 1}}
        # nothing refused ever ran (no create of anon, nor of b): the effects of this test's buckets
        assert [e for e in effects() if e.endswith(names.tag)] == [f"create:{kept}", f"tag:{kept}"]
