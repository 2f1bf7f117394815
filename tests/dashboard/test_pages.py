"""The dashboard over HTTP, against a real ``flowli serve``: login (CSRF, a generic refusal after
a delay, HttpOnly SameSite=Lax session cookie), logout, the runs of the user's applications only
with filters and paging, a run's timeline, and markup in names and values escaped everywhere."""

from __future__ import annotations

import asyncio
import re
import time

import httpx
import pytest

from .conftest import PASSWORD, Tenants, csrf_of, logged_in, pipeline

pytestmark = pytest.mark.e2e

SCRIPT = "<script>document.title='pwned'</script>"


def run_links(html: str) -> list[str]:
    return re.findall(r'href="/runs/([^"?]+)"', html)


async def test_login_refuses_a_forged_form_and_a_wrong_password_alike_and_sets_a_strict_cookie(tenants: Tenants):
    url = tenants.service.url
    async with httpx.AsyncClient(base_url=url, follow_redirects=False, timeout=30) as anon:
        r = await anon.get("/runs")
        assert (r.status_code, r.headers["location"]) == (303, "/login")
        form = await anon.get("/login")
        assert form.status_code == 200 and 'type="password"' in form.text
        forged = await anon.post("/login", data={"csrf": "made-up", "email": tenants.ann, "password": PASSWORD})
        assert forged.status_code == 403 and "flowli_session" not in forged.headers.get("set-cookie", "")
        answers = []
        for email, password in ((tenants.ann, "wrong"), ("nobody@example.com", PASSWORD)):
            form = await anon.get("/login")
            t0 = time.monotonic()
            r = await anon.post("/login", data={"csrf": csrf_of(form.text), "email": email, "password": password})
            answers.append((r.status_code, "Wrong email or password." in r.text, "flowli_session=" in r.headers.get("set-cookie", "")))
            assert time.monotonic() - t0 >= 0.5  # a guess costs time
        assert answers == [(401, True, False), (401, True, False)]  # an unknown user reads as a wrong password
        form = await anon.get("/login")
        r = await anon.post("/login", data={"csrf": csrf_of(form.text), "email": tenants.ann.upper(), "password": PASSWORD})
        assert r.status_code == 303
        cookie = [c for c in r.headers.get_list("set-cookie") if c.startswith("flowli_session=")][0].lower()
        assert "httponly" in cookie and "samesite=lax" in cookie


async def test_logout_needs_the_sessions_csrf_token_and_ends_the_session(tenants: Tenants):
    async with logged_in(tenants.service.url, tenants.ann) as client:
        page = await client.get("/runs")
        assert page.status_code == 200
        forged = await client.post("/logout", data={"csrf": "guess"})
        assert forged.status_code == 403
        assert (await client.get("/runs")).status_code == 200  # still logged in
        session = client.cookies.get("flowli_session")
        r = await client.post("/logout", data={"csrf": csrf_of(page.text)})
        assert (r.status_code, r.headers["location"]) == (303, "/login")
    async with httpx.AsyncClient(base_url=tenants.service.url, follow_redirects=False, timeout=30) as replay:
        replay.cookies.set("flowli_session", session or "")
        assert (await replay.get("/runs")).status_code == 303  # the old cookie opens nothing


async def test_a_user_sees_only_the_runs_of_their_applications(tenants: Tenants):
    url = tenants.service.url
    await pipeline(url, tenants.billing_key, name="billing-run")
    await pipeline(url, tenants.shipping_key, name="shipping-run")
    async with logged_in(url, tenants.ann) as ann, logged_in(url, tenants.sam) as sam:
        [billing_eid] = run_links((await ann.get("/runs")).text)
        [shipping_eid] = run_links((await sam.get("/runs")).text)
        assert billing_eid != shipping_eid
        assert "billing-run" in (await ann.get(f"/runs/{billing_eid}")).text
        other = await ann.get(f"/runs/{shipping_eid}")
        assert other.status_code == 404 and "shipping-run" not in other.text
        asked = await ann.get("/runs", params={"application": tenants.shipping})  # not hers: her own instead
        assert run_links(asked.text) == [billing_eid] and f"Runs of {tenants.billing}" in asked.text


async def test_the_runs_list_filters_by_status_and_workflow_and_pages(tenants: Tenants):
    url = tenants.service.url
    for i in range(53):
        await pipeline(url, tenants.billing_key, name=f"batch-{i}")
    async with logged_in(url, tenants.vic) as vic:
        first = await vic.get("/runs")
        assert len(run_links(first.text)) == 50
        older = re.search(r'<a rel="next" href="([^"]+)"', first.text)
        assert older, "no link to the older runs"
        second = await vic.get(older.group(1).replace("&amp;", "&"))
        assert len(run_links(second.text)) == 3 and not set(run_links(second.text)) & set(run_links(first.text))
        none = await vic.get("/runs", params={"status": "completed"})
        assert run_links(none.text) == [] and "No run matches." in none.text
        deadline = time.monotonic() + 30
        while "Running</span> 53</li>" not in (await vic.get("/runs")).text:  # each waits for its worker
            assert time.monotonic() < deadline, "the 53 pipelines did not all start"
            await asyncio.sleep(0.2)
        # a pipeline status lists pipelines in their words, a page at a time
        waiting = await vic.get("/runs", params={"workflow": "flowli.pipeline", "status": "Running"})
        assert len(run_links(waiting.text)) == 50 and 'rel="next"' in waiting.text
        table = waiting.text.split('<table class="runs"', 1)[1]
        assert ">suspended<" not in table and table.count(">Running<") == 50  # each row in its own words
        assert ">suspended<" not in waiting.text.split('id="run-counts"', 1)[1].split("</div>", 1)[0]
        rest = await vic.get(re.search(r'<a rel="next" href="([^"]+)"', waiting.text).group(1).replace("&amp;", "&"))
        assert len(run_links(rest.text)) == 3 and not set(run_links(rest.text)) & set(run_links(waiting.text))
        assert set(run_links(waiting.text)) | set(run_links(rest.text)) == set(run_links(first.text) + run_links(second.text))
        named = await vic.get("/runs", params={"status": "Running", "pipeline": "batch-7"})
        assert len(run_links(named.text)) == 1 and "batch-7" in named.text
        assert run_links((await vic.get("/runs", params={"status": "Paused"})).text) == []
        # an engine status lists Python runs: these pipelines are not among them
        assert run_links((await vic.get("/runs", params={"status": "suspended"})).text) == []
        mixed = await vic.get("/runs", params={"workflow": "flowli.pipeline", "status": "suspended"})
        assert mixed.status_code == 400 and "a pipeline&#39;s are NotStarted, Running" in mixed.text
        other = await vic.get("/runs", params={"workflow": "billing.job", "status": "Running"})
        assert other.status_code == 400 and "runs of billing.job are not pipelines" in other.text
        assert run_links((await vic.get("/runs", params={"workflow": "no.such.workflow"})).text) == []
        bad = await vic.get("/runs", params={"status": "<b>sideways</b>"})
        assert bad.status_code == 400 and "<b>sideways</b>" not in bad.text and "&lt;b&gt;sideways" in bad.text


async def test_markup_in_a_runs_names_and_values_is_escaped_in_every_page(tenants: Tenants):
    url = tenants.service.url
    await pipeline(url, tenants.billing_key, name=SCRIPT, pipelineKeywords=[{"key": "k", "value": SCRIPT}],
                   pipelineContextItems=[{"key": "note", "value": SCRIPT}],
                   stages=[{"stageName": "s<i>1</i>", "stageHandlerName": "LoadHandler", "input": SCRIPT}])
    async with logged_in(url, tenants.ann) as ann:
        runs = await ann.get("/runs")
        [eid] = run_links(runs.text)
        page = await ann.get(f"/runs/{eid}")
        assert page.status_code == 200
        for html in (runs.text, page.text):
            assert "<script>document.title" not in html and "<i>1</i>" not in html
        assert "&lt;script&gt;document.title" in page.text  # shown, as text
        missing = await ann.get(f"/runs/{SCRIPT}")
        assert missing.status_code == 404 and "<script>document.title" not in missing.text


async def test_each_matched_filter_of_the_runs_list_shows_exactly_its_own_runs(tenants: Tenants):
    # a filter on a pipeline's name, a keyword or its context text reads each candidate's record:
    # each row must be paired with its own record (they come back in no set order)
    url = tenants.service.url
    made = {}
    for i in range(6):
        made[i] = await pipeline(url, tenants.billing_key, name=f"pick-{i}",
                                 pipelineKeywords=[{"key": "team", "value": f"t{i}"}],
                                 pipelineContextItems=[{"key": "customer", "value": f"cust-{i}x", "valueType": "string"}])
    async with logged_in(url, tenants.vic) as vic:
        for i in range(6):
            for params in ({"pipeline": f"pick-{i}"}, {"keyword": f"team:t{i}"}, {"text": f"cust-{i}x"}):
                html = (await vic.get("/runs", params=params)).text
                [eid] = run_links(html)
                page = (await vic.get(f"/runs/{eid}")).text
                assert f"pick-{i}" in page and f"cust-{i}x" in page, (params, eid)
                assert f"pick-{i}</" in html or f"pick-{i}<" in html, params  # the row names its own pipeline
