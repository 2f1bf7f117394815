"""The MCP tools' numbers past their range, over streamable HTTP on a real ``flowli serve``: a
number of seconds past any date (with the official client), or one that is not finite (sent as
raw JSON-RPC: the client's JSON has no NaN or Infinity), is a tool error naming the argument,
never an internal error."""

from __future__ import annotations

import json
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from ..served import Names, Service, log_checked

pytestmark = pytest.mark.e2e

UNKNOWN = "0190f0f0-0000-7000-8000-000000000000"
"""A well-formed execution id that no run has (a malformed one is refused before its numbers)."""
CALLS = (("list_stuck_workflows", {}, "older_than_seconds"),
         ("force_terminate_workflow", {"workflow_id": UNKNOWN, "reason": "stale"}, "min_idle_seconds"))


@pytest.mark.parametrize("value", [1e308, 1e20, -1.0])
async def test_seconds_past_any_date_are_refused_naming_the_argument(service: Service, names: Names, value: float):
    _, key, _ = await service.application(names("acme"))
    with log_checked(service):
        async with httpx2.AsyncClient(headers={"X-API-Key": key}, timeout=60) as http, \
                Client(streamable_http_client(f"{service.url}/mcp", http_client=http)) as client:
            for tool, arguments, field in CALLS:
                result = await client.call_tool(tool, {**arguments, field: value})
                assert result.is_error, (tool, value, result.structured_content)
                text = result.content[0].text
                assert field in text and "internal error" not in text and "Traceback" not in text, (tool, text)
            # in range, the same call is answered
            listed = await client.call_tool("list_stuck_workflows", {"older_than_seconds": 60})
            assert not listed.is_error and listed.structured_content["runs"] == []


def answer(r: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC answer of a streamable HTTP response (JSON, or one SSE message)."""
    assert r.status_code == 200, (r.status_code, r.text)
    if r.headers["content-type"].startswith("application/json"):
        return dict(r.json())
    data = [line[5:].strip() for line in r.text.splitlines() if line.startswith("data:")]
    return dict(json.loads(data[-1]))


@pytest.mark.parametrize("constant", ["Infinity", "NaN", "-Infinity"])
async def test_seconds_that_are_not_finite_are_refused_naming_the_argument(service: Service, names: Names,
                                                                           constant: str):
    _, key, _ = await service.application(names("acme"))
    headers = {"X-API-Key": key, "Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    with log_checked(service):
        async with httpx.AsyncClient(base_url=service.url, headers=headers, timeout=60) as http:
            init = await http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}})
            assert "result" in answer(init)
            session = {"mcp-session-id": init.headers["mcp-session-id"],
                       "mcp-protocol-version": answer(init)["result"]["protocolVersion"]}
            done = await http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                                   headers=session)
            assert done.status_code == 202
            for n, (tool, arguments, field) in enumerate(CALLS, start=2):
                call = json.dumps({"jsonrpc": "2.0", "id": n, "method": "tools/call",
                                   "params": {"name": tool, "arguments": {**arguments, field: 0}}})
                call = call.replace(f'"{field}": 0', f'"{field}": {constant}')
                got = answer(await http.post("/mcp", content=call, headers=session))
                text = json.dumps(got)
                assert field in text and "internal error" not in text and "Traceback" not in text, (tool, got)
