"""A role of the application's own, declared with ``Registry.role``, on a real ``flowli serve``:
the CLI given the application gives it to a key, and every entry point checks it by the
capabilities it grants, as it checks a built-in role (the pipelines routes, the catalog routes,
the MCP server); a role nobody declared grants nothing, and is refused, never a 500."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from ..assistants.test_mcp import call, over_http, refused
from ..served import APP, Names, Service, clerk, flowli

pytestmark = pytest.mark.e2e

STAGE = {"stageName": "validate", "stageHandlerName": "ValidateInvoiceHandler"}


def key_with_role(db: str, application: str, role: str) -> str:
    """``flowli --app APP keys create APPLICATION --role ROLE --json``, as a process."""
    made = flowli(db, "--app", APP, "keys", "create", application, "--role", role, "--json")
    assert made.returncode == 0, made.stderr
    key = json.loads(made.stdout)
    assert key["role"] == role
    return str(key["apiKey"])


async def test_a_declared_role_is_given_by_the_cli_and_checked_by_its_capabilities(
        service: Service, names: Names) -> None:
    billing = names("billing")
    _, admin, _ = await service.application(billing)
    launcher = key_with_role(service.db, billing, "launcher")  # runs:read, runs:start, s3:write
    auditor = key_with_role(service.db, billing, "auditor")  # runs:read
    # without the application, the CLI knows the built-in roles alone, and says which
    unknown = flowli(service.db, "keys", "create", billing, "--role", "auditor")
    assert unknown.returncode == 2 and "role must be one of admin, operator, viewer" in unknown.stderr
    assert "Traceback" not in unknown.stderr
    async with httpx.AsyncClient(base_url=service.url, timeout=30) as http:
        made = await http.post("/pipelines", headers={"X-API-Key": launcher}, json={"name": "p", "stages": [STAGE]})
        assert made.status_code == 200, made.text
        pid = made.json()["id"]
        for key in (launcher, auditor):
            assert (await http.get(f"/pipelines/{pid}", headers={"X-API-Key": key})).status_code == 200
            assert (await http.get("/pipelines", headers={"X-API-Key": key})).status_code == 200
            assert (await http.get("/catalog/runs", headers={"X-API-Key": key})).status_code == 200
        cancel = await http.post(f"/pipelines/{pid}/cancel", headers={"X-API-Key": launcher})
        assert cancel.status_code == 403 and "lacks the capability 'runs:operate'" in cancel.json()["error"]
        boot = await http.post("/workers/bootstrap", headers={"X-API-Key": launcher},
                               json={"workerName": "w", "supportedHandlers": ["ValidateInvoiceHandler"]})
        assert boot.status_code == 403, boot.text
        refused_create = await http.post("/pipelines", headers={"X-API-Key": auditor},
                                         json={"name": "p", "stages": [STAGE]})
        assert refused_create.status_code == 403
        assert "lacks the capability 'runs:start'" in refused_create.json()["error"]
        # the catalog's routes check the same role through the engine's RBAC: a state machine's
        # start needs runs:start, a data type's start is a read
        bucket = {"workflow_type": "aws.s3.create_bucket", "inputs": {"bucket": names("b")}}
        started = await http.post("/catalog/runs", headers={"X-API-Key": launcher}, json=bucket)
        assert started.status_code == 201, started.text
        denied = await http.post("/catalog/runs", headers={"X-API-Key": auditor},
                                 json={**bucket, "inputs": {"bucket": names("c")}})
        assert denied.status_code == 403 and "runs:start" in denied.text, denied.text
        read = await http.post("/catalog/runs", headers={"X-API-Key": auditor},
                               json={"workflow_type": "aws.s3.list_buckets", "inputs": {}})
        assert read.status_code == 201, read.text
        assert (await http.post(f"/pipelines/{pid}/cancel", headers={"X-API-Key": admin})).status_code == 200


async def test_a_role_nobody_declared_grants_nothing(service: Service, names: Names) -> None:
    billing = names("billing")
    _, admin, (ghost,) = await service.application(billing, ("viewer", "ghost"))
    # no command gives a key a role nobody declared: its stored record is changed as one would
    async with clerk(service.db) as apps:
        [key] = [k for k in await apps.keys(billing) if k["name"] == "ghost"]
        item = await apps.engine.items.get("apikey", key["id"])
        assert item is not None
        await apps.engine.items.update("apikey", item.id, {**item.body, "role": "ghost"}, apps.now)
    async with httpx.AsyncClient(base_url=service.url, timeout=30) as http:
        made = await http.post("/pipelines", headers={"X-API-Key": admin}, json={"name": "p", "stages": [STAGE]})
        pid = made.json()["id"]
        attempts: list[tuple[str, str, Any]] = [
            ("POST", "/pipelines", {"name": "p", "stages": [STAGE]}),
            ("POST", f"/pipelines/{pid}/cancel", None),
            ("POST", "/workers/bootstrap", {"workerName": "w", "supportedHandlers": ["ValidateInvoiceHandler"]}),
            ("POST", "/catalog/runs", {"workflow_type": "aws.s3.create_bucket", "inputs": {"bucket": names("b")}}),
        ]
        for method, path, body in attempts:
            r = await http.request(method, path, headers={"X-API-Key": ghost}, json=body)
            assert r.status_code == 403, (path, r.status_code, r.text)
            assert "Traceback" not in r.text


async def test_a_declared_role_over_mcp(service: Service, names: Names) -> None:
    billing = names("billing")
    await service.application(billing)
    auditor = key_with_role(service.db, billing, "auditor")
    async with over_http(service.url, auditor) as client:
        assert (await call(client, "list_workflows"))["runs"] == []  # reads: its application has no run yet
        text = await refused(client, "start_workflow", workflow_type="aws.s3.create_bucket",
                             inputs={"bucket": names("b")})
        assert "runs:start" in text
