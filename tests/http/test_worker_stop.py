"""``HttpWorker`` stops gracefully, in a real process against the shared ``flowli serve``: on
SIGTERM it takes no new job, lets the running one finish and send its result, says it is
shutting down and exits 0; on Ctrl-C (SIGINT) past its grace it hands the running job back (its
lease expires) and exits 0; neither prints a traceback."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from flowli.client import PipelinesClient

from .test_pipelines import until_status

pytestmark = pytest.mark.e2e

WORKER = Path(__file__).with_name("graceful_main.py")


@contextlib.contextmanager
def worker_process(url: str, key: str, handler: str, marker: Path, seconds: float,
                   grace: float) -> Iterator[subprocess.Popen[str]]:
    """The worker of ``graceful_main.py`` in a process of its own, killed after the block if it still runs."""
    proc = subprocess.Popen([sys.executable, str(WORKER), url, key, handler, str(marker), str(seconds), str(grace)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()


def one_stage(name: str, handler: str) -> dict[str, object]:
    return {"name": name, "stages": [{"stageName": "s", "stageHandlerName": handler}]}


async def started(marker: Path) -> None:
    deadline = time.monotonic() + 30
    while not marker.exists() or not marker.read_text():
        assert time.monotonic() < deadline, "the worker never got the job"
        await asyncio.sleep(0.05)


async def ended(process: subprocess.Popen[str], within: float) -> tuple[int, str]:
    deadline = time.monotonic() + within
    while process.poll() is None:
        assert time.monotonic() < deadline, "the worker did not stop"
        await asyncio.sleep(0.05)
    return process.returncode, process.stderr.read() if process.stderr else ""


async def draining(url: str, key: str, name: str) -> None:
    """Wait until the worker ``name`` is shown draining (it tells so once its polls have ended)
    or stopped (its jobs ended first)."""
    async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}) as api:
        deadline = time.monotonic() + 20
        while [w["state"] for w in (await api.get("/workers")).json()
               if w["workerName"] == name] not in (["draining"], ["stopped"]):
            assert time.monotonic() < deadline, f"worker {name} is not shown draining"
            await asyncio.sleep(0.05)


async def test_sigterm_finishes_the_running_job_takes_no_other_and_shuts_down(service, billing, tmp_path):
    _, key = billing
    marker = tmp_path / "started"
    with worker_process(service.url, key, "Finish", marker, seconds=1.5, grace=30) as worker:
        async with PipelinesClient(service.url, key) as client:
            running = await client.create(one_stage("running", "Finish"))
            await started(marker)
            worker.send_signal(signal.SIGTERM)
            await draining(service.url, key, f"graceful-{worker.pid}")  # it has stopped polling
            later = await client.create(one_stage("later", "Finish"))
            code, err = await ended(worker, 20)
            assert code == 0 and "Traceback" not in err, err
            done = await until_status(client, running["id"], "Completed")
            assert done["stages"][0]["output"] == f"finished by {worker.pid}"
            assert (await client.get(later["id"]))["stages"][0]["status"] not in ("Running", "Completed")
        async with httpx.AsyncClient(base_url=service.url, headers={"X-API-Key": key}) as api:
            mine = [w for w in (await api.get("/workers")).json() if w["workerName"] == f"graceful-{worker.pid}"]
            assert [w["state"] for w in mine] == ["stopped"]


async def test_ctrl_c_past_the_grace_hands_the_job_back_without_a_traceback(service, billing, tmp_path):
    _, key = billing
    marker = tmp_path / "started"
    with worker_process(service.url, key, "Endless", marker, seconds=600, grace=0.5) as worker:
        async with PipelinesClient(service.url, key) as client:
            made = await client.create(one_stage("long", "Endless"))
            await started(marker)
            worker.send_signal(signal.SIGINT)
            code, err = await ended(worker, 15)
            assert code == 0 and "Traceback" not in err and "KeyboardInterrupt" not in err, err
            assert "handed back" in err
            assert (await client.get(made["id"]))["stages"][0]["status"] == "Running"  # until its lease expires
