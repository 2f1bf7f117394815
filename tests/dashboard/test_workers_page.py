"""The Workers page as an admin sees it (with the engine's workers), and a silent application
worker shown offline there, against the shared ``flowli serve``."""

from __future__ import annotations

import asyncio
import re
import time

import httpx
import pytest

from ..served import PASSWORD, clerk
from .conftest import Tenants, logged_in

pytestmark = pytest.mark.e2e


async def test_the_admins_workers_page_shows_the_engines_workers_and_a_silent_worker_offline(tenants: Tenants, names):
    url = tenants.service.url
    admin = names.email("root")
    async with clerk(tenants.service.db) as apps:
        await apps.create_user(admin, PASSWORD, "admin", [tenants.billing])
    async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": tenants.billing_key}) as api:
        boot = (await api.post("/workers/bootstrap", json={"workerName": "billing-silent", "supportedHandlers": ["Load"],
                                                           "hostName": "box-9"})).json()
        interval = boot["heartbeat"]["intervalSeconds"]
    async with logged_in(url, admin) as root:
        async def page() -> str:
            r = await root.get("/workers", params={"application": tenants.billing}, headers={"Accept": "text/html"})
            assert r.status_code == 200, r.text[-2000:]
            return r.text

        # one heartbeat now: the login took time (a loaded machine may take intervals), and the
        # page is to show it ready first
        async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": tenants.billing_key}) as api:
            session = {"X-Worker-Session": boot["workerSessionToken"]}
            assert (await api.post("/workers/heartbeat", headers=session, json={})).status_code == 200
        text = await page()
        assert "Engine workers" in text and "box-9" in text
        row = re.compile(r'<th scope="row">billing-silent</th><td>(\w+)</td>')
        assert row.findall(text) == ["ready"]
        # it never heartbeats: a few intervals later it is offline
        deadline = time.monotonic() + 4 * interval + 5
        while row.findall(text) != ["offline"]:
            assert time.monotonic() < deadline, f"billing-silent is {row.findall(text)}, not offline"
            await asyncio.sleep(0.2)
            text = await page()
