"""Waits: receive, sleep, sleep_until, child. A waiting execution holds no worker."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from flowli import Context, Registry
from flowli.domain import EntryKind, Status, child_eid
from flowli.testing import Clock

from .conftest import kinds, wait_status

pytestmark = pytest.mark.integration


def double(x: int) -> int:
    return 2 * x


async def test_sleep_of_three_days_runs_in_milliseconds_with_the_test_clock(open_engine):
    registry = Registry()

    @registry.workflow("review")
    async def review(ctx: Context) -> str:
        await ctx.sleep(timedelta(days=3))
        return "reminded"

    clock = Clock()
    async with open_engine(registry, clock=clock) as engine:
        eid = await engine.start("review")
        await wait_status(engine, eid, "suspended")
        [timer] = await engine.timers(eid)
        assert timer.fid == "root/sleep#0" and timer.at == clock.now() + timedelta(days=3)
        await clock.advance(timedelta(days=2))
        await asyncio.sleep(0.1)
        assert (await engine.status(eid)).status is Status.SUSPENDED
        await clock.advance(timedelta(days=1))
        assert await engine.result(eid, timeout=30) == "reminded"


async def test_sleep_until(open_engine):
    registry = Registry()
    clock = Clock()
    wake = clock.now() + timedelta(hours=5)

    @registry.workflow("su")
    async def su(ctx: Context) -> str:
        await ctx.sleep_until(wake)
        return (await ctx.now()).isoformat()

    async with open_engine(registry, clock=clock) as engine:
        eid = await engine.start("su")
        await wait_status(engine, eid, "suspended")
        assert [t.at for t in await engine.timers(eid)] == [wake]
        await clock.advance(timedelta(hours=5))
        assert await engine.result(eid, timeout=30) == wake.isoformat()


async def test_receive_consumes_messages_in_order_past_the_last_consumed(open_engine):
    registry = Registry()

    @registry.workflow("inbox")
    async def inbox(ctx: Context) -> list:
        return [await ctx.receive("payments"), await ctx.receive("payments"), await ctx.receive("payments")]

    async with open_engine(registry) as engine:
        eid = await engine.start("inbox")
        assert await engine.signal(eid, "payments", {"n": 1}) == 1
        assert await engine.signal(eid, "payments", {"n": 1}) == 2  # the same payload twice is two messages
        await wait_status(engine, eid, "suspended")
        await engine.signal(eid, "payments", {"n": 3}, by="bob@example.com")
        assert await engine.result(eid, timeout=30) == [{"n": 1}, {"n": 1}, {"n": 3}]
        last = [e for e in await engine.journal(eid) if e.kind is EntryKind.FRAME_COMPLETED][-1]
        assert last.value["seq"] == 3 and last.value["by"] == "human:bob@example.com"


async def test_gather_suspends_only_when_every_frame_waits(open_engine):
    registry = Registry()
    ran: list[str] = []

    async def a() -> str:
        ran.append("a")
        return "a"

    async def b() -> str:
        await asyncio.sleep(0.05)
        ran.append("b")
        return "b"

    @registry.workflow("gx")
    async def gx(ctx: Context) -> list:
        return await ctx.gather(ctx.step(a), ctx.step(b), ctx.receive("x"))

    async with open_engine(registry) as engine:
        eid = await engine.start("gx")
        await wait_status(engine, eid, "suspended")
        journal = await engine.journal(eid)
        # both steps completed before the suspension: only the receive waited
        assert {e.fid for e in journal if e.kind is EntryKind.FRAME_COMPLETED} == {"root/a#0", "root/b#0"}
        [suspended] = [e for e in journal if e.kind is EntryKind.EXECUTION_SUSPENDED]
        assert [w["fid"] for w in suspended.value["waits"]] == ["root/receive#0"]
        await engine.signal(eid, "x", "X")
        assert await engine.result(eid, timeout=30) == ["a", "b", "X"]
        assert ran == ["a", "b"]


async def test_child_execution_with_deterministic_eid(open_engine):
    registry = Registry()

    @registry.workflow("kid")
    async def kid(ctx: Context, x: int) -> int:
        return await ctx.step(double, x)

    @registry.workflow("parent")
    async def parent(ctx: Context, x: int) -> list:
        one = await ctx.child(kid, x)
        two = await ctx.child("kid", x + 1, key="second")
        return [one, two]

    async with open_engine(registry) as engine:
        eid = await engine.start("parent", 5)
        assert await engine.result(eid, timeout=30) == [10, 12]
        first = child_eid(eid, "root/kid#0")
        record = await engine.status(first)
        assert record.parent_eid == eid and record.parent_fid == "root/kid#0" and record.result == 10
        assert (await engine.status(child_eid(eid, "root/kid:second"))).result == 12
        journal = await engine.journal(eid)
        assert kinds(journal, "root/kid#0") == ["frame.started", "frame.completed"]
        listed = {s.eid for s in await engine.list(workflow="kid")}
        assert first in listed


async def test_a_waiting_execution_holds_no_worker(open_engine):
    """100 executions wait on a receive while a worker of concurrency 4 has all its slots free."""
    registry = Registry()

    @registry.workflow("w")
    async def w(ctx: Context) -> str:
        return await ctx.receive("go")

    async with open_engine(registry, worker=False) as engine:
        async with engine.worker(concurrency=4) as worker:
            eids = [await engine.start("w") for _ in range(100)]
            for eid in eids:
                await wait_status(engine, eid, "suspended")
            for _ in range(500):  # the last suspension is still appending to the control log
                if not worker.running:
                    break
                await asyncio.sleep(0.01)
            assert worker.running == {} and worker.held == {} and engine.running() == []
            for eid in eids:
                await engine.signal(eid, "go", eid[-4:])
            results = [await engine.result(eid, timeout=30) for eid in eids]
            assert results == [eid[-4:] for eid in eids]


async def test_broadcast_resumes_every_waiter_of_a_global_channel(open_engine):
    registry = Registry()

    @registry.workflow("listener")
    async def listener(ctx: Context) -> object:
        return await ctx.receive("rates", scope="global")

    async with open_engine(registry) as engine:
        eids = [await engine.start("listener") for _ in range(3)]
        for eid in eids:
            await wait_status(engine, eid, "suspended")
        await engine.broadcast("rates", {"eur": 1.1}, by="system:pricing")
        assert [await engine.result(e, timeout=30) for e in eids] == [{"eur": 1.1}] * 3


async def test_send_announce_enqueue_withdraw_memoize_their_effect(open_engine):
    registry = Registry()

    @registry.workflow("fx")
    async def fx(ctx: Context) -> list:
        seq = await ctx.send("notes", {"hello": 1})
        ann = await ctx.announce("review.opened", {"who": "carol@example.com"})
        tid = await ctx.enqueue("humans", "DELEGATE", {"ask": "approve?"}, key="approve")
        gone = await ctx.withdraw(tid)
        again = await ctx.withdraw(tid)
        await ctx.receive("go")  # replay after this: the effects must not repeat
        return [seq, ann, tid, gone, again]

    async with open_engine(registry) as engine:
        eid = await engine.start("fx")
        await wait_status(engine, eid, "suspended")
        await engine.signal(eid, "go", None)
        seq, ann, tid, gone, again = await engine.result(eid, timeout=30)
        assert seq == 1 and isinstance(ann, int) and tid == f"DELEGATE:{eid}:approve"
        assert (gone, again) == (True, False)
        assert len(await engine.messages(eid, "notes")) == 1
        log = await engine.control_log(0, 1000)
        assert [e.value for e in log if e.kind is EntryKind.ANNOUNCED] == [
            {"kind": "review.opened", "data": {"who": "carol@example.com"}}
        ]
        assert await engine.tasks(queue="humans") == []
