"""A burst of wrong logins hashes its passwords a few at a time, off the event loop: the service's
other requests keep their cores (40 concurrent wrong logins once slowed another application's API
by 2-3x, each hash running at once on the executor's threads)."""

from __future__ import annotations

import asyncio
import hashlib
import re
import threading
from typing import Any

import httpx
import pytest

import flowli
from flowli import Registry
from flowli.dashboard import Dashboard
from flowli.http import create_app

pytestmark = pytest.mark.integration


async def test_wrong_logins_hash_a_bounded_number_at_a_time(tmp_path, monkeypatch):
    # in this process, not on a served one: the hashes are counted where they run
    from flowli.dashboard._auth import HASHES_AT_ONCE  # private: the bound this test checks

    running = {"now": 0, "most": 0}
    lock = threading.Lock()
    scrypt = hashlib.scrypt

    def counted(*args: Any, **kwargs: Any) -> bytes:
        with lock:
            running["now"] += 1
            running["most"] = max(running["most"], running["now"])
        try:
            return scrypt(*args, **kwargs)
        finally:
            with lock:
                running["now"] -= 1

    monkeypatch.setattr(hashlib, "scrypt", counted)
    engine = await flowli.connect(f"sqlite:///{tmp_path / 'flowli.db'}", Registry(), bucket=str(tmp_path / "bucket"))
    async with engine:
        service = create_app(engine)
        dashboard = Dashboard(service.routes, engine, service.services)
        transport = httpx.ASGITransport(app=dashboard, client=("127.0.0.1", 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            form = await client.get("/login")
            csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
            assert csrf is not None

            async def wrong(i: int) -> int:
                r = await client.post("/login", data={"csrf": csrf.group(1), "email": f"guess-{i}@example.com",
                                                      "password": "wrong"})
                return r.status_code

            answers = await asyncio.gather(*(wrong(i) for i in range(20)))
    assert answers == [401] * 20
    assert 1 <= running["most"] <= HASHES_AT_ONCE, running
