"""The proof of redaction: one secret, sent every way a value can enter a pipeline (its create,
legacy and idempotent; a schedule's pipeline, fired; a worker's result that marks it sensitive and
appends stages; an update of the same key without the flag; deletion markers that carry it; a
rejection reason that quotes it), never shows in any answer of a GET route, dashboard page or live
event, MCP tool result or prompt, CLI output, log line or span of the server. Only the jobs that
``POST /jobs/pull`` hands to the application's worker carry it: that worker must see it."""

from __future__ import annotations

import asyncio
import json
import os
import re
import textwrap
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest

from ..assistants.test_mcp import over_http
from ..dashboard.conftest import logged_in
from ..served import PASSWORD, application, clerk, flowli, log_checked, serving
from .test_redaction import RawWorker, context_of, eid_of, until_stage

pytestmark = pytest.mark.e2e

HANDLER, IDLE = "ProofHandler", "NobodyServesThis"

SITECUSTOMIZE = textwrap.dedent('''
    """In the flowli serve process of a test: OpenTelemetry, each span whole a JSON line in a file,
    and flowli's loggers at DEBUG on stderr (the server's log file)."""
    import logging
    import os
    import sys

    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(
        out=open(os.environ["FLOWLI_TEST_SPANS"], "a"), formatter=lambda span: span.to_json(indent=None) + "\\n")))
    trace.set_tracer_provider(provider)
    logging.getLogger("flowli").addHandler(logging.StreamHandler(sys.stderr))
    logging.getLogger("flowli").setLevel(logging.DEBUG)
''')


def declared(name: str, handler: str, secret: str) -> dict[str, Any]:
    return {"name": name, "stages": [{"stageName": "load", "stageHandlerName": handler, "input": "{}"},
                                     {"stageName": "approve", "stageHandlerName": handler, "input": "{}"}],
            "pipelineContextItems": [{"key": "accessToken", "value": secret, "isSensitive": True},
                                     {"key": "region", "value": "eu"}]}


async def until(check: Any, what: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := await check()):
        assert time.monotonic() < deadline, f"{what} did not happen"
        await asyncio.sleep(0.1)
    return found


async def test_one_secret_sent_every_way_never_shows_outside_the_jobs_that_need_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = f"sentinel-{uuid.uuid4().hex}"
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    spans = tmp_path / "spans.jsonl"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p))
    monkeypatch.setenv("FLOWLI_TEST_SPANS", str(spans))
    shown: list[str] = []  # everything the test was shown, but the jobs
    jobs: list[dict[str, Any]] = []

    # a server of its own: OpenTelemetry is configured in its process (its spans are read), and its
    # log holds this test's lines only. Redaction does not depend on the backend: SQLite.
    async with serving("sqlite", tmp_path) as svc:
        app = "vault"
        _, key, (viewer,) = await application(svc.db, app, ("viewer", "looker"))
        admin_email = "root@example.com"
        async with clerk(svc.db) as apps:
            await apps.create_user(admin_email, PASSWORD, "admin", [app])
        with log_checked(svc):
            async with httpx.AsyncClient(base_url=svc.url, headers={"X-API-Key": key}, timeout=30) as http:
                def answer(r: httpx.Response, *ok: int) -> Any:
                    assert r.status_code in (ok or (200,)), r.text
                    shown.append(r.text)
                    return r.json() if r.content else None

                # the create, legacy and idempotent (twice: the second answers the existing one)
                made = answer(await http.post("/pipelines", json=declared("proof", HANDLER, secret)))
                idem = {**declared("idle", IDLE, secret), "idempotencyKey": "proof-1"}
                again = answer(await http.post("/pipelines/idempotent", json=idem), 201)["pipeline"]
                answer(await http.post("/pipelines/idempotent", json=idem), 200)
                # a schedule's pipeline, fired once
                at = (datetime.now(timezone.utc) + timedelta(seconds=1)).isoformat()
                sid = answer(await http.post("/schedules", json={
                    "name": "soon", "runAt": at, "pipeline": declared("scheduled", IDLE, secret)}), 201)["id"]

                async def fired() -> bool:
                    return bool((await http.get(f"/schedules/{sid}")).json()["firings"] == 1)

                await until(fired, "the schedule's firing")
                scheduled = await until(lambda: _named(http, "scheduled"), "the scheduled pipeline")
                policy = answer(await http.post("/policies", json={
                    "name": "retry-nothing", "type": "retry", "targeting": {"stageNames": ["no-such-stage"]},
                    "rules": {"maxRetries": 1, "intervalSeconds": 1, "backoffMultiplier": 1}}), 201)

                # the worker: a result marks it sensitive under a new key, updates the old key without
                # the flag and appends a stage; the next carries it in deletion markers
                worker = await RawWorker(http, key, [HANDLER], seen=shown).start()  # its answers but the jobs
                job = await worker.job()
                jobs.append(job)
                await worker.result(job, contextItems=[
                    {"key": "apiKey", "value": secret, "isSensitive": True},
                    {"key": "accessToken", "value": secret}],
                    appendStages=[{"stageName": "appended", "stageHandlerName": HANDLER, "input": "{}"}])
                job = await worker.job()
                jobs.append(job)
                assert job["stageName"] == "approve"
                await worker.result(job, isWaitingForApproval=True, contextItems=[
                    {"key": "apiKey", "value": secret, "isDeleted": True},
                    {"key": "dbPassword", "value": secret, "isSensitive": True, "isDeleted": True}])
                view = await until_stage(http, made["id"], "approve", "WaitingForApproval")
                approve = next(s for s in view["stages"] if s["name"] == "approve")
                # a rejection whose reason quotes it: the pipeline's sensitive values are masked in it
                answer(await http.post(f"/stages/{approve['id']}/resume", json={
                    "approved": False, "rejectionReason": f"the token {secret} was revoked"}), 204)
                failed = await until_stage(http, made["id"], "approve", "Failed")
                assert next(s for s in failed["stages"] if s["name"] == "approve")["errorMessage"] == \
                    "the token *** was revoked"

                # every GET route of the API, with each id the test made, as the admin and as a viewer
                pids = [made["id"], again["id"], scheduled["id"]]
                eids = [await eid_of(svc, pid) for pid in pids]
                views = [(await http.get(f"/pipelines/{pid}")).json() for pid in pids]
                types = [t["name"] for t in (await http.get("/catalog/types")).json()["types"]][:3]
                ids = {"pipeline_id": pids, "schedule_id": [sid], "policy_id": [policy["id"]], "workflow_id": eids,
                       "stage_id": [s["id"] for v in views for s in v["stages"]], "name": types}
                paths = [p for p, ops in (await http.get("/openapi.json")).json()["paths"].items() if "get" in ops]
                visited = set()
                for who in (key, viewer):
                    for path in paths:
                        for url in _urls(path, ids):
                            r = await http.get(url, headers={"X-API-Key": who},
                                               params={"include_state_data": "true"} if "history" in url else None)
                            assert r.status_code < 500, (url, r.text)
                            shown.append(r.text)
                            visited.add(path)
                assert visited == set(paths)
                shown.append((await http.get("/metrics")).text)  # not in the OpenAPI document
                assert any('"***"' in text for text in shown)  # the values were there, redacted

            # the MCP server, with the official client
            async with over_http(svc.url, key) as client:
                for eid in eids:
                    for tool, args in (("get_workflow_history", {"include_state_data": True}), ("get_workflow_history", {}),
                                       ("get_workflow_status", {}), ("watch_workflow", {"timeout_seconds": 1})):
                        shown.append((await client.call_tool(tool, {"workflow_id": eid, **args})).model_dump_json())
                    prompt = await client.get_prompt("diagnose_workflow_run", {"workflow_id": eid})
                    shown.append(prompt.model_dump_json())
                for tool, args in (("list_workflows", {}), ("list_stuck_workflows", {"older_than_seconds": 0})):
                    shown.append((await client.call_tool(tool, args)).model_dump_json())

            # the dashboard, as an admin: its pages and a run's live events
            async with logged_in(svc.url, admin_email) as page:
                for url in ["/runs", "/inbox", "/stuck", f"/schedules?application={app}", "/catalog", "/workers",
                            *[f"/runs/{eid}" for eid in eids], *[f"/pipelines/{pid}" for pid in pids],
                            *[f"/runs/{eid}?kind=frame.completed" for eid in eids]]:
                    r = await page.get(url)
                    assert r.status_code == 200, (url, r.text[-2000:])
                    shown.append(r.text)
                # the pipeline that failed is terminal: its stream sends every entry, then ends
                async with page.stream("GET", f"/runs/{eids[0]}/events", params={"after": 0}) as events:
                    text = "".join([chunk async for chunk in events.aiter_text()])
                assert "event: entry" in text and "event: end" in text
                shown.append(text)

            # the CLI
            for args in [("ls",), ("stuck", "--older-than", "0"), ("schedules", "ls", app), ("inbox",),
                         *[("show", eid) for eid in eids], *[("explain", eid) for eid in eids]]:
                done = flowli(svc.db, *args)
                assert done.returncode == 0, (args, done.stderr)
                shown.append(done.stdout + done.stderr)
    logs = svc.logs()

    # the jobs are the one answer that carries it: the application's worker must see the value
    assert [context_of(j)["accessToken"] for j in jobs] == [secret, secret]
    assert spans.read_text().count("\n") > 10  # the server traced the runs
    for where, text in [*(("answer", t) for t in shown), ("the server's log", logs), ("a span", spans.read_text())]:
        assert secret not in text, f"the secret shows in {where}: {text[max(0, text.find(secret) - 300):][:600]}"
    assert json.dumps(views).count('"***"') >= 3


async def _named(http: httpx.AsyncClient, name: str) -> dict[str, Any] | None:
    found = (await http.get("/pipelines", params={"name": name})).json()["items"]
    return found[0] if found else None


def _urls(path: str, ids: dict[str, list[Any]]) -> list[str]:
    """``path`` with each id of its parameter (a path has one at most)."""
    params = re.findall(r"{(\w+)}", path)
    if not params:
        return [path]
    assert len(params) == 1, path
    return [path.replace(f"{{{params[0]}}}", str(v)) for v in ids[params[0]]]
