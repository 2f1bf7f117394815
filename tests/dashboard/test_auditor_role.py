"""A worked example of a role of the application's own: ``auditor`` reads runs and answers the
decisions they wait for (``runs:decide``), and acts on nothing else. It is declared once, in the
application's registry (``tests.dashboard.app``: ``registry.role("auditor", ["runs:read",
"runs:decide"])``), and every entry point of a real ``flowli serve`` honours it: the CLI gives it to
a key and to a dashboard user, the HTTP routes let its key approve a stage and refuse a cancel, the
dashboard shows its user the decisions and not the actions, and the MCP server lets its key answer
a remediation gate and refuses a retry."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest

from flowli.client import PipelinesClient, WaitForApproval

from ..assistants.test_mcp import call, over_http, refused
from ..http.test_pipelines import Worker, until_stage, until_status
from ..served import APP, flowli
from .conftest import PASSWORD, Tenants, csrf_of, logged_in
from .test_actions import GATED, catalog_status, page_of, run_path

pytestmark = pytest.mark.e2e


def auditor_key(db: str, application: str) -> str:
    made = flowli(db, "--app", APP, "keys", "create", application, "--role", "auditor", "--json")
    assert made.returncode == 0, made.stderr
    return str(json.loads(made.stdout)["apiKey"])


async def test_an_auditor_answers_decisions_from_every_entry_point_and_acts_on_nothing_else(tenants: Tenants):
    url, key, db = tenants.service.url, tenants.billing_key, tenants.service.db
    audit_key = auditor_key(db, tenants.billing)
    auditor = tenants.ann.replace("ann-", "aud-")
    made = flowli(db, "--app", APP, "users", "create", auditor, "--password-stdin", "--role", "auditor",
                  "--app", tenants.billing, stdin=f"{PASSWORD}\n")
    assert made.returncode == 0, made.stderr
    async with PipelinesClient(url, key) as client, Worker(url, key) as worker:
        @worker.handler("Review")
        async def review(job: dict[str, Any]) -> Any:
            return WaitForApproval(output="please look")

        by_key = await client.create({"name": "audit-http", "stages": [{"stageName": "review", "stageHandlerName": "Review"}]})
        by_page = await client.create({"name": "audit-page", "stages": [{"stageName": "review", "stageHandlerName": "Review"}]})
        stage = await until_stage(client, by_key["id"], "review", "WaitingForApproval")
        paged = await until_stage(client, by_page["id"], "review", "WaitingForApproval")

        # HTTP: the auditor's key reads, approves a stage, and may not act on the pipeline
        async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": audit_key}, timeout=30) as http:
            assert (await http.get("/pipelines")).status_code == 200
            cancel = await http.post(f"/pipelines/{by_key['id']}/cancel")
            assert cancel.status_code == 403 and "lacks the capability 'runs:operate'" in cancel.json()["error"]
            created = await http.post("/pipelines", json={"name": "p", "stages": [{"stageName": "s", "stageHandlerName": "H"}]})
            assert created.status_code == 403 and "runs:start" in created.json()["error"]
            approved = await http.post(f"/stages/{stage['id']}/resume", json={"approved": True})
            assert approved.status_code == 204, approved.text
        assert (await until_status(client, by_key["id"], "Completed"))["stages"][0]["status"] == "Completed"

        # the dashboard: the auditor sees the decision, not the actions, and answers it
        async with logged_in(url, auditor) as aud:
            html = (await page_of(aud, by_page["id"])).text
            assert "Your role, auditor, lets you answer decisions, not act on runs." in html
            assert 'aria-label="Approve review"' in html and ">Cancel run</button>" not in html
            assert 'aria-label="Skip review"' not in html
            inbox = (await aud.get("/inbox")).text
            assert 'aria-label="Approve review"' in inbox and "audit-page" in inbox
            refused_cancel = await aud.post(f"{run_path(html)}/act", data={"csrf": csrf_of(html), "action": "cancel"})
            assert refused_cancel.status_code == 403 and "runs:operate" in refused_cancel.text
            r = await aud.post("/inbox/decide", data={"csrf": csrf_of(inbox), "stage": paged["id"], "decision": "approve",
                                                      "application": tenants.billing})
            assert r.status_code == 303, r.text
        assert (await until_status(client, by_page["id"], "Completed"))["stages"][0]["status"] == "Completed"

    # a review (the inbox's other kind of decision), answered by the auditor from the dashboard
    async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}, timeout=30) as api:
        eid = (await api.post("/catalog/runs", json={"workflow_type": "ops.expense",
                                                     "inputs": {"claim": {"id": 9, "amount": 30}}})).json()["workflow_id"]
        async with logged_in(url, auditor) as aud:
            deadline = time.monotonic() + 20
            while "expense 9" not in (inbox := (await aud.get("/inbox")).text):
                assert time.monotonic() < deadline, "the review never reached the inbox"
                await asyncio.sleep(0.05)
            r = await aud.post("/inbox/decide", data={"csrf": csrf_of(inbox), "eid": eid, "decision": "approve",
                                                      "application": tenants.billing})
            assert r.status_code == 303, r.text
        while (done := (await api.get(f"/catalog/runs/{eid}")).json())["status"] != "COMPLETED":
            assert time.monotonic() < deadline + 20, done
            await asyncio.sleep(0.05)
        assert done["output"]["by"] == auditor

    # MCP: the auditor's key reads and answers a remediation gate's question, and may not retry
    async with over_http(url, audit_key) as mcp:
        assert (await call(mcp, "get_workflow_status", workflow_id=eid))["status"] == "COMPLETED"
        text = await refused(mcp, "resolve_workflow", workflow_id=eid, resolution="remediated")
        assert "not remediation_pending" in text and "lacks the capability" not in text  # the decision is its to make
        text = await refused(mcp, "retry_workflow", workflow_id=eid)
        assert "lacks the capability 'runs:operate'" in text


async def test_the_inbox_lists_remediation_gates_beside_stages_and_reviews_and_an_auditor_resolves_one(
        tenants: Tenants, names: Any):
    from tests.catalog.app import fix

    url, key, db = tenants.service.url, tenants.billing_key, tenants.service.db
    auditor = tenants.ann.replace("ann-", "gate-")
    made = flowli(db, "--app", APP, "users", "create", auditor, "--password-stdin", "--role", "auditor",
                  "--app", tenants.billing, stdin=f"{PASSWORD}\n")
    assert made.returncode == 0, made.stderr
    locked = names("locked")
    async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}, timeout=30) as api:
        assert (await api.post("/catalog/compositions", json=GATED)).status_code in (200, 201)
        eid = (await api.post("/catalog/runs", json={"workflow_type": "virtual.gated@1",
                                                     "inputs": {"bucket": locked}})).json()["workflow_id"]
        await catalog_status(api, eid, "remediation_pending")
        async with logged_in(url, tenants.vic) as vic:  # a viewer sees the gate, not the decision
            inbox = (await vic.get("/inbox")).text
            assert f'href="/runs/{eid}"' in inbox and 'aria-label="Deny tag"' not in inbox
        async with logged_in(url, auditor) as aud:
            inbox = (await aud.get("/inbox")).text
            assert 'aria-label="Resolve tag as remediated"' in inbox and 'aria-label="Deny tag"' in inbox
            fix(locked)
            r = await aud.post("/inbox/decide", data={"csrf": csrf_of(inbox), "gate": eid, "decision": "approve",
                                                      "application": tenants.billing})
            assert r.status_code == 303, r.text
            assert (await catalog_status(api, eid, "COMPLETED", "FAILED"))["status"] == "COMPLETED"
            assert "No run waits at a remediation gate." in (await aud.get("/inbox")).text
