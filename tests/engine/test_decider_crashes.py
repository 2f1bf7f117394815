"""Deciders after a crash, on both backends: the process dies after each write of an order in
turn (the write commits, no later one does), and a fresh engine on the same store takes the order
to its end, each of its events once, the fold of its journal equal to its stored state."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import Any

import pytest

import flowli
from flowli.domain import EntryKind, StaleAnswer
from flowli.testing import Clock, store_of

from .test_deciders import ORDER, RETRY, connect, folds

pytestmark = pytest.mark.integration


class Crash(Exception):
    """The process died: the write that raised it committed, and no write after it does."""


async def drive(engine: flowli.Engine, clock: Clock, eid: str, dead: Any) -> None:
    """Take the order wherever it is to its end, as its outside world would: answer its charge,
    let a retry's time pass, ship it. Stops with Crash when the process dies meanwhile."""
    consumer = engine.consumer("payments", name="pay", lease=timedelta(seconds=60))
    while True:
        if dead():
            raise Crash()
        record = await engine.status(eid)
        if record.terminal:
            return
        state = (await engine.decider_state(eid))[1] or {}
        status = state.get("status")
        if status == "charging":
            for task in await consumer.dequeue(limit=1, wait=0.05):
                with contextlib.suppress(StaleAnswer):
                    await consumer.answer(task, "r")
        elif status == "waiting_retry":
            await clock.advance(RETRY)
        elif status == "charged":
            await engine.signal(eid, "ship", "Dock")
        await asyncio.sleep(0.02)


async def crash_run(url: str, tmp_path: Any, clock: Clock, key: str, crash_after: int | None) -> tuple[str, int]:
    """An engine (a process) that runs the order ``key`` until its ``crash_after``-th write
    commits, then dies: every later write raises, nothing more reaches the store. Returns the
    eid and the writes it committed."""
    engine = await connect(url, tmp_path, clock)
    store = store_of(engine)
    real = store.write
    count = 0
    dead = False

    async def write(w: Any, now: Any) -> Any:
        nonlocal count, dead
        if dead:
            raise Crash()
        result = await real(w, now)
        count += 1
        if crash_after is not None and count >= crash_after:
            dead = True
            raise Crash()
        return result

    store.write = write  # type: ignore[method-assign]
    eid = ""
    try:
        async with engine.worker():
            eid = await engine.start("order", {**ORDER, "id": key}, key=key)
            await drive(engine, clock, eid, lambda: dead)
    except Crash:
        pass
    with contextlib.suppress(Crash):
        await engine.close()
    await store.close()
    return eid, count


async def test_an_order_completes_once_whichever_write_the_process_died_after(db_url: str, tmp_path: Any) -> None:
    # how many writes an order takes depends on timing (a retry, a renewal): a clean run counts
    # them, then the process dies after each of them in turn
    _, writes = await crash_run(db_url, tmp_path / "clean", Clock(), "o-clean", None)
    assert writes >= 5, writes
    for crash_at in range(1, writes + 1):
        clock = Clock()
        key = f"o-{crash_at}"
        folder = tmp_path / key
        eid, count = await crash_run(db_url, folder, clock, key, crash_at)
        died = count >= crash_at  # else this run took fewer writes than the clean one: it ended first
        # a fresh process on the same store: what the dead one held (task and lease) times out
        await clock.advance(timedelta(seconds=61))
        engine = await connect(db_url, folder, clock)
        async with engine, engine.worker():
            eid = eid or await engine.start("order", {**ORDER, "id": key}, key=key)  # it died in its start
            await drive(engine, clock, eid, lambda: False)
            assert await engine.result(eid, timeout=10) == {"order": key, "parcel": f"parcel-{key}-Dock"}, (crash_at, died)
            state = await folds(engine, eid)
            events = [e.value["event"] for e in await engine.journal(eid) if e.kind is EntryKind.EVENT]
            for once in ("order.placed", "charge.succeeded", "ship.requested", "order.shipped"):
                assert events.count(once) == 1, (crash_at, events)
            assert state["status"] == "shipped" and len(state["failures"]) <= 1, (crash_at, state)
