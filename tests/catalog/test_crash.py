"""Crash tests of compositions, with real ``flowli worker`` processes killed with SIGKILL: a run
whose worker dies between layers completes on another worker, each step's effect once; a run
parked on a remediation gate survives a restart of every process and is resolved afterwards."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import flowli
from flowli.catalog import Catalog

from ..crash import until
from .app import app, fix
from .app import effects as effect_lines

pytestmark = pytest.mark.e2e


def spawn(url: str, folder: Path, name: str) -> subprocess.Popen[bytes]:
    log = open(folder / f"{name}.log", "wb")  # noqa: SIM115 - the process writes it
    return subprocess.Popen([sys.executable, "-m", "flowli.cli", "--db", url, "--app", "tests.catalog.app:registry",
                             "worker", "--lease-ttl", "2", "--grace", "0"], stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def killed(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


THREE_LAYERS = {"name": "crashy", "version": "1", "layers": [
    {"name": "make", "steps": [{"name": "create", "workflow_type": "aws.s3.create_bucket",
                                "input_mapping": {"bucket": {"source": "input", "field": "bucket"}}}]},
    {"name": "touch", "steps": [
        {"name": "touch", "workflow_type": "ops.slow_touch",
         "input_mapping": {"bucket": {"source": "step", "step": "create", "field": "bucket_name"},
                           "seconds": {"source": "static", "value": 3.0}}},
        {"name": "version", "workflow_type": "aws.s3.enable_versioning",
         "input_mapping": {"bucket": {"source": "step", "step": "create", "field": "bucket_name"}}}]},
    {"name": "tag", "steps": [{"name": "tag", "workflow_type": "aws.s3.put_bucket_tagging",
                               "input_mapping": {"bucket": {"source": "step", "step": "touch", "field": "bucket"},
                                                 "tagging": {"source": "static", "value": {"TagSet": []}}}}]}]}


async def open_catalog(url: str, tmp_path: Path) -> Any:
    engine = await flowli.connect(url, app(), bucket=str(tmp_path / "bucket"))
    return engine, Catalog(engine)


async def test_a_composition_whose_worker_dies_between_layers_completes_elsewhere(db_url, tmp_path, effects_path):
    engine, catalog = await open_catalog(db_url, tmp_path)
    first = spawn(db_url, tmp_path, "first")
    second = None
    try:
        async with engine:
            async with engine.worker(concurrency=4):  # only to save the composition
                await catalog.save_composition(THREE_LAYERS)
            hold = Path(f"{effects_path}.hold-kb")
            hold.touch()  # the slow step waits until the kill, however long the rest takes
            wid = (await catalog.start("virtual.crashy@1", {"bucket": "kb"}))["workflow_id"]
            began = Path(f"{effects_path}.began-kb")
            await until(began.exists, 60, "the second layer to begin")

            async def versioned() -> bool:
                page = await engine.list("completed", "aws.s3.enable_versioning")
                return bool(page.items)

            # a step is run at least once: the one that completed must not run again, the one cut
            # off in the middle must run again; a kill between an effect and its record may do both
            await until(versioned, 60, "the versioning step to complete")
            killed(first)  # SIGKILL in the middle of the second layer: the first layer and one step done
            assert "slow:kb" not in effect_lines()
            hold.unlink()  # the second worker's attempt waits no more than its seconds
            second = spawn(db_url, tmp_path, "second")

            async def completed() -> Any:
                status = await catalog.status(wid)
                return status if status["status"] == "COMPLETED" else None

            status = await until(completed, 90, "the run to complete on the second worker")
            assert status["output"] == {"tag": {"bucket": "kb", "tags": 0}}
            counts = Counter(effect_lines())
            assert counts == {"create:kb": 1, "slow:kb": 1, "version:kb": 1, "tag:kb": 1}, counts
    finally:
        killed(first)
        if second is not None:
            killed(second)


async def test_a_parked_run_survives_a_restart_of_every_process(db_url, tmp_path, effects_path):
    definition = {"name": "parks", "version": "1", "layers": [
        {"name": "make", "steps": [{"name": "create", "workflow_type": "aws.s3.create_bucket",
                                    "input_mapping": {"bucket": {"source": "input", "field": "bucket"}}}]},
        {"name": "tag", "steps": [{"name": "tag", "workflow_type": "aws.s3.put_bucket_tagging",
                                   "input_mapping": {"bucket": {"source": "step", "step": "create",
                                                                "field": "bucket_name"},
                                                     "tagging": {"source": "static", "value": {"TagSet": []}}}}]}]}
    worker = spawn(db_url, tmp_path, "before")
    try:
        engine, catalog = await open_catalog(db_url, tmp_path)
        async with engine:
            async with engine.worker(concurrency=4):
                await catalog.save_composition(definition)
            wid = (await catalog.start("virtual.parks@1", {"bucket": "locked-9"}))["workflow_id"]

            async def is_parked() -> Any:
                return (await catalog.status(wid))["status"] == "remediation_pending"

            await until(is_parked, 60, "the run to park")
        killed(worker)  # every process goes: the worker, and this test's engine (closed)
        worker = spawn(db_url, tmp_path, "after")
        engine, catalog = await open_catalog(db_url, tmp_path)
        async with engine:
            status = await catalog.status(wid)
            assert status["status"] == "remediation_pending"
            assert status["state_data"]["remediation"]["step"] == "tag"
            fix("locked-9")
            await catalog.resolve(wid, "remediated")

            async def completed() -> Any:
                return (await catalog.status(wid))["status"] == "COMPLETED"

            await until(completed, 90, "the resolved run to complete")
        assert Counter(effect_lines()) == {"create:locked-9": 1, "tag-refused:locked-9": 1, "tag:locked-9": 1}
    finally:
        killed(worker)
