"""A Python run's page against the shared ``flowli serve`` (its registry: ``tests.dashboard.app``):
the frames with their attempts and durations, the inputs under their parameters' names (a
sensitive item's value ``***``), a failed step's error with its code and traceback, what the run waits
on, its result; and the migrate action, checked first by the dry replay: refused to a version
that does not replay the journal (naming where), done for one that does. In Chromium: no
accessibility violation on a failed run's page."""

from __future__ import annotations

import asyncio
import html as markup
import re
import time
from typing import Any

import httpx
import pytest
from playwright.async_api import expect

from ..served import APP, flowli
from .conftest import Tenants, csrf_of, logged_in
from .test_browser import ARTIFACTS, accessible, log_in
from .test_browser import page as page  # the fixture: a headless Chromium page

pytestmark = pytest.mark.e2e


async def _charge(url: str, key: str, amount: int) -> str:
    async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}, timeout=30) as api:
        r = await api.post("/catalog/runs", json={"workflow_type": "desk.charge",
                                                  "inputs": {"amount": amount, "card": {"key": "token", "value": "s3cret", "isSensitive": True}}})
        assert r.status_code == 201, r.text
        eid = str(r.json()["workflow_id"])
        deadline = time.monotonic() + 30
        while (await api.get(f"/catalog/runs/{eid}")).json()["status"] not in ("COMPLETED", "FAILED"):
            assert time.monotonic() < deadline, "the charge never ended"
            await asyncio.sleep(0.05)
        return eid


def _text(page_html: str) -> str:
    return markup.unescape(re.sub(r"<[^>]+>", " ", page_html))


async def test_a_failed_python_runs_page_shows_its_frames_inputs_and_the_steps_traceback(tenants: Tenants):
    url, key = tenants.service.url, tenants.billing_key
    failed = await _charge(url, key, 500)
    paid = await _charge(url, key, 20)
    async with logged_in(url, tenants.vic) as vic:
        page_html = (await vic.get(f"/runs/{failed}")).text
        text = _text(page_html)
        # the inputs under their names, the card's token redacted
        inputs = re.search(r'<dl class="context" aria-labelledby="inputs-heading">(.*?)</dl>', page_html, re.S)
        assert inputs, page_html[:3000]
        assert "<dt>amount</dt><dd><code>500</code></dd>" in inputs.group(1)
        assert "s3cret" not in page_html and "&#34;value&#34;: &#34;***&#34;" in inputs.group(1)
        # the step's frame: two attempts, each failed with its duration, its error with code and traceback
        row = re.search(r'<tr data-frame="root/authorize#0">(.*?)</tr>', page_html, re.S)
        assert row, page_html[-4000:]
        cells = _text(row.group(1))
        assert re.search(r"1: failed · \d+ ms", cells) and re.search(r"2: failed · \d+ ms", cells), cells
        assert "CardDeclined [CARD_DECLINED]: the card was declined for 500" in cells
        trace = re.search(r'<pre class="traceback">(.*?)</pre>', row.group(1), re.S)
        assert trace and "Traceback (most recent call last)" in trace.group(1) and "in authorize" in trace.group(1)
        assert 'raise CardDeclined(f"the card was declined for {amount}")' in markup.unescape(trace.group(1))
        # the run's own error, and no result
        assert "Error" in text and "Result" not in re.search(r'<dl class="facts">(.*?)</dl>', page_html, re.S).group(1)
        # the API's views of the same run leave the traceback out
        async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}) as api:
            shown = await api.get(f"/catalog/runs/{failed}", params={"include_state_data": "true"})
            assert shown.status_code == 200 and "Traceback" not in shown.text, shown.text[:500]
        done = _text((await vic.get(f"/runs/{paid}")).text)
        assert re.search(r'Result\s+\{"authorized": 20\}', done), done[:2000]
        assert re.search(r"1: completed · \d+ ms", done)


async def test_a_waiting_python_run_says_what_it_waits_on_and_migrates_only_to_a_version_that_replays(tenants: Tenants):
    url, db = tenants.service.url, tenants.service.db
    started = flowli(db, "--app", APP, "start", "desk.hold", "--version", "1", "--application", tenants.billing)
    assert started.returncode == 0, started.stderr
    eid = started.stdout.strip().split()[-1]
    async with logged_in(url, tenants.ann) as ann:
        deadline = time.monotonic() + 20
        while "message on &#39;go&#39;" not in (html := (await ann.get(f"/runs/{eid}")).text):
            assert time.monotonic() < deadline, html[-3000:]
            await asyncio.sleep(0.05)
        assert re.search(r"Waits on</dt><dd><ul class=\"waits\"><li>message on &#39;go&#39; \(root/receive#0\)", html)
        versions = re.search(r'<select id="migrate-version" name="version">(.*?)</select>', html, re.S)
        assert versions and re.findall(r"<option>(\w+)</option>", versions.group(1)) == ["2", "3"]
        refused = await ann.post(f"/runs/{eid}/act", data={"csrf": csrf_of(html), "action": "migrate", "version": "2"})
        assert refused.status_code == 409, refused.text[-2000:]
        assert "root/prepare#0" in _text(refused.text)  # where version 2 leaves the journal
        moved = await ann.post(f"/runs/{eid}/act", data={"csrf": csrf_of(html), "action": "migrate", "version": "3"})
        assert (moved.status_code, moved.headers.get("location")) == (303, f"/runs/{eid}?done=migrate"), moved.text
        html = (await ann.get(f"/runs/{eid}?done=migrate")).text
        assert "The run is migrated" in html and '<span class="muted">v3</span>' in html
        empty = await ann.post(f"/runs/{eid}/act", data={"csrf": csrf_of(html), "action": "migrate", "version": ""})
        assert empty.status_code == 400 and "Choose the version" in empty.text
    async with logged_in(url, tenants.vic) as vic:  # a viewer: no migrate form, and refused
        html = (await vic.get(f"/runs/{eid}")).text
        assert "Migrate to version" not in html
        r = await vic.post(f"/runs/{eid}/act", data={"csrf": csrf_of(html), "action": "migrate", "version": "1"})
        assert r.status_code == 403


async def test_a_failed_python_runs_page_is_accessible(tenants: Tenants, page: Any):
    url = tenants.service.url
    failed = await _charge(url, tenants.billing_key, 700)
    await log_in(page, url, tenants.ann)
    await page.goto(f"{url}/runs/{failed}")
    await expect(page.get_by_role("heading", name="Frames")).to_be_visible()
    row = page.locator('tr[data-frame="root/authorize#0"]')
    await expect(row.get_by_text("CardDeclined [CARD_DECLINED]")).to_be_visible()
    await row.get_by_text("Traceback").first.click()
    await expect(row.get_by_text("in authorize").first).to_be_visible()
    await accessible(page)
    await page.screenshot(path=str(ARTIFACTS / "python-run.png"), full_page=True)
    await page.set_viewport_size({"width": 390, "height": 844})  # a phone: the traceback folds its lines
    width = await page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390 + 1, f"a Python run's page scrolls sideways on a phone: {width}px"
