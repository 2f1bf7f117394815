"""Cancel, nondeterminism, migrate, and versions side by side."""

from __future__ import annotations

import asyncio

import pytest

from flowli import Context, Registry
from flowli.domain import (
    Cancelled,
    EntryKind,
    ExecutionStateError,
    ExecutionTerminalError,
    NondeterminismError,
    Status,
)

from .conftest import kinds, wait_status

pytestmark = pytest.mark.integration


async def wait_blocked(engine, eid):
    """Poll (bounded) until the execution is suspended for an operator; its record."""
    for _ in range(500):
        record = await engine.status(eid)
        if record.blocked:
            return record
        await asyncio.sleep(0.01)
    return record


def tag(x: str) -> str:
    return x


async def test_cancel_a_suspended_execution(open_engine):
    registry = Registry()
    cleaned: list[str] = []

    @registry.workflow("waits")
    async def waits(ctx: Context) -> None:
        try:
            await ctx.receive("never")
        except Cancelled:
            cleaned.append("yes")
            raise

    async with open_engine(registry) as engine:
        eid = await engine.start("waits")
        await wait_status(engine, eid, "suspended")
        await engine.cancel(eid, by="dave@example.com")
        with pytest.raises(Cancelled):
            await engine.result(eid, timeout=30)
        journal = await engine.journal(eid)
        assert journal[-1].kind is EntryKind.EXECUTION_CANCELLED
        assert journal[-1].provenance.on_behalf_of == "dave@example.com"
        assert cleaned == ["yes"]
        with pytest.raises(ExecutionTerminalError, match="cancelled"):
            await engine.cancel(eid)


async def test_cancel_a_running_execution_at_its_next_frame_boundary(open_engine):
    registry = Registry()
    started = asyncio.Event()
    release = asyncio.Event()
    after: list[str] = []

    async def long_step() -> str:
        started.set()
        await release.wait()
        return "done"

    async def next_step() -> None:
        after.append("ran")

    @registry.workflow("runs")
    async def runs(ctx: Context) -> None:
        await ctx.step(long_step)
        await ctx.step(next_step)

    async with open_engine(registry) as engine:
        eid = await engine.start("runs")
        await asyncio.wait_for(started.wait(), 10)
        await engine.cancel(eid, by="erin@example.com")
        release.set()
        with pytest.raises(Cancelled):
            await engine.result(eid, timeout=30)
        journal = await engine.journal(eid)
        assert kinds(journal, "root/long_step#0") == ["frame.started", "frame.completed"]
        assert not [e for e in journal if e.fid == "root/next_step#0"]
        assert after == []


async def test_nondeterminism_suspends_for_an_operator_who_migrates(open_engine, db_url):
    v1 = Registry()

    @v1.workflow("order", version="1")
    async def order_v1(ctx: Context, n: int) -> str:
        await ctx.step(tag, "a")
        await ctx.receive("go")
        return "v1"

    async with open_engine(v1) as engine:
        eid = await engine.start("order", 1)
        await wait_status(engine, eid, "suspended")

    # new code of the same version, with a different argument: the replay finds another digest
    v2 = Registry()

    @v2.workflow("order", version="1")
    async def order_changed(ctx: Context, n: int) -> str:
        await ctx.step(tag, "CHANGED")
        await ctx.receive("go")
        return "changed"

    @v2.workflow("order", version="2")
    async def order_v2(ctx: Context, n: int) -> str:
        await ctx.step(tag, "a")
        got = await ctx.receive("go")
        return f"v2:{got}"

    async with open_engine(v2) as engine:
        await engine.signal(eid, "go", "ok")
        record = await wait_blocked(engine, eid)
        assert record.status is Status.SUSPENDED
        assert record.blocked["reason"] == "nondeterminism" and record.blocked["fid"] == "root/tag#0"
        blocked_entry = (await engine.journal(eid))[-1]
        assert blocked_entry.kind is EntryKind.EXECUTION_SUSPENDED and blocked_entry.error["type"] == "NondeterminismError"
        await engine.migrate(eid, "2", by="ops@example.com")
        assert await engine.result(eid, timeout=30) == "v2:ok"
        assert (await engine.status(eid)).version == "2"
        assert [e.value["to"] for e in await engine.journal(eid) if e.kind is EntryKind.EXECUTION_MIGRATED] == ["2"]


async def test_a_blocked_execution_can_be_cancelled(open_engine):
    v1 = Registry()

    @v1.workflow("o")
    async def o1(ctx: Context) -> None:
        await ctx.step(tag, "a")
        await ctx.receive("go")

    async with open_engine(v1) as engine:
        eid = await engine.start("o")
        await wait_status(engine, eid, "suspended")

    v2 = Registry()
    seen: list[str] = []

    @v2.workflow("o")
    async def o2(ctx: Context) -> None:
        try:
            await ctx.step(tag, "b")
        except NondeterminismError as exc:
            seen.append(exc.fid)
            raise

    async with open_engine(v2) as engine:
        await engine.signal(eid, "go", None)
        await wait_blocked(engine, eid)
        assert seen == ["root/tag#0"]
        await engine.cancel(eid, by="ops@example.com")
        with pytest.raises(Cancelled):
            await engine.result(eid, timeout=30)


async def test_a_frame_the_code_no_longer_creates_is_nondeterminism(open_engine):
    v1 = Registry()

    @v1.workflow("f")
    async def f1(ctx: Context) -> None:
        await ctx.step(tag, "a")
        await ctx.receive("go")

    async with open_engine(v1) as engine:
        eid = await engine.start("f")
        await wait_status(engine, eid, "suspended")

    v2 = Registry()

    @v2.workflow("f")
    async def f2(ctx: Context) -> str:
        await ctx.receive("go")
        return "skipped a frame"

    async with open_engine(v2) as engine:
        await engine.signal(eid, "go", None)
        await wait_blocked(engine, eid)
        record = await engine.status(eid)
        assert record.blocked and record.blocked["fid"] == "root/tag#0", record


async def test_migrate_refuses_an_execution_that_is_not_suspended(open_engine):
    registry = Registry()

    @registry.workflow("m", version="1")
    async def m1(ctx: Context) -> int:
        return 1

    @registry.workflow("m", version="2")
    async def m2(ctx: Context) -> int:
        return 2

    async with open_engine(registry) as engine:
        eid = await engine.start("m", version="1")
        assert await engine.result(eid, timeout=30) == 1
        with pytest.raises(ExecutionStateError, match="suspended"):
            await engine.migrate(eid, "2")
        assert (await engine.status(eid)).version == "1"


async def test_versions_live_side_by_side_and_an_execution_keeps_its_version(open_engine):
    registry = Registry()

    @registry.workflow("invoice_approval", version="3")
    async def v3(ctx: Context, invoice_id: str) -> str:
        await ctx.receive("go")
        return f"v3:{invoice_id}"

    @registry.workflow("invoice_approval", version="10")
    async def v10(ctx: Context, invoice_id: str) -> str:
        return f"v10:{invoice_id}"

    async with open_engine(registry) as engine:
        old = await engine.start("invoice_approval", "inv-1", version="3")
        new = await engine.start("invoice_approval", "inv-2")  # the highest version: 10
        await wait_status(engine, old, "suspended")
        await engine.signal(old, "go", None)
        assert await engine.result(old, timeout=30) == "v3:inv-1"
        assert await engine.result(new, timeout=30) == "v10:inv-2"
        assert (await engine.status(old)).version == "3"
