"""Who may use ``/mcp`` on a real ``flowli serve``: no session without a valid key (401 with
``WWW-Authenticate: Bearer``), a bounded number of open sessions per key (429 past it), a session
that ends with its key; an assistant's key whose every write waits for a person, over MCP as over
HTTP; and an approval carried out only while the key that asked for it is still valid. Raw HTTP
requests for the refusals, the official SDK's client for what still works."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from ..crash import until
from ..http.test_access import assistant_key
from ..served import Names, Service, clerk
from ..served import flowli as run_cli
from .test_mcp import call, over_http, refusal_of
from .test_mcp import served as served  # noqa: F401 - a fixture (both backends)

pytestmark = pytest.mark.e2e

MCP_SESSIONS_PER_KEY = 16
"""The open sessions a key may hold, as the README says."""

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def initialize(http: httpx.AsyncClient, key: str | None) -> httpx.Response:
    headers = {**ACCEPT, **({"Authorization": f"Bearer {key}"} if key else {})}
    async with http.stream("POST", "/mcp", headers=headers, json=INITIALIZE) as r:
        await r.aread()
        return r


def jsonrpc_error(r: httpx.Response) -> str:
    body = json.loads(r.content)
    assert body["jsonrpc"] == "2.0" and "Traceback" not in r.text
    return str(body["error"]["message"])


async def test_no_mcp_session_without_a_valid_key(served: Any) -> None:
    svc, keys, _ = served
    async with httpx.AsyncClient(base_url=svc.url, timeout=30) as http:
        for key in (None, "flk_not-a-key"):
            r = await initialize(http, key)
            assert r.status_code == 401, r.text
            assert r.headers["www-authenticate"].startswith('Bearer realm="flowli"')
            assert "mcp-session-id" not in r.headers
            assert "key" in jsonrpc_error(r).lower()
        assert 'error="invalid_token"' in (await initialize(http, "flk_not-a-key")).headers["www-authenticate"]
        listed = await http.post("/mcp", headers={**ACCEPT, "Mcp-Session-Id": "made-up"},
                                 json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        assert listed.status_code == 401
        assert (await http.get("/mcp", headers={"Accept": "text/event-stream"})).status_code == 401
    with pytest.raises(Exception) as raised:  # the SDK's client gets the refusal, not a session
        async with over_http(svc.url, "flk_not-a-key") as client:
            await client.list_tools()
    assert refusal_of(raised.value) == "the API key is unknown or disabled"
    async with over_http(svc.url, keys["viewer"]) as client:  # a valid key still opens one
        assert "get_workflow_status" in {t.name for t in (await client.list_tools()).tools}


async def test_a_key_holds_a_bounded_number_of_mcp_sessions(served: Any) -> None:
    svc, keys, _ = served
    async with httpx.AsyncClient(base_url=svc.url, timeout=30) as http:
        opened = []
        for _ in range(MCP_SESSIONS_PER_KEY):
            r = await initialize(http, keys["viewer"])
            assert r.status_code == 200, r.text
            opened.append(r.headers["mcp-session-id"])
        one_more = await initialize(http, keys["viewer"])
        assert one_more.status_code == 429 and "mcp-session-id" not in one_more.headers
        assert f"holds {MCP_SESSIONS_PER_KEY} open MCP sessions" in jsonrpc_error(one_more)
        assert (await initialize(http, keys["admin"])).status_code == 200  # another key is not held back
        # a session is the key's: another key cannot use it
        stolen = await http.post("/mcp", headers={**ACCEPT, "Authorization": f"Bearer {keys['admin']}",
                                                  "Mcp-Session-Id": opened[0], "Mcp-Protocol-Version": "2025-06-18"},
                                 json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        assert stolen.status_code == 404
        # a session closed by its client frees its place
        closed = await http.delete("/mcp", headers={"Authorization": f"Bearer {keys['viewer']}",
                                                    "Mcp-Session-Id": opened[0], "Mcp-Protocol-Version": "2025-06-18"})
        assert closed.status_code in (200, 204), closed.text
        async with over_http(svc.url, keys["viewer"]) as client:
            assert (await call(client, "list_workflow_namespaces"))["namespaces"]
        for sid in opened[1:]:  # the test's sessions, closed
            await http.delete("/mcp", headers={"Authorization": f"Bearer {keys['viewer']}", "Mcp-Session-Id": sid,
                                               "Mcp-Protocol-Version": "2025-06-18"})


async def test_an_open_mcp_session_ends_with_its_key(service: Service, names: Names) -> None:
    acme = names("acme")
    _, _, (key,) = await service.application(acme, ("operator", "bot"))
    async with over_http(service.url, key) as client:
        assert (await call(client, "list_workflow_namespaces"))["namespaces"]
        async with clerk(service.db) as apps:
            [made] = [k for k in await apps.keys(acme) if k["name"] == "bot"]
            await apps.disable_key(made["id"])
        with pytest.raises(Exception) as raised:  # the session itself is refused, not only its tools
            await client.call_tool("list_workflow_namespaces", {})
        assert refusal_of(raised.value) == "the API key is unknown or disabled"


async def approved(svc: Service, client: Any, approval: str) -> dict[str, Any]:
    """Approve ``approval`` as a person (the CLI), then its state once it is decided."""
    await until(lambda: approval[:13] in run_cli(svc.db, "inbox").stdout, 30, "the approval in the inbox")
    yes = run_cli(svc.db, "approvals", "approve", approval, "--by", "carol@example.com")
    assert yes.returncode == 0, yes.stderr

    async def decided() -> Any:
        state = await call(client, "get_approval", approval_id=approval)
        return state if state["status"] != "pending" else None

    return dict(await until(decided, 30, "the decided approval"))


async def test_an_assistants_write_over_mcp_waits_for_a_person_whatever_the_setting(served: Any,
                                                                                    names: Names) -> None:
    svc, keys, acme = served
    bot = assistant_key(svc.db, acme, "admin")["apiKey"]  # the application does not require approval itself
    bucket = names("b")
    async with over_http(svc.url, bot) as client:
        assert (await call(client, "list_workflow_types", prefix="aws.s3."))["types"]  # reads need none
        data = await call(client, "start_workflow", workflow_type="aws.s3.list_buckets", inputs={})
        assert data["status"] == "PENDING" and "approval_id" not in data  # a data type's start is a read
        asked = await call(client, "start_workflow", workflow_type="aws.s3.create_bucket", inputs={"bucket": bucket})
        assert asked["status"] == "approval_required", asked
        state = await approved(svc, client, asked["approval_id"])
        assert state["status"] == "approved", state
        run = await call(client, "watch_workflow", workflow_id=state["result"]["workflow_id"], timeout_seconds=60)
        assert run["status"] == "COMPLETED" and run["output"]["bucket_name"] == bucket


async def test_an_approval_is_not_carried_out_once_its_key_is_disabled(served: Any, names: Names) -> None:
    svc, keys, acme = served
    assert run_cli(svc.db, "apps", "set", acme, "--mcp-approval", "required").returncode == 0
    async with clerk(svc.db) as apps:
        made = await apps.create_key(acme, "asker", "admin")
    bucket = names("gone")
    async with over_http(svc.url, made["apiKey"]) as client:
        asked = await call(client, "start_workflow", workflow_type="aws.s3.create_bucket", inputs={"bucket": bucket})
        assert asked["status"] == "approval_required"
    assert run_cli(svc.db, "keys", "disable", str(made["id"])).returncode == 0
    async with over_http(svc.url, keys["admin"]) as client:  # a person of the application follows it
        state = await approved(svc, client, asked["approval_id"])
        assert state["status"] == "failed" and "disabled" in state["reason"], state
        runs = (await call(client, "list_workflows", workflow_type="aws.s3.create_bucket"))["runs"]
        assert runs == []
