"""``HttpWorker`` stops gracefully, in a real process against the shared ``flowli serve``: on
SIGTERM it takes no new job, lets the running one finish and send its result, says it is
shutting down and exits 0; on Ctrl-C (SIGINT) past its grace it hands the running job back (its
lease expires) and exits 0; neither prints a traceback."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from flowli.client import PipelinesClient

from .test_pipelines import until_status

pytestmark = pytest.mark.e2e

WORKER = Path(__file__).with_name("graceful_main.py")


def start(url: str, key: str, handler: str, marker: Path, seconds: float, grace: float) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(WORKER), url, key, handler, str(marker), str(seconds), str(grace)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


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


async def test_sigterm_finishes_the_running_job_takes_no_other_and_shuts_down(service, billing, tmp_path):
    _, key = billing
    marker = tmp_path / "started"
    worker = start(service.url, key, "Finish", marker, seconds=1.5, grace=30)
    try:
        async with PipelinesClient(service.url, key) as client:
            running = await client.create({"name": "running", "stages": [{"stageName": "s", "stageHandlerName": "Finish"}]})
            await started(marker)
            worker.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.5)  # the worker has stopped polling
            later = await client.create({"name": "later", "stages": [{"stageName": "s", "stageHandlerName": "Finish"}]})
            code, err = await ended(worker, 20)
            assert code == 0 and "Traceback" not in err, err
            done = await until_status(client, running["id"], "Completed")
            assert done["stages"][0]["output"] == f"finished by {worker.pid}"
            assert (await client.get(later["id"]))["stages"][0]["status"] not in ("Running", "Completed")
        async with httpx.AsyncClient(base_url=service.url, headers={"X-API-Key": key}) as api:
            mine = [w for w in (await api.get("/workers")).json() if w["workerName"] == f"graceful-{worker.pid}"]
            assert [w["state"] for w in mine] == ["stopped"]
    finally:
        if worker.poll() is None:
            worker.kill()


async def test_ctrl_c_past_the_grace_hands_the_job_back_without_a_traceback(service, billing, tmp_path):
    _, key = billing
    marker = tmp_path / "started"
    worker = start(service.url, key, "Endless", marker, seconds=600, grace=0.5)
    try:
        async with PipelinesClient(service.url, key) as client:
            made = await client.create({"name": "long", "stages": [{"stageName": "s", "stageHandlerName": "Endless"}]})
            await started(marker)
            worker.send_signal(signal.SIGINT)
            code, err = await ended(worker, 15)
            assert code == 0 and "Traceback" not in err and "KeyboardInterrupt" not in err, err
            assert "handed back" in err
            assert (await client.get(made["id"]))["stages"][0]["status"] == "Running"  # until its lease expires
    finally:
        if worker.poll() is None:
            worker.kill()
