"""``/overview``, the first page after login, against the shared ``flowli serve``: one
application's runs started, completed and failed per pipeline, the failure rate, the queue of a
handler nobody serves with its oldest job's wait, the live workers; another application's runs
never show. In Chromium: no accessibility violation, and a run started while the page is open
shows in it without a reload."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
import pytest
from playwright.async_api import expect

from flowli.client import StageError

from ..http.test_pipelines import Worker
from .conftest import Tenants, logged_in, pipeline
from .test_browser import ARTIFACTS, accessible, log_in
from .test_browser import page as page  # the fixture: a headless Chromium page

pytestmark = pytest.mark.e2e


async def _until(url: str, key: str, pid: int, status: str) -> None:
    async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}, timeout=30) as api:
        for _ in range(400):
            if (await api.get(f"/pipelines/{pid}")).json()["status"] == status:
                return
            await asyncio.sleep(0.05)
    raise AssertionError(f"pipeline {pid} never became {status}")


def _row(html: str, name: str) -> list[str]:
    """The cells of the names table's row of ``name``: started, completed, failed, failure rate."""
    found = re.search(rf'<th scope="row"><a href="[^"]*">{re.escape(name)}</a></th>(.*?)</tr>', html, re.S)
    assert found, f"no row for {name}"
    return [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td>(.*?)</td>", found.group(1), re.S)][:4]


async def test_the_overview_counts_one_applications_runs_by_pipeline_and_its_waiting_queues(tenants: Tenants):
    url, key = tenants.service.url, tenants.billing_key
    async with Worker(url, key) as worker:
        @worker.handler("Check")
        async def check(job: dict[str, Any]) -> Any:
            if "bad" in str(job.get("input")):
                raise StageError("REFUSED", "the invoice is refused")
            return "ok"

        made = [await pipeline(url, key, name="invoice", stages=[
            {"stageName": "check", "stageHandlerName": "Check", "input": text}]) for text in ("fine", "good", "bad")]
        for p, ends in zip(made, ("Completed", "Completed", "Failed"), strict=True):
            await _until(url, key, p["id"], ends)
    await pipeline(url, key, name="export", stages=[{"stageName": "send", "stageHandlerName": "Nobody"}])
    await pipeline(url, tenants.shipping_key, name="parcel")  # another application's

    async with logged_in(url, tenants.vic) as vic:  # a viewer sees the figures too
        home = await vic.get("/")
        assert (home.status_code, home.headers["location"]) == (303, "/overview")
        r = await vic.get("/overview")
        assert r.status_code == 200, r.text[-2000:]
        html = r.text
        assert _row(html, "pipeline invoice") == ["3", "2", "1", "33.3 %"]
        assert _row(html, "pipeline export") == ["1", "0", "0", "no run ended"]
        assert "parcel" not in html
        assert 'href="/runs?application=' in html and "pipeline=invoice" in html
        queue = re.search(r'<th scope="row">handler Nobody</th><td>(\d+)</td><td>([^<]+)</td>\s*<td>(.*?)</td>', html)
        assert queue, html[-3000:]
        assert queue.group(1) == "1" and queue.group(2).endswith(("s", "min")) and "none" in queue.group(3)
        assert "handler Check" not in html  # its jobs were all taken
        # the chart draws what the table says, each bar with its title
        assert re.search(r"<title>[^<]+: 1 failed</title>", html) and re.search(r"<title>[^<]+: 4 started</title>", html)
        bad = await vic.get("/overview", params={"window": "1y"})
        assert bad.status_code == 400 and "window must be one of 1h, 24h, 7d" in bad.text
        assert (await vic.get("/overview", params={"window": "1h"})).status_code == 200
        other = await vic.get("/overview", params={"application": tenants.shipping})
        assert "parcel" not in other.text  # not one of vic's: the page shows vic's own
    async with logged_in(url, tenants.sam) as sam:
        html = (await sam.get("/overview")).text
        assert _row(html, "pipeline parcel")[0] == "1" and "invoice" not in html


async def test_the_overview_is_accessible_and_live(tenants: Tenants, page: Any):
    url, key = tenants.service.url, tenants.billing_key
    await pipeline(url, key, name="first-one")
    await log_in(page, url, tenants.ann)
    await page.goto(f"{url}/overview")
    await expect(page.get_by_role("heading", name=f"Overview of {tenants.billing}")).to_be_visible()
    await expect(page.get_by_role("rowheader", name="pipeline first-one")).to_be_visible()
    await expect(page.get_by_role("img", name=re.compile(f"Runs of {tenants.billing} over the last 24h"))).to_be_visible()
    await accessible(page)
    await pipeline(url, key, name="second-one")  # while the page is open
    await expect(page.get_by_role("rowheader", name="pipeline second-one")).to_be_visible(timeout=20_000)
    await page.screenshot(path=str(ARTIFACTS / "overview.png"), full_page=True)
    await page.get_by_role("link", name="pipeline second-one").click()
    await expect(page.get_by_role("heading", name=f"Runs of {tenants.billing}")).to_be_visible()
    await expect(page.get_by_label("Pipeline", exact=True)).to_have_value("second-one")
