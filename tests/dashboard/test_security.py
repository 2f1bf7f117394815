"""The dashboard's defences over HTTP, against a real ``flowli serve``: every answer carries a
Content-Security-Policy without inline script, ``frame-ancestors 'none'``, ``nosniff`` and a
Referrer-Policy; the session cookie is ``Secure`` over HTTPS (a proxy on this machine says so in
X-Forwarded-Proto); logins are limited per account and per client address (429 with
Retry-After); a run of another application is unknown (404) to every action, force-terminate
included; a form from another site's page (its Origin or Referer) is refused with 403 even with
the session's CSRF token."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import httpx
import pytest

from ..served import PASSWORD, Names, clerk
from .conftest import Tenants, csrf_of, logged_in, pipeline
from .test_actions import api_view, page_of, run_path

pytestmark = pytest.mark.e2e


def secured(r: httpx.Response) -> None:
    csp = r.headers.get("content-security-policy", "")
    directives = {d.strip().split(" ", 1)[0]: d.strip() for d in csp.split(";") if d.strip()}
    assert directives.get("script-src") == "script-src 'self'", csp
    assert directives.get("frame-ancestors") == "frame-ancestors 'none'", csp
    assert directives.get("default-src") == "default-src 'self'", csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp, csp
    assert r.headers.get("x-content-type-options") == "nosniff"
    assert r.headers.get("referrer-policy") == "same-origin"


async def test_every_dashboard_answer_sends_the_security_headers(tenants: Tenants):
    url = tenants.service.url
    made = await pipeline(url, tenants.billing_key)
    async with httpx.AsyncClient(base_url=url, timeout=30) as anon:
        for path in ("/login", "/runs", "/dashboard-static/live.js", "/dashboard-static/flowli.css"):
            secured(await anon.get(path))
    async with logged_in(url, tenants.ann) as ann:
        html = (await page_of(ann, made["id"])).text
        for path in ("/runs", "/inbox", "/stuck", "/workers", "/schedules", "/catalog", run_path(html),
                     "/runs/no-such-run"):
            secured(await ann.get(path))
        async with ann.stream("GET", f"{run_path(html)}/events") as events:
            secured(events)
        secured(await ann.post(f"{run_path(html)}/act", data={"csrf": csrf_of(html), "action": "pause"}))
        assert "<script>" not in html and " style=" not in html and "onclick" not in html


async def test_the_session_cookie_is_secure_over_https_only(tenants: Tenants):
    url = tenants.service.url
    for proto, secure in (("https", True), ("http", False)):
        async with httpx.AsyncClient(base_url=url, timeout=30, headers={"X-Forwarded-Proto": proto}) as client:
            form = await client.get("/login")
            login_csrf = [c for c in form.headers.get_list("set-cookie") if c.startswith("flowli_login_csrf=")]
            assert ("; secure" in login_csrf[0].lower()) is secure, login_csrf
            # the browser behind the proxy sends the cookie back over HTTPS: this client, over plain
            # HTTP to the service, does it by hand
            client.cookies.clear()
            r = await client.post("/login", data={"csrf": csrf_of(form.text), "email": tenants.ann, "password": PASSWORD},
                                  headers={"Cookie": login_csrf[0].split(";", 1)[0]})
            assert r.status_code == 303, r.text
            cookie = [c for c in r.headers.get_list("set-cookie") if c.startswith("flowli_session=")][0].lower()
            assert ("; secure" in cookie) is secure and "httponly" in cookie and "samesite=lax" in cookie, cookie


async def login(url: str, email: str, password: str, address: str) -> httpx.Response:
    """One login from ``address`` (as a proxy on the server's machine relays it)."""
    async with httpx.AsyncClient(base_url=url, timeout=60, headers={"X-Forwarded-For": address}) as client:
        form = await client.get("/login")
        return await client.post("/login", data={"csrf": csrf_of(form.text), "email": email, "password": password})


def addresses(n: int) -> list[str]:
    """``n`` client addresses of the documentation range no other test uses."""
    base = random.randrange(0, 2**16 - n)
    return [f"2001:db8:{(base + i) >> 8:x}:{(base + i) & 255:x}::1" for i in range(n)]


async def test_logins_are_limited_per_client_address_and_per_account(tenants: Tenants, names: Names):
    url = tenants.service.url
    async with clerk(tenants.service.db) as apps:
        for user in ("kim", "lee"):
            await apps.create_user(names.email(user), PASSWORD, "viewer", [tenants.billing])
    # per address: 30 logins count in five minutes, wrong ones of any accounts
    [address] = addresses(1)
    wrong = await asyncio.gather(*(login(url, f"{names('guess')}-{i}@example.com", "wrong", address) for i in range(30)))
    assert [r.status_code for r in wrong] == [401] * 30
    refused = await login(url, names.email("kim"), PASSWORD, address)  # even the right password
    assert refused.status_code == 429 and "Too many logins for this address" in refused.text
    assert 0 < int(refused.headers["retry-after"]) <= 300
    assert (await login(url, names.email("kim"), PASSWORD, addresses(1)[0])).status_code == 303
    # per account: 10 in five minutes, from any addresses; a success does not count
    spread = addresses(12)
    assert (await login(url, names.email("lee"), PASSWORD, spread[0])).status_code == 303
    wrong = await asyncio.gather(*(login(url, names.email("lee"), "wrong", a) for a in spread[1:11]))
    assert [r.status_code for r in wrong] == [401] * 10
    refused = await login(url, names.email("lee"), PASSWORD, spread[11])
    assert refused.status_code == 429 and "Too many logins for this account" in refused.text
    assert 0 < int(refused.headers["retry-after"]) <= 300
    assert (await login(url, names.email("kim"), PASSWORD, spread[11])).status_code == 303  # another account


async def test_force_terminate_of_another_applications_run_is_unknown(tenants: Tenants):
    url = tenants.service.url
    made = await pipeline(url, tenants.billing_key)
    async with logged_in(url, tenants.ann) as ann:
        eid = run_path((await page_of(ann, made["id"])).text).removeprefix("/runs/")
    async with logged_in(url, tenants.sam) as sam:  # an operator of shipping
        csrf = csrf_of((await sam.get("/stuck")).text)
        r = await sam.post("/stuck/terminate", data={"csrf": csrf, "application": tenants.shipping, "eid": eid,
                                                     "reason": "stale", "confirm": "yes", "min_idle": "0"})
        assert r.status_code == 404 and "no such run in your applications" in r.text, (r.status_code, r.text)


async def test_operator_actions_on_another_applications_pipeline_are_unknown(tenants: Tenants):
    url = tenants.service.url
    made = await pipeline(url, tenants.billing_key)
    theirs = await pipeline(url, tenants.shipping_key)
    async with clerk(tenants.service.db) as apps:
        viewer = (await apps.create_key(tenants.shipping, None, "viewer"))["apiKey"]
    actions: list[tuple[str, Any]] = [("pause", None), ("resume", None), ("cancel", None),
                                      ("stages", {"stages": [{"stageName": "more", "stageHandlerName": "H"}]})]
    for key in (tenants.shipping_key, viewer):
        async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}, timeout=30) as api:
            for action, body in actions:
                r = await api.post(f"/pipelines/{made['id']}/{action}", json=body)
                assert r.status_code == 404, (action, r.status_code, r.text)
            stage = made["stages"][0]["id"]
            for action, body in (("skipStage", {"stageId": stage}), ("rerunStage", {"stageId": stage})):
                r = await api.post(f"/pipelines/{action}", json=body)
                assert r.status_code == 404, (action, r.status_code, r.text)
            r = await api.post(f"/stages/{stage}/resume", json={"approved": True})  # a stage's decision
            assert r.status_code == 404, ("resume", r.status_code, r.text)
    async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": viewer}, timeout=30) as api:
        r = await api.post(f"/pipelines/{theirs['id']}/pause")
        assert r.status_code == 403  # its own application's pipeline: the role refuses it


async def test_a_form_from_another_sites_page_is_refused_with_a_valid_csrf_token(tenants: Tenants):
    url, key = tenants.service.url, tenants.billing_key
    made = await pipeline(url, key)
    evil = "http://attacker.example:1234"
    async with logged_in(url, tenants.ann) as ann:
        html = (await page_of(ann, made["id"])).text
        path = run_path(html)
        for headers in ({"Origin": evil}, {"Origin": "null"}, {"Referer": f"{evil}/page"},
                        {"Origin": url.replace("127.0.0.1", "localhost")}):
            r = await ann.post(f"{path}/act", data={"csrf": csrf_of(html), "action": "cancel"}, headers=headers)
            assert r.status_code == 403, (headers, r.status_code, r.text)
            assert "is not this service's own" in r.json()["error"]
        logout = await ann.post("/logout", data={"csrf": csrf_of(html)}, headers={"Origin": evil})
        assert logout.status_code == 403
        assert (await api_view(url, key, made["id"]))["status"] in ("NotStarted", "Running")
        # the dashboard's own page: its Origin, its Referer, or neither (a client that sends none)
        for headers in ({"Origin": url}, {"Referer": f"{url}{path}"}, {}):
            r = await ann.post(f"{path}/act", data={"csrf": csrf_of(html), "action": "pause"}, headers=headers)
            assert r.status_code == 303, (headers, r.text)
    async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}) as api:
        refused = await api.post(f"/pipelines/{made['id']}/cancel", headers={"Origin": evil})
        assert refused.status_code == 403
