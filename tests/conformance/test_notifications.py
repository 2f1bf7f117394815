"""Notifications between processes, seen by two stores on one database: a task visible now wakes
the other process's workers ("work"); a timer set, or a task visible only later, also pokes its
sweeper, which plans its wake again ("timer"); a store does not hear its own writes (its process
woke itself). SQLite has no notifications: the callback is never called, and the workers poll."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from flowli.domain import Timer
from flowli.store import Write
from flowli.testing import open_store

from ..pg import fresh_schema
from .conftest import started, task

pytestmark = pytest.mark.integration


async def test_a_notification_says_work_or_timer_and_never_reaches_its_writer(shared_url):
    a, b = open_store(shared_url), open_store(shared_url)
    await a.open()
    await b.open()
    heard_a: list[str] = []
    heard_b: list[str] = []
    a.subscribe(heard_a.append)
    b.subscribe(heard_b.append)
    try:
        now = datetime.now(UTC)
        hour = timedelta(hours=1)
        await a.write(Write(tasks=[task("now", visible_at=now)]), now)
        await a.write(Write(tasks=[task("later", visible_at=now + hour)]), now)
        eid, fence = await started(a, now=now)  # a start: its START task is visible now
        await a.write(Write(fence=fence, timers=[Timer(eid, "root/sleep#0", now + hour)]), now)
        expected = ["work", "timer", "work", "timer"] if shared_url.startswith("postgresql") else []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while len(heard_b) < len(expected) and loop.time() < deadline:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # room for one notification too many
        assert heard_b == expected
        assert heard_a == []
    finally:
        await a.close()
        await b.close()


async def test_stores_in_other_schemas_of_one_database_never_wake_each_other() -> None:
    """Each schema has a channel of its own: a second deployment in another schema of the same
    PostgreSQL database (or another test's) hears none of this one's writes, and this one's
    stores still hear each other."""
    async with fresh_schema() as here, fresh_schema() as there:
        a, b, other = open_store(here), open_store(here), open_store(there)
        for s in (a, b, other):
            await s.open()
        heard_b: list[str] = []
        heard_other: list[str] = []
        b.subscribe(heard_b.append)
        other.subscribe(heard_other.append)
        try:
            now = datetime.now(UTC)
            await a.write(Write(tasks=[task("now", visible_at=now)]), now)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10
            while not heard_b and loop.time() < deadline:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)  # room for a notification that should not come
            assert heard_b == ["work"]
            assert heard_other == []
        finally:
            for s in (a, b, other):
                await s.close()
