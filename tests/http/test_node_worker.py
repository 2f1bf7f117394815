"""A worker in another language: a small Node.js worker (fetch, no packages) runs a dependsOn
pipeline end to end through the HTTP protocol alone."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from flowli.client import PipelinesClient

from .test_pipelines import until_status

pytestmark = pytest.mark.e2e

WORKER = Path(__file__).with_name("node_worker.mjs")


async def test_a_node_worker_runs_the_dispatch_invoice_pipeline(service, billing):
    node = shutil.which("node")
    assert node, "Node.js 20 is on every machine of this project"
    _, key = billing
    async with PipelinesClient(service.url, key) as client:
        made = await client.create({"name": "dispatch-invoice", "stages": [
            {"stageName": "load", "stageHandlerName": "LoadInvoiceHandler", "input": '{"invoiceId":"invoice-42"}'},
            {"stageName": "email", "stageHandlerName": "EmailInvoiceHandler", "options": {"dependsOn": ["load"]}},
            {"stageName": "archive", "stageHandlerName": "ArchiveInvoiceHandler", "options": {"dependsOn": ["load"]}},
        ]})
        proc = await asyncio.create_subprocess_exec(node, str(WORKER), service.url, key, "3",
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
        lines = out.decode().splitlines()
        assert lines[0] == 'load 1 {"loaded":"invoice-42"}'
        assert sorted(lines[1:]) == ["archive 1 archived invoice-42", "email 1 emailed invoice-42"]
        done = await until_status(client, made["id"], "Completed")
        assert [s["output"] for s in done["stages"]] == ['{"loaded":"invoice-42"}', "emailed invoice-42",
                                                         "archived invoice-42"]
        workers = (await client.http.get("/workers")).json()
        assert [(w["workerName"], w["state"]) for w in workers] == [("node-1", "stopped")]
