"""The runs list speaks each audience's words, against the shared ``flowli serve``: a pipeline's
row shows its number, its name, its stages done of all and its status as its own page and the
API show it (``Running``, never the execution's ``suspended``); a Python run's row its workflow
and version; every row its duration. The stuck page shows them in the same words."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import httpx
import pytest

from ..http.test_pipelines import Worker
from ..served import APP, flowli
from .conftest import Tenants, logged_in, pipeline

pytestmark = pytest.mark.e2e


def cells(html: str, eid: str) -> list[str]:
    row = re.search(rf'<tr id="run-{re.escape(eid)}">(.*?)</tr>', html, re.S)
    assert row, f"no row of {eid}"
    return [re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", c)).strip() for c in re.findall(r"<td>(.*?)</td>", row.group(1), re.S)]


async def test_a_pipeline_row_shows_its_number_name_progress_and_status_in_its_own_words(tenants: Tenants):
    url, key = tenants.service.url, tenants.billing_key
    async with Worker(url, key) as worker:
        @worker.handler("First")
        async def first(job: dict[str, Any]) -> Any:
            return "ok"

        waiting = await pipeline(url, key, name="two-step", stages=[
            {"stageName": "a", "stageHandlerName": "First"}, {"stageName": "b", "stageHandlerName": "NobodyServes"}])
        done = await pipeline(url, key, name="one-step", stages=[{"stageName": "a", "stageHandlerName": "First"}])
        async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}) as api:
            deadline = time.monotonic() + 30
            while not ((await api.get(f"/pipelines/{done['id']}")).json()["status"] == "Completed" and
                       [s["status"] for s in (await api.get(f"/pipelines/{waiting['id']}")).json()["stages"]][0] == "Completed"):
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            shown = (await api.get(f"/pipelines/{waiting['id']}")).json()["status"]
    started = flowli(tenants.service.db, "--app", APP, "start", "ops.await_message", '"row"', "--application", tenants.billing)
    assert started.returncode == 0, started.stderr
    python_eid = started.stdout.strip().split()[-1]
    async with logged_in(url, tenants.vic) as vic:
        html = (await vic.get("/runs")).text
        eids = dict(re.findall(r'<a href="/runs/([^"]+)">pipeline (\d+)</a>', html))
        by_id = {int(n): eid for eid, n in eids.items()}
        row = cells(html, by_id[waiting["id"]])
        assert row[0].startswith(f"pipeline {waiting['id']}")
        assert row[1] == "two-step 1 of 2 stages done"
        assert row[2] == shown == "Running"  # the page's and the API's word, not the execution's
        assert row[4].endswith("so far")
        row = cells(html, by_id[done["id"]])
        assert row[1:3] == ["one-step 1 of 1 stages done", "Completed"] and re.fullmatch(r"\d+ ms|[\d.]+ s", row[4])  # ended: no "so far"
        row = cells(html, python_eid)
        assert row[0] == python_eid and row[1] == "ops.await_message v1"
        page = (await vic.get(f"/pipelines/{waiting['id']}", headers={"Accept": "text/html"})).text
        assert 'id="run-status" class="status tone-busy">Running<' in page
        # the stuck page too: the pipeline waits for a handler nobody serves, the Python run for a message
        deadline = time.monotonic() + 20
        while "tone-waiting\">suspended<" not in (stuck := (await vic.get("/stuck", params={"older_than": "0"})).text):
            assert time.monotonic() < deadline, "the Python run never waited"  # started a moment ago
            await asyncio.sleep(0.05)
        row = re.search(rf'<a href="/runs/{by_id[waiting["id"]]}">.*?</tr>', stuck, re.S)
        assert row and f"pipeline {waiting['id']} · two-step" in row.group(0)
        assert '<span class="status tone-busy">Running</span>' in row.group(0)
        row = re.search(rf'<a href="/runs/{python_eid}">.*?</tr>', stuck, re.S)
        assert row and '<span class="status tone-waiting">suspended</span>' in row.group(0)
