"""What an engine reads on its own while nothing happens (the sweeper's expired leases, the next
wake-up, a sweep) does not grow with the tasks that wait for a worker: a database holding many
pipelines that no worker has taken yet read every one of their tasks about once a second.

Measured in the work of SQLite's virtual machine, not in time: its progress handler, set on every
connection the store opens, counts each hundred instructions of the statements they run."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

import flowli
from flowli import Context, Registry
from flowli.testing import store_of

from .conftest import FAST

pytestmark = pytest.mark.integration


def registry() -> Registry:
    reg = Registry()

    @reg.workflow("noop")
    async def noop(ctx: Context) -> None:
        return None

    return reg


async def idle_reads(path: str, waiting: int, steps: list[int]) -> int:
    """The hundreds of instructions of one round of the idle reads, with ``waiting`` runs on a
    queue no worker serves (each a ready task)."""
    engine = await flowli.connect(f"sqlite:///{path}", registry(), **FAST)
    async with engine:
        for _ in range(waiting):
            await engine.start("noop", queue="nobody")
        async with engine.worker():  # on the default queue: it takes none of them, and leases one task
            started = await engine.start("noop")
            await engine.result(started, timeout=30)
            store = store_of(engine)
            now = engine.clock.now()
            steps[0] = 0
            for _ in range(5):
                await store.expired_tasks(now, 500)
                await store.next_wake(now)
            return steps[0]


async def test_the_idle_reads_cost_the_same_with_two_thousand_tasks_waiting_as_with_ten(tmp_path: Any, monkeypatch):
    steps = [0]

    def counted(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = real(*args, **kwargs)
        conn.set_progress_handler(lambda: steps.__setitem__(0, steps[0] + 1), 100)  # returns None: go on
        return conn

    real = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", counted)
    few = await idle_reads(str(tmp_path / "few.db"), 10, steps)
    many = await idle_reads(str(tmp_path / "many.db"), 2000, steps)
    # without the indexes of the tasks' times (schema 11 on SQLite): 9 against 1 202, every ready
    # task read by both reads of each round
    assert many <= few + 10, (few, many)
