"""The dashboard and the API's docs in a real headless Chromium (Debian's, as ``test_browser``),
against a real ``flowli serve``: the dashboard works under its Content-Security-Policy (log in,
the runs list, a run followed live over server-sent events, an action, log out) with no
violation reported, and ``/docs`` and ``/redoc`` render with every request staying on the
service (their assets come from the package, not from a CDN)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.async_api import async_playwright, expect

from ..http.test_pipelines import Worker
from .conftest import Tenants, pipeline
from .test_browser import ARTIFACTS, chromium, log_in

pytestmark = pytest.mark.e2e

WATCH = """document.addEventListener("securitypolicyviolation",
    e => (window.__violations = window.__violations || []).push(e.violatedDirective + " " + e.blockedURI));"""


@pytest.fixture
async def watched() -> AsyncIterator[Any]:
    """A page that keeps every request it made (and those its policy stopped before the network),
    every console message and every CSP violation."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        try:
            context = await browser.new_context(viewport={"width": 1280, "height": 800})
            await context.add_init_script(WATCH)
            p = await context.new_page()
            p.set_default_timeout(15_000)
            p.requests, p.console, p.blocked = [], [], []
            p.on("request", lambda r: p.requests.append(r.url))
            p.on("requestfailed", lambda r: p.blocked.append(r.url) if "csp" in (r.failure or "").lower() else None)
            p.on("console", lambda m: p.console.append(f"{m.type}: {m.text}"))
            yield p
        finally:
            await browser.close()


async def violations(page: Any) -> list[str]:
    found = list(await page.evaluate("window.__violations || []"))
    return found + [m for m in page.console if "Content Security Policy" in m or "Content-Security-Policy" in m]


async def test_the_dashboard_works_under_its_content_security_policy(tenants: Tenants, watched: Any):
    page, url, key = watched, tenants.service.url, tenants.billing_key
    gate = asyncio.Event()
    async with Worker(url, key) as worker:
        @worker.handler("Load")
        async def load(job: dict[str, Any]) -> Any:
            await gate.wait()  # the page is open before the stage ends
            return "loaded"

        made = await pipeline(url, key, name="under-csp", stages=[
            {"stageName": "load", "stageHandlerName": "Load"}, {"stageName": "ship", "stageHandlerName": "Ship"}])
        response = await page.goto(f"{url}/login")
        assert "script-src 'self'" in (await response.all_headers())["content-security-policy"]
        await log_in(page, url, tenants.ann)
        await expect(page.get_by_role("heading", name=f"Runs of {tenants.billing}")).to_be_visible()
        await page.goto(f"{url}/pipelines/{made['id']}")
        graph = page.get_by_role("group", name="Stages of pipeline under-csp")
        await expect(graph.get_by_role("img", name="load: Running")).to_be_visible()
        gate.set()
        await expect(graph.get_by_role("img", name="load: Completed")).to_be_visible()  # over the event stream
        await page.get_by_role("button", name="Pause").click()
        await expect(page.get_by_role("status")).to_have_text("Pause requested.")
        await page.screenshot(path=str(ARTIFACTS / "under-csp.png"), full_page=True)
        await page.get_by_role("button", name="Log out").click()
        await expect(page).to_have_url(f"{url}/login")
    assert await violations(page) == [], await violations(page)


@pytest.mark.parametrize("path, rendered", [("/docs", ".swagger-ui .info .title"), ("/redoc", "h1")])
async def test_the_api_docs_render_from_the_package_alone(tenants: Tenants, watched: Any, path: str, rendered: str):
    page, url = watched, tenants.service.url
    await page.goto(f"{url}{path}")
    await expect(page.locator(rendered).first).to_contain_text("flowli")
    await expect(page.get_by_text("/pipelines/idempotent").first).to_be_visible()
    await page.screenshot(path=str(ARTIFACTS / f"api{path.replace('/', '-')}.png"))
    ours = urlsplit(url).netloc
    away = [u for u in page.requests if urlsplit(u).scheme in ("http", "https") and urlsplit(u).netloc != ours
            and u not in page.blocked]  # one its policy stopped in the browser never left it
    assert away == [], away
    # the page's own scripts run under its policy: the one refusal is ReDoc's logo from its vendor's site
    assert [v for v in await violations(page) if "cdn.redoc.ly" not in v] == []
