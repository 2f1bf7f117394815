"""The dashboard's actions over HTTP against a real ``flowli serve``: each is a form with the
session's CSRF token, goes through the pipelines' and the catalog's services with the user as the
actor (checked through the API and in the journal), and is refused to a viewer, to a forged
form and outside the user's applications, with nothing changed. The run page draws the stages
as a DAG and shows sensitive context as ``***``; the other pages (inbox, stuck, workers,
schedules, catalog) read and act in the user's application only."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import httpx

from flowli.client import PipelinesClient, WaitForApproval

from ..http.test_pipelines import Worker, until_stage, until_status
from .conftest import Tenants, csrf_of, logged_in, pipeline

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
    async with logged_in(url, "ann@example.com") as ann:
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
            assert (f"pipeline {made['name']}" in listed.text) is found, query


async def test_an_operator_pauses_resumes_and_cancels_from_the_page_as_themselves(tenants: Tenants):
    url, key = tenants.service.url, tenants.billing_key
    made = await pipeline(url, key)
    async with logged_in(url, "ann@example.com") as ann:
        html = (await page_of(ann, made["id"])).text
        path = run_path(html)
        r = await act(ann, path, html, action="pause")
        assert r.status_code == 303 and r.headers["location"].endswith("?done=pause")
        deadline = time.monotonic() + 10
        while (await api_view(url, key, made["id"]))["status"] != "Paused":
            assert time.monotonic() < deadline, "the pipeline never paused"
            await asyncio.sleep(0.05)
        html = (await ann.get(r.headers["location"])).text
        assert "Pause requested." in html and ">Resume</button>" in html
        assert (await act(ann, path, html, action="resume")).status_code == 303
        r = await act(ann, path, html, action="cancel")
        assert r.status_code == 303
        assert (await until_status_api(url, key, made["id"], "Cancelled"))["status"] == "Cancelled"
    # each message the page sent is received with its sender: the user, a person
    senders = [e["value"]["by"] for e in await history(url, key, made["id"])
               if e["kind"] == "frame.completed" and isinstance(e["value"], dict) and "payload" in e["value"]]
    assert senders and set(senders) == {"human:ann@example.com"}, senders


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
    async with logged_in(url, "ann@example.com") as ann:
        html = (await page_of(ann, made["id"])).text
        path = run_path(html)
        forged = await ann.post(f"{path}/act", data={"csrf": "not-the-token", "action": "cancel"})
        assert forged.status_code == 403 and "The form expired" in forged.text
        missing = await ann.post(f"{path}/act", data={"action": "cancel"})
        assert missing.status_code == 403
        unknown = await act(ann, path, html, action="explode")
        assert unknown.status_code == 400 and "There is no action &#39;explode&#39;" in unknown.text
    async with logged_in(url, "vic@example.com") as vic:
        html = (await page_of(vic, made["id"])).text
        assert "<button" not in html.split("<main>")[1].split("Timeline")[0]  # no action on a viewer's page
        assert "You are a viewer: you can look, not act." in html
        refused = await vic.post(f"{path}/act", data={"csrf": csrf_of(html), "action": "cancel"})
        assert refused.status_code == 403 and "a viewer cannot act" in refused.text
    async with logged_in(url, "sam@example.com") as sam:  # an operator of shipping
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
        async with logged_in(url, "ann@example.com") as ann:
            inbox = (await ann.get("/inbox")).text
            assert 'aria-label="Approve review"' in inbox and "approve-me" in inbox
            r = await ann.post("/inbox/decide", data={"csrf": csrf_of(inbox), "stage": stage["id"], "decision": "reject",
                                                      "application": "billing"})
            assert r.status_code == 400 and "A rejection needs a reason" in r.text
            r = await ann.post("/inbox/decide", data={"csrf": csrf_of(inbox), "stage": stage["id"], "decision": "approve",
                                                      "reason": "looks right", "application": "billing"})
            assert r.status_code == 303
            assert (await until_status(client, waiting["id"], "Completed"))["stages"][0]["status"] == "Completed"
            assert "human:ann@example.com" in str(await history(url, key, waiting["id"])), \
                "the approval does not carry the user's provenance"
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
    async with logged_in(url, "ann@example.com") as ann:
        page = await ann.get("/schedules", headers={"Accept": "text/html"})
        assert page.status_code == 200 and "nightly &lt;b&gt;" in page.text
        r = await ann.post(f"/schedules/{made['id']}/state", data={"csrf": csrf_of(page.text), "action": "pause",
                                                                   "application": "billing"})
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
                                                               "min_idle": "0", "application": "billing"})
        assert unconfirmed.status_code == 400 and "names the guards" in unconfirmed.text
        r = await ann.post("/stuck/terminate", data={"csrf": csrf_of(stuck.text), "eid": eid, "reason": "gone",
                                                     "min_idle": "0", "application": "billing", "confirm": "yes"})
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
    async with logged_in(url, "sam@example.com") as sam:  # shipping sees none of billing's
        assert "nightly" not in (await sam.get("/schedules", headers={"Accept": "text/html"})).text
        assert "billing-worker-1" not in (await sam.get("/workers", headers={"Accept": "text/html"})).text
    async with logged_in(url, "vic@example.com") as vic:
        page = await vic.get("/schedules", headers={"Accept": "text/html"})
        assert "<button type=\"submit\" name=\"action\"" not in page.text
        r = await vic.post(f"/schedules/{made['id']}/state", data={"csrf": csrf_of(page.text), "action": "resume",
                                                                   "application": "billing"})
        assert r.status_code == 403
    async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}) as api:
        assert (await api.get(f"/schedules/{made['id']}")).json()["state"] == "paused"


async def test_a_failed_python_run_is_retried_from_its_page(tenants: Tenants):
    from tests.catalog.app import fix

    url, key = tenants.service.url, tenants.billing_key
    async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}) as api:
        started = (await api.post("/catalog/runs", json={"workflow_type": "ops.flaky", "inputs": {"name": "db"}})).json()
        eid = started["workflow_id"]
        deadline = time.monotonic() + 20
        while (await api.get(f"/catalog/runs/{eid}")).json()["status"] != "FAILED":
            assert time.monotonic() < deadline, "the run never failed"
            await asyncio.sleep(0.05)
        async with logged_in(url, "ann@example.com") as ann:
            html = (await ann.get(f"/runs/{eid}")).text
            assert ">Retry run</button>" in html and "db is down" in html
            fix("db")
            r = await act(ann, f"/runs/{eid}", html, action="retry")
            assert r.status_code == 303, r.text
            while (await api.get(f"/catalog/runs/{eid}")).json()["status"] != "COMPLETED":
                assert time.monotonic() < deadline + 20, "the retried run never completed"
                await asyncio.sleep(0.05)
            again = await act(ann, f"/runs/{eid}", html, action="retry")  # completed now: refused, said why
            assert again.status_code == 409 and "only a FAILED run can be retried" in again.text
        journal = (await api.get(f"/catalog/runs/{eid}/history")).json()
        assert "human:ann@example.com" in str(journal)
