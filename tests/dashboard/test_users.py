"""Dashboard users and what they see, against a real ``flowli serve``: a user created without
``--app`` sees no application until given one (only an admin sees every one), and ``flowli users
ls|grant|disable|delete`` act at once on the sessions already open."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from ..served import APP, PASSWORD, Names, clerk, flowli
from .conftest import Tenants, csrf_of, logged_in, pipeline
from .test_actions import act, history, page_of, run_path

pytestmark = pytest.mark.e2e


def run_links(html: str) -> list[str]:
    return re.findall(r'href="/runs/([^"?]+)"', html)


async def test_a_user_without_applications_sees_none_and_an_admin_sees_every_one(tenants: Tenants, names: Names):
    url, db = tenants.service.url, tenants.service.db
    await pipeline(url, tenants.billing_key, name="billing-run")
    nobody, boss = names.email("nobody"), names.email("boss")
    async with clerk(db) as apps:
        await apps.create_user(nobody, PASSWORD, "viewer", [])
        await apps.create_user(boss, PASSWORD, "admin", [tenants.shipping])
    async with logged_in(url, tenants.ann) as ann:
        [eid] = run_links((await ann.get("/runs")).text)
    async with logged_in(url, nobody) as viewer, logged_in(url, boss) as admin:
        asked = await viewer.get("/runs", params={"application": tenants.billing})
        assert asked.status_code == 200 and run_links(asked.text) == [], "a user of no application read another's runs"
        run = await viewer.get(f"/runs/{eid}")
        assert run.status_code == 404 and "billing-run" not in run.text
        assert run_links((await admin.get("/runs", params={"application": tenants.billing})).text) == [eid]
        granted = flowli(db, "users", "grant", nobody, "--app", tenants.billing)
        assert granted.returncode == 0 and tenants.billing in granted.stdout, granted.stderr
        # given one, at once (the open session too)
        assert run_links((await viewer.get("/runs", params={"application": tenants.billing})).text) == [eid]
    listed = flowli(db, "users", "ls")
    assert listed.returncode == 0, listed.stderr
    line = next(x for x in listed.stdout.splitlines() if nobody in x)
    assert "viewer" in line and "enabled" in line and tenants.billing in line
    assert PASSWORD not in listed.stdout


async def test_a_disabled_or_deleted_users_sessions_end_at_once(tenants: Tenants):
    url, db = tenants.service.url, tenants.service.db
    made = await pipeline(url, tenants.billing_key)
    async with logged_in(url, tenants.ann) as ann, logged_in(url, tenants.sam) as sam:
        page = await page_of(ann, made["id"])
        done = flowli(db, "users", "disable", tenants.ann)
        assert done.returncode == 0 and "disabled" in done.stdout, done.stderr
        r = await ann.get("/runs")
        assert (r.status_code, r.headers.get("location")) == (303, "/login")
        acted = await act(ann, run_path(page.text), page.text, action="pause")  # her form, still open
        assert (acted.status_code, acted.headers.get("location")) == (303, "/login")
        assert tenants.ann not in str(await history(url, tenants.billing_key, made["id"]))  # she sent nothing
        assert "disabled" in next(x for x in flowli(db, "users", "ls").stdout.splitlines() if tenants.ann in x)
        assert (await sam.get("/runs")).status_code == 200  # another user's session lives on
        gone = flowli(db, "users", "delete", tenants.sam)
        assert gone.returncode == 0, gone.stderr
        r = await sam.get("/runs")
        assert (r.status_code, r.headers.get("location")) == (303, "/login")
    async with httpx.AsyncClient(base_url=url, follow_redirects=False, timeout=30) as anon:
        for email in (tenants.ann, tenants.sam):  # neither logs in again
            form = await anon.get("/login")
            r = await anon.post("/login", data={"csrf": csrf_of(form.text), "email": email, "password": PASSWORD})
            assert r.status_code == 401
    assert tenants.sam not in flowli(db, "users", "ls").stdout
    assert flowli(db, "users", "disable", "nobody@example.com").returncode == 2


async def test_a_password_reset_ends_the_open_sessions_and_only_the_new_password_logs_in(tenants: Tenants):
    url, db = tenants.service.url, tenants.service.db
    async with logged_in(url, tenants.ann) as ann:
        assert (await ann.get("/runs")).status_code == 200
        refused = flowli(db, "users", "password", tenants.ann)  # no password given: told how
        assert refused.returncode == 2 and "--password-stdin" in refused.stderr, refused.stderr
        done = flowli(db, "users", "password", tenants.ann, "--password-stdin", stdin="a new battery staple\n")
        assert done.returncode == 0 and "new password set" in done.stdout, done.stderr
        r = await ann.get("/runs")  # her session, opened with the old password, ended at once
        assert (r.status_code, r.headers.get("location")) == (303, "/login")
    async with httpx.AsyncClient(base_url=url, follow_redirects=False, timeout=30) as client:
        form = await client.get("/login")
        old = await client.post("/login", data={"csrf": csrf_of(form.text), "email": tenants.ann, "password": PASSWORD})
        assert old.status_code != 303
    async with logged_in(url, tenants.ann, "a new battery staple") as again:
        assert (await again.get("/runs")).status_code == 200
    unknown = flowli(db, "users", "password", "nobody@example.com", "--password-stdin", stdin="x\n")
    assert unknown.returncode != 0 and "nobody@example.com" in unknown.stderr


async def test_apps_ls_lists_each_application_with_its_settings_and_never_a_key(tenants: Tenants):
    db = tenants.service.db
    listed = flowli(db, "apps", "ls")
    assert listed.returncode == 0, listed.stderr
    assert tenants.billing in listed.stdout and tenants.shipping in listed.stdout
    assert tenants.billing_key not in listed.stdout
    as_json = flowli(db, "apps", "ls", "--json")
    rows = {a["name"]: a for a in json.loads(as_json.stdout)}
    assert rows[tenants.billing]["mcpApproval"] in ("none", "required") and isinstance(rows[tenants.billing]["id"], int)
    stuck = flowli(db, "stuck", "--older-than", "100000")  # nothing idle that long: one sentence, no empty table
    assert stuck.returncode == 0 and stuck.stdout.strip() == "no run has been idle for 100000 s or more", stuck.stdout


async def test_a_run_started_without_an_application_is_the_default_applications(tenants: Tenants, names: Names):
    # an embedded user's run (engine.start, flowli start) has no application: it belongs to the
    # default application, which an admin sees (and a user can be given), and no other user does
    url, db = tenants.service.url, tenants.service.db
    started = flowli(db, "--app", APP, "start", "ops.await_message", '"embedded"')
    assert started.returncode == 0, started.stderr
    eid = started.stdout.strip()
    in_billing = flowli(db, "--app", APP, "start", "ops.await_message", '"tenant"', "--application", tenants.billing)
    assert in_billing.returncode == 0, in_billing.stderr
    billing_eid = in_billing.stdout.strip()
    boss = names.email("boss")
    async with clerk(db) as apps:
        await apps.create_user(boss, PASSWORD, "admin", [])
    async with logged_in(url, boss) as admin, logged_in(url, tenants.ann) as ann:
        listed = run_links((await admin.get("/runs", params={"application": "default"})).text)
        assert eid in listed and billing_eid not in listed
        page = await admin.get(f"/runs/{eid}")
        assert page.status_code == 200 and "ops.await_message" in page.text, page.text[:300]
        assert (await ann.get(f"/runs/{eid}")).status_code == 404  # not hers
        assert eid not in run_links((await ann.get("/runs")).text)
        assert billing_eid in run_links((await ann.get("/runs")).text)  # --application put it in billing
    granted = flowli(db, "users", "grant", tenants.vic, "--app", "default")  # a user can be given it
    assert granted.returncode == 0, granted.stderr
    async with logged_in(url, tenants.vic) as vic:
        assert eid in run_links((await vic.get("/runs", params={"application": "default"})).text)
