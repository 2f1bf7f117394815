"""The dashboard in a real headless Chromium (Debian's ``chromium``, driven by Playwright's Python
package with ``executable_path``; never a browser download), against a real ``flowli serve``:
log in through the form, find a pipeline in the runs list by its status filter, open its
timeline; markup put into a run's name and values never runs. Each test saves screenshots of the
pages it checked under ``test-artifacts/dashboard``."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import async_playwright, expect

from .conftest import PASSWORD, Tenants, pipeline

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "dashboard"
SCRIPT = "<script>document.title='pwned';window.__ran=1</script>"


def chromium() -> str:
    found = os.environ.get("FLOWLI_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "no chromium on this machine: apt-get install -y chromium (Debian's package; .ci/run installs it)"
    return found


@pytest.fixture
async def page() -> AsyncIterator[Any]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        try:
            context = await browser.new_context(viewport={"width": 1280, "height": 800})
            p = await context.new_page()
            p.set_default_timeout(15_000)
            dialogs: list[str] = []
            p.on("dialog", lambda d: dialogs.append(d.message))
            p.dialogs = dialogs
            yield p
        finally:
            await browser.close()


async def log_in(page: Any, url: str, email: str) -> None:
    await page.goto(f"{url}/runs")
    await expect(page).to_have_url(f"{url}/login")  # not logged in yet
    await page.get_by_label("Email").fill(email)
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Log in").click()
    await expect(page).to_have_url(f"{url}/runs")


async def test_an_operator_logs_in_filters_the_runs_and_opens_a_timeline(tenants: Tenants, page: Any):
    url = tenants.service.url
    await pipeline(url, tenants.billing_key, name="dispatch-invoice")
    await page.goto(f"{url}/login")
    await page.get_by_label("Email").fill("ann@example.com")
    await page.get_by_label("Password").fill("not the password")
    await page.get_by_role("button", name="Log in").click()
    await expect(page.get_by_role("alert")).to_have_text("Wrong email or password.")
    await log_in(page, url, "ann@example.com")
    await expect(page.get_by_role("heading", name="Runs of billing")).to_be_visible()
    rows = page.get_by_role("table").get_by_role("row")
    await expect(rows).to_have_count(2)  # the header and the pipeline
    await page.get_by_label("Status", exact=True).select_option("completed")
    await page.get_by_role("button", name="Filter").click()
    await expect(page.get_by_role("cell", name="No run matches.")).to_be_visible()
    await page.get_by_label("Status", exact=True).select_option("")
    await page.get_by_label("Workflow").fill("flowli.pipeline")
    await page.get_by_role("button", name="Filter").click()
    await page.screenshot(path=str(ARTIFACTS / "runs.png"), full_page=True)
    await page.get_by_role("table").get_by_role("link").first.click()
    await expect(page.get_by_role("heading", name="flowli.pipeline")).to_be_visible()
    timeline = page.get_by_role("table")
    await expect(timeline.get_by_role("cell", name="execution.started", exact=True)).to_be_visible()
    await expect(timeline.get_by_role("cell", name="frame.started", exact=True).first).to_be_visible()
    await page.screenshot(path=str(ARTIFACTS / "run.png"), full_page=True)
    await page.get_by_role("button", name="Log out").click()
    await expect(page).to_have_url(f"{url}/login")
    await page.goto(f"{url}/runs")
    await expect(page).to_have_url(f"{url}/login")  # the session ended


async def test_markup_in_a_run_never_runs_in_the_browser(tenants: Tenants, page: Any):
    url = tenants.service.url
    await pipeline(url, tenants.billing_key, name=SCRIPT, pipelineKeywords=[{"key": "k", "value": SCRIPT}],
                   stages=[{"stageName": "<img src=x onerror=alert(1)>", "stageHandlerName": "H", "input": SCRIPT}])
    await log_in(page, url, "vic@example.com")
    await page.get_by_role("table").get_by_role("link").first.click()
    await expect(page.get_by_role("heading", name="flowli.pipeline")).to_be_visible()
    await expect(page.get_by_text("document.title='pwned'").first).to_be_visible()  # shown as text
    await page.screenshot(path=str(ARTIFACTS / "escaped.png"), full_page=True)
    assert await page.evaluate("window.__ran") is None
    assert "pwned" not in await page.title()
    assert page.dialogs == []
