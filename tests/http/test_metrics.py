"""Prometheus metrics after a known workload, read with ``prometheus_client.parser``: ``GET
/metrics`` on a real ``flowli serve`` (from this machine only), and ``flowli worker
--metrics-port``."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from flowli.client import PipelinesClient, StageError

from .. import forked
from ..served import application, serving
from .test_pipelines import Worker, until_status

pytestmark = pytest.mark.e2e

APP = "tests.catalog.app:registry"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(found: dict[tuple[str, tuple[tuple[str, str], ...]], float], metric: str, **labels: str) -> float:
    return found.get((metric, tuple(sorted(labels.items()))), 0.0)


async def finished(api: httpx.AsyncClient, eid: str) -> str:
    for _ in range(400):
        status = (await api.get(f"/catalog/runs/{eid}")).json()["status"]
        if status in ("COMPLETED", "FAILED"):
            return str(status)
        await asyncio.sleep(0.05)
    raise AssertionError(f"{eid} never finished")


async def test_serve_metrics_count_a_known_workload(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWLI_TEST_EFFECTS", str(tmp_path / "effects"))
    # a server of its own: its counters count this test's workload from zero
    async with serving("sqlite", tmp_path, "--app", APP) as svc:
        _, key, _ = await application(svc.db, "billing")
        async with httpx.AsyncClient(base_url=svc.url, headers={"X-API-Key": key}, timeout=30) as api:
            ok = (await api.post("/catalog/runs", json={"workflow_type": "aws.s3.create_bucket",
                                                         "inputs": {"bucket": "b1"}})).json()["workflow_id"]
            bad = (await api.post("/catalog/runs", json={"workflow_type": "ops.flaky",
                                                          "inputs": {"name": "db"}})).json()["workflow_id"]
            assert await finished(api, ok) == "COMPLETED" and await finished(api, bad) == "FAILED"
            made = await api.post("/pipelines", json={"name": "waits", "stages": [
                {"stageName": "load", "stageHandlerName": "Load"}]})  # no worker serves Load: it waits
            booted = await api.post("/workers/bootstrap", json={"workerName": "w", "supportedHandlers": ["Ship"]})
            assert booted.status_code == 200, booted.text  # a live application worker of another handler
            assert made.status_code in (200, 201)
            for _ in range(200):
                found = samples((await api.get("/metrics")).text)
                if value(found, "flowli_queue_depth", queue="pipelines:billing:Load") == 1:
                    break
                await asyncio.sleep(0.05)
            relayed = await api.get("/metrics", headers={"X-Forwarded-For": "203.0.113.9"})
        assert relayed.status_code == 403 and "from this machine only" in relayed.json()["error"]
    assert value(found, "flowli_executions_started_total", workflow="aws.s3.create_bucket") == 1
    assert value(found, "flowli_executions_completed_total", workflow="aws.s3.create_bucket") == 1
    assert value(found, "flowli_executions_failed_total", workflow="ops.flaky") == 1
    assert value(found, "flowli_executions_failed_total", workflow="aws.s3.create_bucket") == 0
    assert value(found, "flowli_step_attempts_total", workflow="aws.s3.create_bucket") == 1
    assert value(found, "flowli_step_attempts_total", workflow="ops.flaky") == 1
    assert value(found, "flowli_step_failures_total", workflow="ops.flaky") == 1
    assert value(found, "flowli_step_failures_total", workflow="aws.s3.create_bucket") == 0
    assert value(found, "flowli_queue_depth", queue="pipelines:billing:Load") == 1
    assert value(found, "flowli_queue_oldest_age_seconds", queue="pipelines:billing:Load") >= 0
    assert value(found, "flowli_workers_live", queue="pipelines:billing:Ship") == 1
    assert value(found, "flowli_workers_live", queue="pipelines:billing:Load") == 0  # nobody serves it
    commits = value(found, "flowli_commit_batch_size_count")
    assert commits > 0 and value(found, "flowli_commit_batch_size_bucket", le="+Inf") == commits
    assert value(found, "flowli_commit_batch_size_sum") >= commits
    assert value(found, "flowli_sweeps_total") > 0


async def test_serve_metrics_time_stages_by_application_pipeline_and_handler(tmp_path, monkeypatch):
    """Each stage's wait in its queue and its run until its result, as histograms labelled with the
    application, the pipeline's name and the handler; the results by outcome."""
    monkeypatch.setenv("FLOWLI_TEST_EFFECTS", str(tmp_path / "effects"))
    async with serving("sqlite", tmp_path, "--app", APP) as svc:
        _, key, _ = await application(svc.db, "billing")
        async with httpx.AsyncClient(base_url=svc.url, headers={"X-API-Key": key}, timeout=30) as api:
            made = [(await api.post("/pipelines", json={"name": "invoice", "stages": [
                {"stageName": "charge", "stageHandlerName": "Charge", "input": text}]})).json() for text in ("ok", "bad")]
            async with Worker(svc.url, key) as worker:
                @worker.handler("Charge")
                async def charge(job: dict[str, Any]) -> Any:
                    await asyncio.sleep(0.3)
                    if job["input"] == "bad":
                        raise StageError("DECLINED", "declined", retryable=False)
                    return "charged"

                async with PipelinesClient(svc.url, key) as client:
                    await until_status(client, made[0]["id"], "Completed")
                    await until_status(client, made[1]["id"], "Failed")
            found = samples((await api.get("/metrics")).text)
    labels = {"application": "billing", "pipeline": "invoice", "handler": "Charge"}
    assert value(found, "flowli_stage_schedule_to_start_seconds_count", **labels) == 2
    assert value(found, "flowli_stage_schedule_to_start_seconds_bucket", le="+Inf", **labels) == 2
    assert value(found, "flowli_stage_duration_seconds_count", **labels) == 2
    assert value(found, "flowli_stage_duration_seconds_sum", **labels) >= 0.6  # two attempts of 0.3 s at least
    assert value(found, "flowli_stage_duration_seconds_bucket", le="0.25", **labels) == 0
    assert value(found, "flowli_stage_results_total", outcome="succeeded", **labels) == 1
    assert value(found, "flowli_stage_results_total", outcome="failed", **labels) == 1
    # the pipelines themselves, by application, name and status (every process reads the same)
    pipelines = {"decider": "flowli.pipeline", "application": "billing", "name": "invoice"}
    assert value(found, "flowli_decider_executions", status="Completed", **pipelines) == 1
    assert value(found, "flowli_decider_executions", status="Failed", **pipelines) == 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_worker_serves_its_metrics_on_a_port_of_its_own(tmp_path):
    db = f"sqlite:///{tmp_path / 'w.db'}"
    port = free_port()
    env: dict[str, Any] = {**os.environ, "FLOWLI_TEST_EFFECTS": str(tmp_path / "effects"), "PYTHONUNBUFFERED": "1"}
    started = forked.run(["--db", db, "--app", APP, "start", "ops.flaky", '"db"'], env=env)
    assert started.returncode == 0, started.stderr
    worker = subprocess.Popen([sys.executable, "-m", "flowli.cli", "--db", db, "--app", APP, "worker",
                               "--metrics-port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env)
    try:
        deadline = time.monotonic() + 30
        found: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        while time.monotonic() < deadline:
            try:
                found = samples(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text)
            except httpx.HTTPError:
                found = {}
            if value(found, "flowli_step_failures_total", workflow="ops.flaky") == 1:
                break
            time.sleep(0.1)
        assert value(found, "flowli_step_attempts_total", workflow="ops.flaky") == 1, found
        assert value(found, "flowli_step_failures_total", workflow="ops.flaky") == 1
        assert ("flowli_sweeps_total", ()) in found
    finally:
        worker.terminate()
        worker.wait(30)


async def test_a_metrics_port_answers_only_to_the_names_of_this_machine(tmp_path):
    # a page of another site that points its name at 127.0.0.1 (DNS rebinding) reads nothing
    import flowli
    from flowli.metrics import serve

    from ..catalog.app import registry

    engine = await flowli.connect(f"sqlite:///{tmp_path / 'm.db'}", registry)
    port = free_port()
    async with engine, serve(engine, port), httpx.AsyncClient(timeout=5) as http:
        url = f"http://127.0.0.1:{port}/metrics"
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost"):
            ok = await http.get(url, headers={"Host": host})
            assert ok.status_code == 200, (host, ok.text)
            assert ("flowli_sweeps_total", ()) in samples(ok.text)
        for host in ("attacker.example", f"attacker.example:{port}", "127.0.0.1.attacker.example", ""):
            refused = await http.get(url, headers={"Host": host})
            assert refused.status_code == 421, (host, refused.text)
            assert "is not a name this service answers to" in refused.text
            assert "flowli_" not in refused.text
