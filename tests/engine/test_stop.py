"""A worker that stops (the end of ``engine.worker()``, a cancel of ``run_worker``, SIGTERM in the
CLI) takes no more work, lets the steps under way finish for its grace period, and hands each
execution back at its next frame; what still runs after the grace is handed back as it is, named
in the log; a second stop while it drains stops at once."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from flowli import Context, Registry
from flowli.domain import EntryKind

from ..crash import until

pytestmark = pytest.mark.integration


def registry_of(gate: asyncio.Event, ran: list[str]) -> Registry:
    registry = Registry()

    async def slow(name: str) -> str:
        ran.append(f"{name} began")
        await gate.wait()
        ran.append(f"{name} ended")
        return name

    @registry.workflow("two")
    async def two(ctx: Context) -> list[str]:
        return [await ctx.step(slow, "first"), await ctx.step(slow, "second")]

    return registry


async def _begun(ran: list[str], what: str) -> bool:
    return what in ran


async def test_a_stop_waits_for_the_step_under_way_then_hands_back_at_the_next_frame(open_engine):
    gate = asyncio.Event()
    ran: list[str] = []
    async with open_engine(registry_of(gate, ran), worker=False) as engine:
        async with engine.worker(grace=10) as worker:
            eid = await engine.start("two")
            await until(lambda: _begun(ran, "first began"), 20, "the first step")
            asyncio.get_running_loop().call_later(0.5, gate.set)  # it ends half a second into the stop
        assert ran == ["first began", "first ended"], "the step under way finished; the next one did not start"
        journal = await engine.journal(eid)
        assert [e.fid for e in journal if e.kind is EntryKind.FRAME_COMPLETED] == ["root/slow#0"]
        assert journal[-1].kind is EntryKind.EXECUTION_SUSPENDED and journal[-1].value["reason"] == "worker stopped"
        assert (await engine.status(eid)).lease_owner is None  # no one waits out a lease
        assert worker.running == {}
        async with engine.worker():
            assert await engine.result(eid, timeout=30) == ["first", "second"]
        assert ran.count("first began") == 1  # the memo of the first step held


async def test_what_still_runs_after_the_grace_is_handed_back_and_named(open_engine, caplog):
    gate = asyncio.Event()
    ran: list[str] = []
    caplog.set_level(logging.INFO, logger="flowli.worker")
    async with open_engine(registry_of(gate, ran), worker=False) as engine:
        loop = asyncio.get_running_loop()
        async with engine.worker(grace=0.3):
            eid = await engine.start("two")
            await until(lambda: _begun(ran, "first began"), 20, "the first step")
            began = loop.time()
        assert 0.3 <= loop.time() - began < 5
        assert ran == ["first began"]
        assert f"handing back 1 execution(s) still running after the grace: {eid}" in caplog.text
        assert "stopping: the running activations end first (1; up to 0.3 s)" in caplog.text
        assert (await engine.journal(eid))[-1].value["reason"] == "worker stopped"
        gate.set()


async def test_a_second_stop_while_the_worker_drains_stops_it_at_once(open_engine):
    gate = asyncio.Event()
    ran: list[str] = []
    async with open_engine(registry_of(gate, ran), worker=False) as engine:
        worker = asyncio.ensure_future(engine.run_worker(grace=60))
        await until(lambda: _idle_worker(engine), 20, "the worker to run")
        eid = await engine.start("two")
        await until(lambda: _begun(ran, "first began"), 20, "the first step")
        worker.cancel()  # the first stop: it drains, for up to 60 s
        await asyncio.sleep(0.2)
        assert not worker.done()
        loop = asyncio.get_running_loop()
        began = loop.time()
        worker.cancel()  # the second: at once
        await asyncio.wait({worker}, timeout=10)
        assert worker.done() and loop.time() - began < 5
        assert (await engine.journal(eid))[-1].value["reason"] == "worker stopped"
        gate.set()


async def _idle_worker(engine: Any) -> bool:
    """A worker of the engine runs (its row is written as it begins) and runs nothing yet."""
    return engine.running() == [] and any(w["id"].startswith(engine.owner) for w in await engine.workers())
