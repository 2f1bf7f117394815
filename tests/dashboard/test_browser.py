"""The dashboard in a real headless Chromium (Debian's ``chromium``, driven by Playwright's Python
package with ``executable_path``; never a browser download), against a real ``flowli serve``:
log in through the form, find a pipeline in the runs list by its status filter, open its
timeline; markup put into a run's name and values never runs. Each test saves screenshots of the
pages it checked under ``test-artifacts/dashboard``."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from axe_playwright_python.async_playwright import Axe
from playwright.async_api import async_playwright, expect

from flowli.client import StageError, WaitForApproval

from ..http.test_pipelines import Worker
from .conftest import PASSWORD, Tenants, pipeline

pytestmark = pytest.mark.e2e

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


async def accessible(page: Any) -> None:
    """The page has no accessibility violation axe-core finds (its rules of WCAG 2.1 A and AA)."""
    results = await Axe().run(page, options={"runOnly": {"type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]}})
    assert results.violations_count == 0, results.generate_report()


async def log_in(page: Any, url: str, email: str) -> None:
    await page.goto(f"{url}/runs")
    await expect(page).to_have_url(f"{url}/login")  # not logged in yet
    await page.get_by_label("Email").fill(email)
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Log in").click()
    await expect(page).to_have_url(f"{url}/overview")  # the first page after login
    await page.goto(f"{url}/runs")


async def test_an_operator_logs_in_filters_the_runs_and_opens_a_timeline(tenants: Tenants, page: Any):
    url = tenants.service.url
    await pipeline(url, tenants.billing_key, name="dispatch-invoice")
    await page.goto(f"{url}/login")
    await page.get_by_label("Email").fill(tenants.ann)
    await page.get_by_label("Password").fill("not the password")
    await page.get_by_role("button", name="Log in").click()
    await expect(page.get_by_role("alert")).to_have_text("Wrong email or password.")
    await log_in(page, url, tenants.ann)
    await expect(page.get_by_role("heading", name=f"Runs of {tenants.billing}")).to_be_visible()
    rows = page.get_by_role("table").get_by_role("row")
    await expect(rows).to_have_count(2)  # the header and the pipeline
    await page.get_by_label("Status", exact=True).select_option("completed")
    await page.get_by_role("button", name="Filter").click()
    await expect(page.get_by_role("cell", name="No run matches.")).to_be_visible()
    await page.get_by_label("Status", exact=True).select_option("")
    await page.get_by_label("Workflow").fill("flowli.pipeline")
    await page.get_by_role("button", name="Filter").click()
    await accessible(page)
    await page.screenshot(path=str(ARTIFACTS / "runs.png"), full_page=True)
    await page.get_by_role("table").get_by_role("link").first.click()
    await expect(page.get_by_role("heading", name="Pipeline dispatch-invoice")).to_be_visible()
    await accessible(page)
    timeline = page.get_by_role("table", name="Timeline")
    await expect(timeline.get_by_role("cell", name="execution.started", exact=True)).to_be_visible()
    # the pipeline's own events, in its words
    await expect(timeline.get_by_role("cell", name="stage.dispatched", exact=True).first).to_be_visible()
    await page.screenshot(path=str(ARTIFACTS / "run.png"), full_page=True)
    await page.get_by_role("button", name="Log out").click()
    await expect(page).to_have_url(f"{url}/login")
    await page.goto(f"{url}/runs")
    await expect(page).to_have_url(f"{url}/login")  # the session ended


async def test_markup_in_a_run_never_runs_in_the_browser(tenants: Tenants, page: Any):
    """Markup in a run's names, keywords, context, input and error shows as text, in every page."""
    url = tenants.service.url
    async with Worker(url, tenants.billing_key) as worker:
        @worker.handler("H")
        async def fail(job: dict[str, Any]) -> Any:
            raise StageError("BAD<script>", SCRIPT)

        made = await pipeline(url, tenants.billing_key, name=SCRIPT, pipelineKeywords=[{"key": "k", "value": SCRIPT}],
                              pipelineContextItems=[{"key": "note<b>", "value": SCRIPT}],
                              stages=[{"stageName": "<img src=x onerror=alert(1)>", "stageHandlerName": "H", "input": SCRIPT}])
        async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": tenants.billing_key}) as api:
            for _ in range(200):
                if (await api.get(f"/pipelines/{made['id']}")).json()["status"] == "Failed":
                    break
                await asyncio.sleep(0.05)
    await log_in(page, url, tenants.vic)
    await page.get_by_role("table").get_by_role("link").first.click()
    await expect(page.get_by_role("heading", name=f"Pipeline {SCRIPT}")).to_be_visible()
    await expect(page.get_by_text("document.title='pwned'").first).to_be_visible()  # shown as text
    await expect(page.get_by_role("row", name="<img src=x onerror=alert(1)>").get_by_text("[BAD<script>]")).to_be_visible()
    await page.screenshot(path=str(ARTIFACTS / "escaped.png"), full_page=True)
    for path in ("/runs", "/inbox", "/stuck", f"/runs/{(await page.evaluate('location.pathname')).split('/runs/')[1]}"):
        await page.goto(f"{url}{path}")
        assert await page.evaluate("window.__ran") is None, path
    assert await page.evaluate("window.__ran") is None
    assert "pwned" not in await page.title()
    assert page.dialogs == []


async def test_a_pipeline_page_follows_its_stages_live_while_a_worker_runs_them(tenants: Tenants, page: Any):
    """Each stage changes status in the open page as the HTTP worker runs it, without a reload;
    the operator approves the waiting stage and reruns the failed one from the page."""
    url, key = tenants.service.url, tenants.billing_key
    gate = asyncio.Event()
    fails = {"charge": 1}

    async with Worker(url, key) as worker:
        @worker.handler("Load")
        async def load(job: dict[str, Any]) -> Any:
            await gate.wait()  # the page is open before the first stage ends
            return "loaded"

        @worker.handler("Review")
        async def review(job: dict[str, Any]) -> Any:
            return WaitForApproval(output="please look")

        @worker.handler("Charge")
        async def charge(job: dict[str, Any]) -> Any:
            if fails["charge"]:
                fails["charge"] -= 1
                raise StageError("CARD_DECLINED", "the card was declined")
            return "charged"

        made = await pipeline(url, key, name="order-7", stages=[
            {"stageName": "load", "stageHandlerName": "Load"},
            {"stageName": "review", "stageHandlerName": "Review"},
            {"stageName": "charge", "stageHandlerName": "Charge"}],
            pipelineContextItems=[{"key": "card", "value": "4111-1111-1111-1111", "isSensitive": True}])
        await log_in(page, url, tenants.ann)
        await page.goto(f"{url}/pipelines/{made['id']}")
        reloads: list[str] = []
        page.on("framenavigated", lambda f: reloads.append(f.url) if f == page.main_frame else None)
        graph = page.get_by_role("group", name="Stages of pipeline order-7")
        await expect(graph.get_by_role("img", name="load: Running")).to_be_visible()
        await expect(page.get_by_role("definition").filter(has_text="***")).to_be_visible()  # the card, redacted
        assert "4111" not in await page.content()
        gate.set()
        await expect(graph.get_by_role("img", name="load: Completed")).to_be_visible()
        await expect(graph.get_by_role("img", name="review: WaitingForApproval")).to_be_visible()
        assert reloads == [], reloads  # every change came over the event stream
        await page.screenshot(path=str(ARTIFACTS / "pipeline.png"), full_page=True)
        await page.screenshot(path=str(ARTIFACTS / "pipeline-graph.png"), clip={"x": 0, "y": 0, "width": 1280, "height": 560})
        await accessible(page)
        await page.get_by_role("button", name="Approve review").click()
        await expect(page.get_by_role("status")).to_have_text("The stage is approved.")
        await expect(graph.get_by_role("img", name="charge: Failed")).to_be_visible()
        await expect(page.get_by_role("row", name="charge").get_by_text("[CARD_DECLINED] the card was declined")).to_be_visible()
        stages = page.get_by_role("table", name="Stages")
        row = stages.get_by_role("row", name="charge")
        await expect(row.get_by_text("Treat it as replaying side effects, not as automatic compensation.")).to_be_visible()
        await row.get_by_label("I understand").check()
        await row.get_by_role("button", name="Rerun charge").click()
        await expect(page.get_by_role("status")).to_have_text("The stage is queued again.")
        await expect(graph.get_by_role("img", name="charge: Completed")).to_be_visible()
        await expect(page.locator("#run-status")).to_have_text("Completed")
        await page.screenshot(path=str(ARTIFACTS / "pipeline-completed.png"), full_page=True)
    async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}) as api:
        view = (await api.get(f"/pipelines/{made['id']}")).json()
    assert view["status"] == "Completed" and [s["status"] for s in view["stages"]] == ["Completed"] * 3


async def test_a_viewer_sees_no_action_and_every_page_passes_axe(tenants: Tenants, page: Any):
    url, key = tenants.service.url, tenants.billing_key
    made = await pipeline(url, key, name="viewed")
    await log_in(page, url, tenants.vic)
    await page.goto(f"{url}/pipelines/{made['id']}")
    await expect(page.get_by_text("Your role, viewer, lets you look, not act.")).to_be_visible()
    await expect(page.get_by_role("group", name="Actions on the run")).to_have_count(0)
    await expect(page.get_by_role("button", name="Cancel run")).to_have_count(0)
    # a forged action from the viewer's own session is refused, and nothing changes
    status = await page.evaluate("""async () => {
        const csrf = document.querySelector('input[name=csrf]').value;
        const path = location.pathname;
        const r = await fetch('/runs/' + encodeURIComponent(document.querySelector('#live dd').textContent) + '/act',
                              {method: 'POST', body: new URLSearchParams({csrf, action: 'cancel'})});
        return [r.status, await r.text()];
    }""")
    assert status[0] == 403 and "runs:operate" in status[1] and "it cannot act on runs" in status[1]
    async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}) as api:
        assert (await api.get(f"/pipelines/{made['id']}")).json()["status"] in ("NotStarted", "Running")
    await accessible(page)
    for path, heading in [("/overview", f"Overview of {tenants.billing}"), ("/inbox", f"Inbox of {tenants.billing}"), ("/stuck", f"Stuck runs of {tenants.billing}"),
                          ("/workers", f"Workers of {tenants.billing}"), ("/schedules", f"Schedules of {tenants.billing}"),
                          ("/catalog", "Catalog")]:
        await page.goto(f"{url}{path}")
        await expect(page.get_by_role("heading", name=heading, exact=True)).to_be_visible()
        await accessible(page)
        await page.screenshot(path=str(ARTIFACTS / f"{path.strip('/')}.png"), full_page=True)
    await page.set_viewport_size({"width": 390, "height": 844})  # a phone
    for path in (f"/pipelines/{made['id']}", "/overview", "/runs", "/inbox", "/stuck", "/workers", "/schedules",
                 "/catalog"):
        await page.goto(f"{url}{path}")
        width = await page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390 + 1, f"{path} scrolls sideways on a phone: {width}px"
    await page.goto(f"{url}/pipelines/{made['id']}")
    await page.screenshot(path=str(ARTIFACTS / "run-phone.png"), full_page=True)


async def test_the_runs_list_shows_new_runs_and_their_changes_live(tenants: Tenants, page: Any):
    """A run created after the list was opened appears in it, and its status and the counts
    change, over the application's event stream; another application's run never shows."""
    url = tenants.service.url
    await log_in(page, url, tenants.ann)
    await expect(page.get_by_role("cell", name="No run matches.")).to_be_visible()
    reloads: list[str] = []
    page.on("framenavigated", lambda f: reloads.append(f.url) if f == page.main_frame else None)
    await page.wait_for_timeout(300)  # the event stream is open
    made = await pipeline(url, tenants.billing_key, name="arrives-live")
    await pipeline(url, tenants.shipping_key, name="someone-elses")
    rows = page.get_by_role("table").get_by_role("row")
    await expect(rows).to_have_count(2)  # the header and billing's new run, no reload
    # a pipeline is counted in its own words, as its row shows it (never as the engine's "suspended")
    counted = page.get_by_role("list", name="Pipelines per status")
    await expect(counted).to_contain_text("Running 1")
    await expect(page.locator("#run-counts")).not_to_contain_text("suspended")
    async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": tenants.billing_key}) as api:
        assert (await api.post(f"/pipelines/{made['id']}/cancel")).status_code == 200
    await expect(rows.nth(1).get_by_text("Cancelled", exact=True)).to_be_visible()
    await expect(counted).to_contain_text("Cancelled 1")
    await expect(counted).not_to_contain_text("Running")
    assert reloads == [], reloads
    await expect(page.get_by_text("someone-elses")).to_have_count(0)
    await page.screenshot(path=str(ARTIFACTS / "runs-live.png"), full_page=True)
