"""The dashboard's tests run against the session's shared ``flowli serve`` (``service``, both
backends, which loads ``tests.dashboard.app:registry``), each with two applications and dashboard
users of its own (:class:`Tenants`)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from playwright.async_api import expect

from ..served import PASSWORD, Names, Service, clerk

__all__ = ["PASSWORD", "Tenants", "csrf_of", "logged_in", "pipeline"]

# A browser's assertion waits up to 15 s (Playwright's default is 5): on a loaded two-core machine
# running the suite in three processes, Swagger UI's bundle alone took longer than 5 s to render.
# An assertion still fails when what it waits for never comes.
expect.set_options(timeout=15_000)


@dataclass
class Tenants:
    """Two applications of one test, their admin keys and their users (each an email)."""

    service: Service
    billing: str
    shipping: str
    billing_key: str
    shipping_key: str
    ann: str
    """An operator of billing."""
    vic: str
    """A viewer of billing."""
    sam: str
    """An operator of shipping."""


@pytest.fixture
async def tenants(service: Service, names: Names) -> Tenants:
    billing, shipping = names("billing"), names("shipping")
    async with clerk(service.db) as apps:
        _, billing_key = await apps.create(billing)
        _, shipping_key = await apps.create(shipping)
        for user, role, application in (("ann", "operator", billing), ("vic", "viewer", billing),
                                        ("sam", "operator", shipping)):
            await apps.create_user(names.email(user), PASSWORD, role, [application])
    return Tenants(service, billing, shipping, billing_key, shipping_key,
                   names.email("ann"), names.email("vic"), names.email("sam"))


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "the page has no CSRF field"
    return found.group(1)


@contextlib.asynccontextmanager
async def logged_in(url: str, email: str, password: str = PASSWORD) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=url, follow_redirects=False, timeout=30) as client:
        form = await client.get("/login")
        r = await client.post("/login", data={"csrf": csrf_of(form.text), "email": email, "password": password})
        assert r.status_code == 303 and r.headers["location"] == "/overview", r.text
        yield client


async def pipeline(url: str, key: str, **body: Any) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}, timeout=30) as api:
        r = await api.post("/pipelines", json={"name": "invoice", "stages": [
            {"stageName": "load", "stageHandlerName": "LoadHandler", "input": "{}"}], **body})
        assert r.status_code in (200, 201), r.text
        return dict(r.json())
