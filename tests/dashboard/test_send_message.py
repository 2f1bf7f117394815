"""A worked example of an operation on runs from every entry point: send a message to a run's
channel (what its ``ctx.receive(channel)`` waits for). The service is one (``Catalog.signal``:
the role's ``runs:operate``, the engine's own runs refused, the run's application); each adapter
maps it: ``POST /catalog/runs/{id}/signal`` over HTTP, a form on the dashboard's run page (the
channel the run waits on filled in), the ``send_signal`` tool over MCP, ``flowli signal`` in the
CLI. A real ``flowli serve`` and its registry's ``ops.await_message``, which waits on ``go``."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from ..assistants.test_mcp import call, over_http
from ..served import flowli, new_key
from .conftest import Tenants, csrf_of, logged_in

pytestmark = pytest.mark.e2e


async def start_waiting(api: httpx.AsyncClient, note: str) -> str:
    r = await api.post("/catalog/runs", json={"workflow_type": "ops.await_message", "inputs": {"note": note}})
    assert r.status_code == 201, r.text
    return str(r.json()["workflow_id"])  # a message sent before it waits is kept for its receive


async def until(api: httpx.AsyncClient, eid: str, *statuses: str, timeout: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        run = (await api.get(f"/catalog/runs/{eid}")).json()
        if run["status"] in statuses:
            return dict(run)
        assert time.monotonic() < deadline, run
        await asyncio.sleep(0.05)


async def test_a_message_is_sent_to_a_run_from_http_the_dashboard_mcp_and_the_cli(tenants: Tenants):
    url, key, db = tenants.service.url, tenants.billing_key, tenants.service.db
    async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}, timeout=30) as api:
        by_http, by_page, by_mcp, by_cli = [await start_waiting(api, n) for n in ("http", "page", "mcp", "cli")]

        # HTTP
        bad = await api.post(f"/catalog/runs/{by_http}/signal", json={"payload": 1})
        assert bad.status_code == 400 and bad.json() == {"error": "channel is required"}, bad.text
        sent = await api.post(f"/catalog/runs/{by_http}/signal", json={"channel": "go", "payload": {"n": 1}})
        assert sent.status_code == 200, sent.text
        assert sent.json()["workflow_id"] == by_http and sent.json()["channel"] == "go"
        assert (await until(api, by_http, "COMPLETED"))["output"] == {"note": "http", "message": {"n": 1}}
        async with logged_in(url, tenants.vic) as vic:  # a viewer: no form on the page
            html = (await vic.get(f"/runs/{by_page}")).text
            assert "Send message" not in html

        # the dashboard: the form names the channel the run waits on
        async with logged_in(url, tenants.ann) as ann:
            deadline = time.monotonic() + 20
            while "the run waits for a message on go" not in (html := (await ann.get(f"/runs/{by_page}")).text):
                assert time.monotonic() < deadline, "the run never waited for its message"
                await asyncio.sleep(0.05)
            assert 'name="channel" required value="go"' in html
            r = await ann.post(f"/runs/{by_page}/act", data={"csrf": csrf_of(html), "action": "signal",
                                                            "channel": "go", "payload": "{not json"})
            assert r.status_code == 400 and "The message must be JSON" in r.text
            r = await ann.post(f"/runs/{by_page}/act", data={"csrf": csrf_of(html), "action": "signal",
                                                            "channel": "go", "payload": '{"from": "page"}'})
            assert r.status_code == 303 and r.headers["location"].endswith("?done=signal"), r.text
        assert (await until(api, by_page, "COMPLETED"))["output"]["message"] == {"from": "page"}

        # MCP
        async with over_http(url, key) as mcp:
            await call(mcp, "send_signal", workflow_id=by_mcp, channel="go", payload="from mcp")
        assert (await until(api, by_mcp, "COMPLETED"))["output"]["message"] == "from mcp"

        # the CLI
        done = flowli(db, "signal", by_cli, "go", '{"from": "cli"}', "--by", "ops@example.com")
        assert done.returncode == 0, done.stderr
        assert (await until(api, by_cli, "COMPLETED"))["output"]["message"] == {"from": "cli"}

        # the service's refusals read the same from every adapter: a finished run, a viewer's key
        late = await api.post(f"/catalog/runs/{by_http}/signal", json={"channel": "go"})
        assert late.status_code == 409, late.text
        viewer = new_key(db, tenants.billing, "viewer")
        denied = await api.post(f"/catalog/runs/{by_page}/signal", json={"channel": "go"}, headers={"X-API-Key": viewer})
        assert denied.status_code == 403 and "lacks the capability 'runs:operate'" in denied.json()["error"]


async def test_a_run_is_cancelled_over_http_with_its_reason(tenants: Tenants):
    url, key = tenants.service.url, tenants.billing_key
    async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}, timeout=30) as api:
        eid = await start_waiting(api, "cancel me")
        missing = await api.post(f"/catalog/runs/{eid}/cancel", json={})
        assert missing.status_code == 400 and missing.json() == {"error": "reason is required"}, missing.text
        r = await api.post(f"/catalog/runs/{eid}/cancel", json={"reason": "not needed any more"})
        assert r.status_code == 200 and r.json()["cancel_requested"] is True, r.text
        assert (await until(api, eid, "CANCELLED", "FAILED"))["status"] in ("CANCELLED", "FAILED")

