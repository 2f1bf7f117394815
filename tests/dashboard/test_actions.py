"""The dashboard's actions over HTTP against a real ``flowli serve``: each is a form with the
session's CSRF token, goes through the pipelines' and the catalog's services with the user as the
actor (checked through the API and in the journal), and is refused to a viewer, to a forged
form and outside the user's applications, with nothing changed. The run page draws the stages
as a DAG and shows sensitive context as ``***``; the other pages (inbox, stuck, workers,
schedules, catalog) read and act in the user's application only."""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

import httpx
import pytest

from flowli.client import PipelinesClient, StageError, WaitForApproval

from ..catalog.test_remediation import gated
from ..http.test_pipelines import Worker, until_stage, until_status
from ..served import application, flowli, rows, serving
from .conftest import PASSWORD, Tenants, csrf_of, logged_in, pipeline

pytestmark = pytest.mark.e2e

DIAMOND = [{"stageName": "load", "stageHandlerName": "Load"},
           {"stageName": "check", "stageHandlerName": "Check", "options": {"dependsOn": ["load"]}},
           {"stageName": "ship", "stageHandlerName": "Ship", "options": {"dependsOn": ["load"]}},
           {"stageName": "bill", "stageHandlerName": "Bill", "options": {"dependsOn": ["check", "ship"]}}]


async def page_of(client: httpx.AsyncClient, pid: int) -> httpx.Response:
    """A pipeline's page at /pipelines/{id} (the browser's: HTML accepted, the session cookie)."""
    r = await client.get(f"/pipelines/{pid}", headers={"Accept": "text/html"}, follow_redirects=True)
    assert r.status_code == 200, r.text
    return r


def run_path(html: str) -> str:
    found = re.search(r'action="(/runs/[^"]+)/act"', html)
    assert found, "the page has no action form"
    return found.group(1)


async def act(client: httpx.AsyncClient, path: str, html: str, **fields: Any) -> httpx.Response:
    return await client.post(f"{path}/act", data={"csrf": csrf_of(html), **fields})


async def api_view(url: str, key: str, pid: int) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}) as api:
        r = await api.get(f"/pipelines/{pid}")
        assert r.status_code == 200, r.text
        return dict(r.json())


async def history(url: str, key: str, pid: int) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}) as api:
        return list((await api.get(f"/pipelines/{pid}/history")).json())


async def test_the_pipeline_page_draws_the_stages_and_hides_sensitive_context(tenants: Tenants):
    url = tenants.service.url
    made = await pipeline(url, tenants.billing_key, stages=DIAMOND, pipelineKeywords=[{"key": "customer", "value": "acme"}],
                          pipelineContextItems=[{"key": "token", "value": "s3cr3t-value", "isSensitive": True},
                                                {"key": "region", "value": "eu-west"}])
    async with logged_in(url, tenants.ann) as ann:
        page = await page_of(ann, made["id"])
        html = page.text
        # the DAG: a node per stage with its status, an edge per dependency, laid out in columns
        nodes = re.findall(r'role="img" aria-label="([^"]+)"', html)
        assert [n.split(":")[0] for n in nodes] == ["load", "check", "ship", "bill"]
        assert nodes[0] == "load: Pending" and nodes[3] == "bill: NotStarted"
        assert html.count('class="edge"') == 4
        xs = {name: int(x) for name, x in re.findall(r'data-node="(\w+)"><title>[^<]*</title><rect x="(\d+)"', html)}
        assert xs["load"] < xs["check"] == xs["ship"] < xs["bill"]
        # the same shape is laid out once: the layout's digest is the same on the next page
        digest = re.search(r'data-layout="(\w+)"', html).group(1)
        assert re.search(r'data-layout="(\w+)"', (await page_of(ann, made["id"])).text).group(1) == digest
        # context and keywords, the sensitive value redacted everywhere on the page
        assert "s3cr3t-value" not in html
        assert re.search(r"token <span class=\"muted\">\(sensitive\)</span></dt><dd>\*\*\*</dd>", html)
        assert "<dd>eu-west</dd>" in html and "<dd>acme</dd>" in html
        # the runs list finds it by keyword and by free text, never by the sensitive value
        for query, found in ({"keyword": "customer:acme"}, True), ({"text": "eu-west"}, True), \
                            ({"text": "s3cr3t"}, False), ({"keyword": "customer:other"}, False):
            listed = await ann.get("/runs", params=query)
            assert listed.status_code == 200
            assert (f">pipeline {made['id']}</a>" in listed.text) is found, query


async def test_an_operator_pauses_resumes_and_cancels_from_the_page_as_themselves(tenants: Tenants):
    url, key = tenants.service.url, tenants.billing_key
    made = await pipeline(url, key)
    async with logged_in(url, tenants.ann) as ann:
        html = (await page_of(ann, made["id"])).text
        path = run_path(html)
        r = await act(ann, path, html, action="pause")
        assert r.status_code == 303 and r.headers["location"].endswith("?done=pause")
        await until_status_api(url, key, made["id"], "Paused")
        html = (await ann.get(r.headers["location"])).text
        assert "Pause requested." in html and ">Resume</button>" in html
        assert (await act(ann, path, html, action="resume")).status_code == 303
        r = await act(ann, path, html, action="cancel")
        assert r.status_code == 303
        assert (await until_status_api(url, key, made["id"], "Cancelled"))["status"] == "Cancelled"
    # each action the page sent is in the pipeline's history with its sender: the user, a person
    senders = [e["actor"] for e in await history(url, key, made["id"])
               if e["kind"] in ("pipeline.paused", "pipeline.resumed", "pipeline.cancelled")]
    assert senders and set(senders) == {f"human:{tenants.ann}"}, senders


async def until_status_api(url: str, key: str, pid: int, status: str) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while True:
        view = await api_view(url, key, pid)
        if view["status"] == status:
            return view
        assert time.monotonic() < deadline, f"pipeline {pid} is {view['status']}, not {status}"
        await asyncio.sleep(0.05)


async def test_a_viewer_a_forged_form_and_another_application_are_refused_and_change_nothing(tenants: Tenants):
    url, key = tenants.service.url, tenants.billing_key
    made = await pipeline(url, key)
    async with logged_in(url, tenants.ann) as ann:
        html = (await page_of(ann, made["id"])).text
        path = run_path(html)
        forged = await ann.post(f"{path}/act", data={"csrf": "not-the-token", "action": "cancel"})
        assert forged.status_code == 403 and "The form expired" in forged.text
        missing = await ann.post(f"{path}/act", data={"action": "cancel"})
        assert missing.status_code == 403
        unknown = await act(ann, path, html, action="explode")
        assert unknown.status_code == 400 and "There is no action &#39;explode&#39;" in unknown.text
    async with logged_in(url, tenants.vic) as vic:
        html = (await page_of(vic, made["id"])).text
        assert "<button" not in html.split("<main>")[1].split("Timeline")[0]  # no action on a viewer's page
        assert "Your role, viewer, lets you look, not act." in html
        refused = await vic.post(f"{path}/act", data={"csrf": csrf_of(html), "action": "cancel"})
        assert refused.status_code == 403 and "runs:operate" in refused.text and "it cannot act on runs" in refused.text
    async with logged_in(url, tenants.sam) as sam:  # an operator of shipping
        assert (await sam.get(path)).status_code == 404
        assert (await sam.get(f"/pipelines/{made['id']}", headers={"Accept": "text/html"})).status_code == 404
        html = (await sam.get("/runs")).text
        other = await sam.post(f"{path}/act", data={"csrf": csrf_of(html), "action": "cancel"})
        assert other.status_code == 404 and "There is no run" in other.text
    view = await api_view(url, key, made["id"])
    assert view["status"] in ("NotStarted", "Running"), view
    assert "human:" not in str(await history(url, key, made["id"]))
    # the API's own route is still the API's for a key
    async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}) as api:
        assert (await api.get(f"/pipelines/{made['id']}")).json()["id"] == made["id"]


async def test_approve_from_the_inbox_and_rerun_a_failed_stage_with_its_warning(tenants: Tenants):
    url, key = tenants.service.url, tenants.billing_key
    calls: dict[str, int] = {}
    async with PipelinesClient(url, key) as client, Worker(url, key) as worker:
        @worker.handler("Review")
        async def review(job: dict[str, Any]) -> Any:
            return WaitForApproval(output="please look")

        @worker.handler("Flaky")
        async def flaky(job: dict[str, Any]) -> Any:
            calls[job["stageName"]] = calls.get(job["stageName"], 0) + 1
            if calls[job["stageName"]] == 1:
                raise RuntimeError("first time fails")
            return "fine"

        waiting = await client.create({"name": "approve-me", "stages": [{"stageName": "review", "stageHandlerName": "Review"}]})
        failing = await client.create({"name": "fails-once", "stages": [{"stageName": "charge", "stageHandlerName": "Flaky"}]})
        stage = await until_stage(client, waiting["id"], "review", "WaitingForApproval")
        await until_status(client, failing["id"], "Failed")
        async with logged_in(url, tenants.ann) as ann:
            inbox = (await ann.get("/inbox")).text
            assert 'aria-label="Approve review"' in inbox and "approve-me" in inbox
            r = await ann.post("/inbox/decide", data={"csrf": csrf_of(inbox), "stage": stage["id"], "decision": "reject",
                                                      "application": tenants.billing})
            assert r.status_code == 400 and "A rejection needs a reason" in r.text
            r = await ann.post("/inbox/decide", data={"csrf": csrf_of(inbox), "stage": stage["id"], "decision": "approve",
                                                      "reason": "looks right", "application": tenants.billing})
            assert r.status_code == 303
            assert (await until_status(client, waiting["id"], "Completed"))["stages"][0]["status"] == "Completed"
            assert f"human:{tenants.ann}" in str(await history(url, key, waiting["id"])), \
                "the approval does not carry the user's provenance"
            # the approver's reason is kept (the pipeline's history) and shown (its page)
            assert "looks right" in str(await history(url, key, waiting["id"]))
            assert "looks right" in (await page_of(ann, waiting["id"])).text
            assert "No stage waits for approval." in (await ann.get("/inbox")).text

            html = (await page_of(ann, failing["id"])).text
            assert "Treat it as replaying side effects, not as automatic compensation." in html
            path = run_path(html)
            sid = next(s["id"] for s in (await client.get(failing["id"]))["stages"])
            unconfirmed = await act(ann, path, html, action="rerun", stage=str(sid))
            assert unconfirmed.status_code == 400 and "replays side effects" in unconfirmed.text
            assert calls == {"charge": 1}
            r = await act(ann, path, html, action="rerun", stage=str(sid), confirm="yes")
            assert r.status_code == 303, r.text
            done = await until_status(client, failing["id"], "Completed")
            assert done["stages"][0]["output"] == "fine" and calls == {"charge": 2}


async def test_schedules_workers_stuck_and_catalog_pages(tenants: Tenants):
    url, key = tenants.service.url, tenants.billing_key
    async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}) as api:
        made = (await api.post("/schedules", json={"name": "nightly <b>", "intervalSeconds": 3600, "pipeline": {
            "name": "nightly", "stages": [{"stageName": "load", "stageHandlerName": "Load"}]}})).json()
        boot = (await api.post("/workers/bootstrap", json={"workerName": "billing-worker-1", "supportedHandlers": ["Load"],
                                                           "hostName": "box-7"})).json()
        assert "workerSessionToken" in boot, boot
    async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}) as api:
        started = await api.post("/catalog/runs", json={"workflow_type": "ops.await_clerk", "inputs": {"note": "n"}})
        assert started.status_code in (200, 201, 202), started.text
        waiting_eid = started.json()["workflow_id"]
    async with logged_in(url, tenants.ann) as ann:
        page = await ann.get("/schedules", headers={"Accept": "text/html"})
        assert page.status_code == 200 and "nightly &lt;b&gt;" in page.text
        r = await ann.post(f"/schedules/{made['id']}/state", data={"csrf": csrf_of(page.text), "action": "pause",
                                                                   "application": tenants.billing})
        assert r.status_code == 303
        async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}) as api:
            assert (await api.get(f"/schedules/{made['id']}")).json()["state"] == "paused"
        assert 'aria-label="Resume nightly &lt;b&gt;"' in (await ann.get("/schedules", headers={"Accept": "text/html"})).text

        workers = await ann.get("/workers", headers={"Accept": "text/html"})
        assert workers.status_code == 200 and "billing-worker-1" in workers.text and "box-7" in workers.text

        stuck = await ann.get("/stuck", params={"older_than": "0"})
        assert stuck.status_code == 200
        assert re.findall(r'name="eid" value="([^"]+)"', stuck.text) == [waiting_eid]
        eid = waiting_eid
        assert "Its guards: the run must still be idle for 0 s, hold no live lease" in stuck.text
        unconfirmed = await ann.post("/stuck/terminate", data={"csrf": csrf_of(stuck.text), "eid": eid, "reason": "gone",
                                                               "min_idle": "0", "application": tenants.billing})
        assert unconfirmed.status_code == 400 and "names the guards" in unconfirmed.text
        r = await ann.post("/stuck/terminate", data={"csrf": csrf_of(stuck.text), "eid": eid, "reason": "gone",
                                                     "min_idle": "0", "application": tenants.billing, "confirm": "yes"})
        assert r.status_code == 303, r.text
        async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}) as api:
            assert (await api.get(f"/catalog/runs/{eid}")).json()["status"] == "FAILED"

        catalog = await ann.get("/catalog", headers={"Accept": "text/html"})
        assert catalog.status_code == 200 and "<h2>aws.s3</h2>" in catalog.text and ">ops.await_clerk</a>" in catalog.text
        one = await ann.get("/catalog", params={"type": "aws.s3.create_bucket"}, headers={"Accept": "text/html"})
        assert one.status_code == 200 and "input_schema" in one.text
        assert 'aria-label="aws.s3.create_bucket: unknown"' in one.text  # its DAG: one step
        bad = await ann.get("/catalog", params={"type": "no.such.type<i>"}, headers={"Accept": "text/html"})
        assert bad.status_code in (404, 409) and "<i>" not in bad.text
    async with logged_in(url, tenants.sam) as sam:  # shipping sees none of billing's
        assert "nightly" not in (await sam.get("/schedules", headers={"Accept": "text/html"})).text
        assert "billing-worker-1" not in (await sam.get("/workers", headers={"Accept": "text/html"})).text
    async with logged_in(url, tenants.vic) as vic:
        page = await vic.get("/schedules", headers={"Accept": "text/html"})
        assert "<button type=\"submit\" name=\"action\"" not in page.text
        r = await vic.post(f"/schedules/{made['id']}/state", data={"csrf": csrf_of(page.text), "action": "resume",
                                                                   "application": tenants.billing})
        assert r.status_code == 403
    async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}) as api:
        assert (await api.get(f"/schedules/{made['id']}")).json()["state"] == "paused"


async def test_a_failed_python_run_is_retried_from_its_page(tenants: Tenants, names):
    from tests.catalog.app import fix

    url, key, db = tenants.service.url, tenants.billing_key, names("db")
    async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}) as api:
        started = (await api.post("/catalog/runs", json={"workflow_type": "ops.flaky", "inputs": {"name": db}})).json()
        eid = started["workflow_id"]
        deadline = time.monotonic() + 20
        while (await api.get(f"/catalog/runs/{eid}")).json()["status"] != "FAILED":
            assert time.monotonic() < deadline, "the run never failed"
            await asyncio.sleep(0.05)
        async with logged_in(url, tenants.ann) as ann:
            html = (await ann.get(f"/runs/{eid}")).text
            assert ">Retry run</button>" in html and f"{db} is down" in html
            fix(db)
            r = await act(ann, f"/runs/{eid}", html, action="retry")
            assert r.status_code == 303, r.text
            while (await api.get(f"/catalog/runs/{eid}")).json()["status"] != "COMPLETED":
                assert time.monotonic() < deadline + 20, "the retried run never completed"
                await asyncio.sleep(0.05)
            again = await act(ann, f"/runs/{eid}", html, action="retry")  # completed now: refused, said why
            assert again.status_code == 409 and "only a FAILED run can be retried" in again.text
        journal = (await api.get(f"/catalog/runs/{eid}/history")).json()
        assert f"human:{tenants.ann}" in str(journal)


async def test_a_refused_late_result_is_an_entry_of_the_timeline_and_attempts_filter_it(tenants: Tenants):
    url, key = tenants.service.url, tenants.billing_key
    made = await pipeline(url, key, name="late-one", stages=[{"stageName": "load", "stageHandlerName": "Load"}])
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        boot = (await http.post("/workers/bootstrap", headers={"X-API-Key": key}, json={
            "workerName": "raw", "supportedHandlers": ["Load"]})).json()
        s = {"X-Worker-Session": boot["workerSessionToken"]}
        job = (await http.post("/jobs/pull", headers=s, json={"waitSeconds": 5})).json()
        lease = {"executionId": job["executionId"], "workerId": boot["workerId"]}
        assert (await http.post(f"/stages/{job['stageId']}/lease/acquire", headers=s, json=lease)).json()["acquired"]
        second = None
        for _ in range(3):  # the lease (3 s) expires unrenewed: attempt 2 comes
            r = await http.post("/jobs/pull", headers=s, json={"waitSeconds": 10})
            if r.status_code == 200:
                second = r.json()
                break
        assert second is not None and second["attempt"] == 2
        late = await http.post(f"/stages/{job['stageId']}/result", headers=s, json={
            "executionId": job["executionId"], "attempt": 1, "isSuccess": True, "output": "late"})
        assert late.status_code == 409
    async with logged_in(url, tenants.ann) as ann:
        page = (await page_of(ann, made["id"])).text
        assert "<td>result.refused</td>" in page and job["executionId"] in page
        path = run_path(page)
        first = (await ann.get(path, params={"attempt": "1"})).text
        kinds = re.findall(r"<td>([a-z]+\.[a-z_]+)</td>", first)
        assert "result.refused" in kinds
        assert "<td>stage.dispatched</td>" in page  # the pipeline's events, in its own words
        assert (await ann.get(path, params={"attempt": "2", "kind": "result.refused"})).text.count("<td>result.refused</td>") == 0
        assert (await ann.get(path, params={"attempt": "two"})).status_code == 400


async def test_serve_open_needs_no_login_from_this_machine_only(tmp_path):
    # a server of its own: --open
    async with serving("sqlite", tmp_path, "--open") as svc:
        _, key, _ = await application(svc.db, "billing")
        made = await pipeline(svc.url, key)
        async with httpx.AsyncClient(base_url=svc.url, timeout=30) as local:
            runs = await local.get("/runs")
            assert runs.status_code == 200 and "localhost · admin" in runs.text
            relayed = await local.get("/runs", headers={"X-Forwarded-For": "203.0.113.9"})
            assert relayed.status_code == 303 and relayed.headers["location"] == "/login"
            html = (await local.get(f"/pipelines/{made['id']}", headers={"Accept": "text/html"})).text
            r = await local.post(f"{run_path(html)}/act", data={"csrf": csrf_of(html), "action": "pause"})
            assert r.status_code == 303
        await until_status_api(svc.url, key, made["id"], "Paused")
        assert "human:localhost" in str(await history(svc.url, key, made["id"]))
    refused = flowli(f"sqlite:///{tmp_path / 'other.db'}", "serve", "--open", "--host", "0.0.0.0", "--port", "0")
    assert refused.returncode != 0 and "--open skips the dashboard's login" in refused.stderr


GATED = gated()
"""A composition whose tag step parks at a remediation gate for a bucket named locked-..."""


async def catalog_status(api: httpx.AsyncClient, eid: str, *wanted: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        status = (await api.get(f"/catalog/runs/{eid}")).json()
        if status["status"] in wanted:
            return dict(status)
        assert time.monotonic() < deadline, f"run {eid} is {status['status']}, not {wanted}"
        await asyncio.sleep(0.05)


async def test_a_composition_is_drawn_and_its_remediation_gate_is_resolved_from_the_run_page(tenants: Tenants, names):
    from tests.catalog.app import fix

    url, key, locked = tenants.service.url, tenants.billing_key, names("locked")
    async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}, timeout=30) as api:
        saved = await api.post("/catalog/compositions", json=GATED)
        assert saved.status_code == 201, saved.text
        async with logged_in(url, tenants.ann) as ann:
            drawn = (await ann.get("/catalog", params={"type": "virtual.gated@1"}, headers={"Accept": "text/html"})).text
            assert re.findall(r'role="img" aria-label="([^"]+)"', drawn) == ["create: unknown", "version: unknown", "tag: unknown"]
            assert drawn.count('class="edge"') == 2  # create before version and tag
            started = (await api.post("/catalog/runs", json={"workflow_type": "virtual.gated@1",
                                                             "inputs": {"bucket": locked}})).json()
            eid = started["workflow_id"]
            await catalog_status(api, eid, "remediation_pending")
            html = (await ann.get(f"/runs/{eid}")).text
            steps = re.findall(r'role="img" aria-label="([^"]+)"', html)
            assert steps == ["create: COMPLETED", "version: COMPLETED", "tag: remediation_pending"], steps
            assert "Step <code>tag</code> waits at a remediation gate." in html and ">Resolve as remediated</button>" in html
            fix(locked)
            r = await act(ann, f"/runs/{eid}", html, action="remediated")
            assert r.status_code == 303, r.text
            assert (await catalog_status(api, eid, "COMPLETED", "FAILED"))["status"] == "COMPLETED"
            again = await act(ann, f"/runs/{eid}", html, action="remediated")
            assert again.status_code == 409 and "not remediation_pending" in again.text
            # the resolution is received with its sender: the user
            assert f"&#34;by&#34;: &#34;human:{tenants.ann}&#34;" in (await ann.get(f"/runs/{eid}")).text


async def test_an_open_review_is_answered_from_the_inbox_with_the_users_provenance(tenants: Tenants):
    url, key = tenants.service.url, tenants.billing_key
    async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}, timeout=30) as api:
        eid = (await api.post("/catalog/runs", json={"workflow_type": "ops.expense",
                                                     "inputs": {"claim": {"id": 7, "amount": 120}}})).json()["workflow_id"]
        async with logged_in(url, tenants.ann) as ann:
            deadline = time.monotonic() + 20
            while "expense 7" not in (inbox := (await ann.get("/inbox")).text):
                assert time.monotonic() < deadline, "the review never reached the inbox"
                await asyncio.sleep(0.05)
            assert 'aria-label="Approve expense 7"' in inbox and "&#34;amount&#34;: 120" in inbox
            async with logged_in(url, tenants.sam) as sam:  # shipping's operator sees none of it
                assert "expense 7" not in (await sam.get("/inbox")).text
                r = await sam.post("/inbox/decide", data={"csrf": csrf_of((await sam.get("/inbox")).text), "eid": eid,
                                                          "decision": "approve", "application": tenants.billing})
                assert r.status_code == 404 and f"There is no application {tenants.billing} among yours." in r.text
            assert (await catalog_status(api, eid, "PENDING", "RUNNING", "SUSPENDED"))
            r = await ann.post("/inbox/decide", data={"csrf": csrf_of(inbox), "eid": eid, "decision": "approve",
                                                      "reason": "within budget", "application": tenants.billing})
            assert r.status_code == 303
            done = await catalog_status(api, eid, "COMPLETED")
            assert done["output"] == {"paid": True, "by": tenants.ann, "reason": "within budget"}
            assert "No review is open." in (await ann.get("/inbox")).text


async def test_a_dag_past_its_cap_asks_for_a_subset_and_draws_it(tenants: Tenants):
    url, key = tenants.service.url, tenants.billing_key
    stages = [{"stageName": f"s{i:03}", "stageHandlerName": "H"} for i in range(301)]
    made = await pipeline(url, key, name="wide", stages=stages)
    async with logged_in(url, tenants.ann) as ann:
        html = (await page_of(ann, made["id"])).text
        assert "301 nodes: the graph draws at most 300; narrow the stages shown" in html
        assert 'role="img"' not in html and "Draw the stages whose name holds" in html
        some = (await ann.get(run_path(html), params={"stages": "s29"})).text
        assert re.findall(r'role="img" aria-label="(\w+):', some) == [f"s29{i}" for i in range(10)]
        assert "10 drawn" in some


async def test_an_expired_session_is_sent_to_the_login_and_its_forms_change_nothing(tenants: Tenants):
    url, key, db = tenants.service.url, tenants.billing_key, tenants.service.db
    made = await pipeline(url, key)
    async with logged_in(url, tenants.ann) as ann:
        html = (await page_of(ann, made["id"])).text
        [(item, body)] = [(i, b) for i, b in await rows(db, "SELECT id, body FROM items WHERE kind = ?", "dashboard-session")
                          if json.loads(b)["email"] == tenants.ann]
        expired = {**json.loads(body), "expires": time.time() - 1}
        await rows(db, "UPDATE items SET body = ? WHERE id = ?", json.dumps(expired), item)
        page = await ann.get("/runs")
        assert page.status_code == 303 and page.headers["location"] == "/login"
        r = await ann.post(f"{run_path(html)}/act", data={"csrf": csrf_of(html), "action": "cancel"})
        assert r.status_code == 303 and r.headers["location"] == "/login"
        events = await ann.get(f"{run_path(html)}/events")
        assert events.status_code == 303
    assert "human:" not in str(await history(url, key, made["id"]))


async def test_a_user_with_a_role_the_application_declares_acts_by_its_capabilities(tenants: Tenants):
    url, key, db = tenants.service.url, tenants.billing_key, tenants.service.db
    made = await pipeline(url, key, name="audited")
    auditor = tenants.ann.replace("ann-", "aud-")
    # the CLI given the application knows its roles (``tests.dashboard.app`` declares auditor)
    created = flowli(db, "--app", "tests.dashboard.app:registry", "users", "create", auditor, "--password-stdin",
                     "--role", "auditor", "--app", tenants.billing, stdin=f"{PASSWORD}\n")
    assert created.returncode == 0, created.stderr
    assert f"user {auditor} (auditor) sees {tenants.billing}" in created.stdout
    async with logged_in(url, tenants.ann) as ann:  # an operator's page has the run's action form
        path = run_path((await page_of(ann, made["id"])).text)
    async with logged_in(url, auditor) as aud:
        html = (await page_of(aud, made["id"])).text
        # its role answers decisions (none waits here) and acts on nothing: no action's button
        assert "Your role, auditor, lets you answer decisions, not act on runs." in html
        assert "<button" not in html.split("<main>")[1].split("Timeline")[0]
        refused = await aud.post(f"{path}/act", data={"csrf": csrf_of(html), "action": "cancel"})
        assert refused.status_code == 403 and "runs:operate" in refused.text
        assert (await aud.get("/runs")).status_code == 200
    view = await api_view(url, key, made["id"])
    assert view["status"] in ("NotStarted", "Running"), view


async def test_a_failed_stage_is_skipped_from_the_page_and_its_pipeline_goes_on(tenants: Tenants):
    url, key = tenants.service.url, tenants.billing_key
    async with PipelinesClient(url, key) as client, Worker(url, key) as worker:
        @worker.handler("Strict")
        async def strict(job: dict[str, Any]) -> Any:
            if job["stageName"] == "check":
                raise StageError("VALIDATION_ERROR", "bad data")
            return "shipped"

        made = await client.create({"name": "skip-me", "stages": [
            {"stageName": "check", "stageHandlerName": "Strict"}, {"stageName": "ship", "stageHandlerName": "Strict"}]})
        failed = await until_status(client, made["id"], "Failed")
        async with logged_in(url, tenants.ann) as ann:
            html = (await page_of(ann, made["id"])).text
            assert 'aria-label="Skip check"' in html and 'aria-label="Skip ship"' not in html  # the failed one only
            r = await act(ann, run_path(html), html, action="skip", stage=str(failed["stages"][0]["id"]))
            assert r.status_code == 303, r.text
        done = await until_status(client, made["id"], "Completed")
        assert [(s["status"], s["output"]) for s in done["stages"]] == [("Skipped", None), ("Completed", "shipped")]
        assert f"human:{tenants.ann}" in str(await history(url, key, made["id"]))
