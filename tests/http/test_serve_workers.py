"""``flowli serve --workers N`` on PostgreSQL: N processes on one socket, one engine each; a job
created through any of them reaches a long poll waiting in any other at once (the store's
notifications), a pipeline runs to its end through them, and SIGTERM stops them all. On SQLite
it is refused with one sentence."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from pathlib import Path

import httpx
import psutil
import pytest

from flowli.client import PipelinesClient

from .. import forked
from ..pg import fresh_schema
from .test_pipelines import Worker, until_status

pytestmark = pytest.mark.e2e



def test_workers_are_refused_on_sqlite(tmp_path: Path):
    done = forked.run(["--db", f"sqlite:///{tmp_path / 'f.db'}", "serve", "--workers", "2"])
    assert done.returncode == 2 and "needs PostgreSQL" in done.stderr and "Traceback" not in done.stderr


async def test_two_processes_serve_one_database_and_wake_each_others_long_polls(tmp_path: Path):
    async with fresh_schema() as db:
        serve = subprocess.Popen([*forked.FLOWLI, "--db", db, "serve", "--workers", "2", "--port", "0"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert serve.stdout is not None
            line = serve.stdout.readline()
            assert line.startswith("listening on "), line + (serve.stderr.read() if serve.poll() is not None else "")
            url = line.split("listening on ", 1)[1].strip()
            children = psutil.Process(serve.pid).children()
            assert len(children) == 2
            made = forked.run(["--db", db, "apps", "create", "billing", "--json"])
            assert made.returncode == 0, made.stderr
            key = json.loads(made.stdout)["apiKey"]
            # a raw worker's long polls and the creates go over connections of their own, which the
            # kernel hands to either process: each created job reaches the waiting poll at once
            async with httpx.AsyncClient(base_url=url, timeout=60) as poller, \
                    httpx.AsyncClient(base_url=url, timeout=60, headers={"X-API-Key": key}) as creator:
                boot = (await poller.post("/workers/bootstrap", headers={"X-API-Key": key},
                                          json={"workerName": "raw", "supportedHandlers": ["Raw"]})).json()
                poller.headers["X-Worker-Session"] = boot["workerSessionToken"]
                for _ in range(6):
                    poll = asyncio.create_task(poller.post("/jobs/pull", json={"waitSeconds": 20}))
                    await asyncio.sleep(0.3)
                    began = time.monotonic()
                    await creator.post("/pipelines", json={"name": "p", "stages": [
                        {"stageName": "s", "stageHandlerName": "Raw"}]})
                    got = await poll
                    assert got.status_code == 200 and time.monotonic() - began < 2.0, (got.status_code, got.text)
            async with Worker(url, key) as worker, PipelinesClient(url, key) as client:
                @worker.handler("Load")
                async def load(job: dict) -> str:
                    return "loaded"

                ids = [(await client.create({"name": "run", "stages": [{"stageName": "a", "stageHandlerName": "Load"},
                                                                       {"stageName": "b", "stageHandlerName": "Load"}]}))["id"]
                       for _ in range(6)]
                for pid in ids:
                    await until_status(client, pid, "Completed")
            serve.send_signal(signal.SIGTERM)
            assert serve.wait(40) == 0
            assert not any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children)
        finally:
            if serve.poll() is None:
                serve.kill()
                serve.wait()
