"""A real ``flowli serve`` with two applications and dashboard users of each role."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from ..http.conftest import Service, flowli, new_app, serving

PASSWORD = "correct horse battery"


@dataclass
class Tenants:
    service: Service
    billing_key: str
    shipping_key: str


def new_user(db: str, email: str, role: str, *apps: str) -> None:
    done = flowli(db, "users", "create", email, "--password-stdin", "--role", role,
                  *[x for a in apps for x in ("--app", a)], stdin=PASSWORD + "\n")
    assert done.returncode == 0, done.stderr


APP = "tests.dashboard.app:registry"
"""The workflow types the service knows (the catalog's test types: one fails until fixed, one
waits for a clerk, one parks at a remediation gate; and an expense claim reviewed by a person)."""


@pytest.fixture(params=["sqlite", "postgresql"])
async def service(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Service]:
    """``flowli serve --app tests.dashboard.app:registry`` on a fresh SQLite file, and on a fresh
    PostgreSQL schema."""
    monkeypatch.setenv("FLOWLI_TEST_EFFECTS", str(tmp_path / "effects"))  # the service's and this test's
    async with serving(request.param, tmp_path, "--app", APP) as svc:
        yield svc


@pytest.fixture
def tenants(service: Service) -> Tenants:
    _, billing = new_app(service.db, "billing")
    _, shipping = new_app(service.db, "shipping")
    new_user(service.db, "ann@example.com", "operator", "billing")
    new_user(service.db, "vic@example.com", "viewer", "billing")
    new_user(service.db, "sam@example.com", "operator", "shipping")
    return Tenants(service, billing, shipping)


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "the page has no CSRF field"
    return found.group(1)


@contextlib.asynccontextmanager
async def logged_in(url: str, email: str, password: str = PASSWORD) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=url, follow_redirects=False, timeout=30) as client:
        form = await client.get("/login")
        r = await client.post("/login", data={"csrf": csrf_of(form.text), "email": email, "password": password})
        assert r.status_code == 303 and r.headers["location"] == "/runs", r.text
        yield client


async def pipeline(url: str, key: str, **body: Any) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}, timeout=30) as api:
        r = await api.post("/pipelines", json={"name": "invoice", "stages": [
            {"stageName": "load", "stageHandlerName": "LoadHandler", "input": "{}"}], **body})
        assert r.status_code in (200, 201), r.text
        return dict(r.json())
