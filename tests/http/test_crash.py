"""Crash tests with real processes, on SQLite and PostgreSQL: an HTTP worker SIGKILLed mid-stage;
``flowli serve`` SIGKILLed with pipelines in flight and started again; two ``flowli serve``
processes on one PostgreSQL database sharing the work."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from flowli.client import PipelinesClient

from ..pg import fresh_schema
from ..served import Service, application
from .test_pipelines import Worker, until_status

pytestmark = pytest.mark.e2e

WORKER = Path(__file__).with_name("worker_main.py")


@pytest.fixture(params=["sqlite", "postgresql"])
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'flowli.db'}"
    else:
        async with fresh_schema() as url:
            yield url


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def worker_process(url: str, key: str, marker: Path, mode: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, str(WORKER), url, key, str(marker), mode])


async def test_a_worker_killed_mid_stage_its_lease_expires_and_the_stage_runs_again(service, billing, tmp_path):
    svc, (_, key) = service, billing
    hung = done = None
    try:
        async with PipelinesClient(svc.url, key) as client:
            made = await client.create({"name": "slow", "stages": [{"stageName": "s", "stageHandlerName": "Slow"}]})
            marker = tmp_path / "job.json"
            hung = worker_process(svc.url, key, marker, "hang")
            deadline = time.monotonic() + 30
            while not marker.exists() or not marker.read_text():
                assert time.monotonic() < deadline, "the worker never got the job"
                await asyncio.sleep(0.05)
            first = json.loads(marker.read_text())
            hung.kill()  # SIGKILL, mid-stage
            hung.wait(10)
            done = worker_process(svc.url, key, tmp_path / "unused", "work")
            finished = await until_status(client, made["id"], "Completed", timeout=40)
            stage = finished["stages"][0]
            assert stage["attempt"] == 2 and stage["output"] == f"done by {done.pid}"
            # the dead worker's result, had it come late, is refused and recorded
            job, session = first["job"], first["session"]
            async with httpx.AsyncClient(base_url=svc.url) as http:
                late = await http.post(f"/stages/{job['stageId']}/result",
                                       headers={"X-Worker-Session": session["workerSessionToken"]},
                                       json={"executionId": job["executionId"], "attempt": 1, "isSuccess": True,
                                             "output": "late"})
            assert late.status_code == 409 and late.json()["accepted"] is False
            history = await client.history(made["id"])
            assert any(h["kind"] == "result.refused" and h["value"]["executionId"] == job["executionId"] for h in history)
            assert (await client.get(made["id"]))["stages"][0]["output"] == f"done by {done.pid}"
    finally:
        for p in (hung, done):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(10)


async def test_serve_killed_with_pipelines_in_flight_and_started_again_loses_nothing(db, tmp_path):
    # a server of its own: the test kills it
    port = free_port()
    svc = _start_on(Service(db, log=tmp_path / "serve.log"), port)
    try:
        _, key, _ = await application(db, "billing")
        async with PipelinesClient(svc.url, key, timeout=10) as client:
            made = [(await client.create({"name": f"p{i}", "stages": [
                {"stageName": "a", "stageHandlerName": "Slow"},
                {"stageName": "b", "stageHandlerName": "Slow"}]}))["id"] for i in range(20)]
            worker = worker_process(svc.url, key, tmp_path / "unused", "work")
            try:
                await asyncio.sleep(0.3)
                svc.kill()  # SIGKILL with pipelines in flight
                svc = _start_on(svc, port)
                for pid in made:
                    view = await until_status(client, pid, "Completed", timeout=60)
                    assert [s["status"] for s in view["stages"]] == ["Completed", "Completed"]
            finally:
                worker.kill()
                worker.wait(10)
    finally:
        svc.stop()


def _start_on(svc: Service, port: int) -> Service:
    svc.process = None
    base = svc.extra
    svc.extra = [*base, "--port", str(port)]
    try:
        # --port given twice: the last wins
        return svc.start(lease_ttl=2.0)
    finally:
        svc.extra = base


async def test_two_serves_on_one_postgresql_database_are_one_service(tmp_path):
    # servers of its own: two on one database
    async with fresh_schema() as url:
        a = Service(url, log=tmp_path / "a.log").start(lease_ttl=3.0)
        b = Service(url, log=tmp_path / "b.log").start(lease_ttl=3.0)
        try:
            _, key, _ = await application(url, "billing")
            async with PipelinesClient(a.url, key) as on_a, PipelinesClient(b.url, key) as on_b:
                made = []
                for i in range(10):
                    client = on_a if i % 2 else on_b
                    made.append((await client.create({"name": f"p{i}", "stages": [
                        {"stageName": "s", "stageHandlerName": "H"}]}))["id"])
                handled: list[Any] = []
                async with Worker(b.url, key, "on-b") as worker:
                    @worker.handler("H")
                    async def h(job: dict[str, Any]) -> str:
                        handled.append(job["pipelineId"])
                        return "ok"

                    for pid in made:
                        await until_status(on_a, pid, "Completed")
                assert sorted(handled) == sorted(made)
                assert (await on_a.list())["totalCount"] == (await on_b.list())["totalCount"] == 10
        finally:
            a.stop()
            b.stop()
