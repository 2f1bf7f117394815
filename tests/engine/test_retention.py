"""Retention: a finished execution folds into one archive object, read back identical."""

from __future__ import annotations

from datetime import timedelta

import pytest

from flowli import Context, Registry
from flowli.domain import ExecutionTerminalError, Status, UnknownExecutionError
from flowli.testing import Clock, store_of

pytestmark = pytest.mark.integration


def tag(x: str) -> str:
    return x.upper()


async def test_an_archived_execution_reads_back_identical_to_its_live_journal(open_engine):
    registry = Registry()

    @registry.workflow("kept")
    async def kept(ctx: Context, x: str) -> str:
        got = await ctx.receive("in")
        await ctx.send("notes", {"seen": got})
        return await ctx.step(tag, x)

    clock = Clock()
    async with open_engine(registry, clock=clock, retention=timedelta(days=30)) as engine:
        eid = await engine.start("kept", "abc", by="alice@example.com")
        await engine.signal(eid, "in", "hello", by="bob@example.com")
        assert await engine.result(eid, timeout=30) == "ABC"
        live_journal = await engine.journal(eid)
        live_record = await engine.status(eid)
        live_in = await engine.messages(eid, "in")
        assert await engine.retain() == 0  # not yet 30 days
        await clock.advance(timedelta(days=30, seconds=1))
        assert await engine.retain() == 1
        assert await engine.statuses([eid]) == []  # the live state is gone
        assert await store_of(engine).read_journal(eid) == []
        assert await engine.messages(eid, "in") == []
        assert await engine.journal(eid) == live_journal
        assert await engine.status(eid) == live_record
        archive = await engine.archived(eid)
        assert archive is not None
        assert [m["payload"] for m in archive["channels"][f"{eid}.in"]] == [m.payload for m in live_in] == ["hello"]
        assert [m["payload"] for m in archive["channels"][f"{eid}.notes"]] == [{"seen": "hello"}]
        assert await engine.retain() == 0
        with pytest.raises(ExecutionTerminalError, match=f"{eid}.*completed"):
            await engine.signal(eid, "in", "late")  # archived: ended, not unknown
        [row] = await engine.list()
        assert row.status is Status.COMPLETED  # the projection still lists it


async def test_a_live_execution_is_never_archived(open_engine):
    registry = Registry()

    @registry.workflow("waits")
    async def waits(ctx: Context) -> None:
        await ctx.receive("never")

    clock = Clock()
    async with open_engine(registry, clock=clock) as engine:
        eid = await engine.start("waits")
        await clock.advance(timedelta(days=400))
        assert await engine.retain() == 0
        assert (await engine.status(eid)).status in (Status.PENDING, Status.RUNNING, Status.SUSPENDED)
        with pytest.raises(UnknownExecutionError):
            await engine.journal("no-such-eid")


async def test_a_pass_that_reads_after_another_pass_folded_the_execution_leaves_its_archive_whole(open_engine):
    registry = Registry()

    @registry.workflow("kept")
    async def kept(ctx: Context, x: str) -> str:
        return await ctx.step(tag, x)

    async with open_engine(registry, retention=timedelta(0), worker=False) as engine:
        async with engine.worker(concurrency=4):  # then no sweeper: the test makes the other pass
            eid = await engine.start("kept", "abc")
            assert await engine.result(eid, timeout=30) == "ABC"
        live_journal = await engine.journal(eid)
        store = store_of(engine)
        read_journal = store.read_journal

        async def read_after_the_other_pass(which: str) -> list:
            store.read_journal = read_journal  # type: ignore[method-assign]
            assert await engine.retain() == 1  # the other pass (the sweeper's) folds it meanwhile
            return await read_journal(which)

        # private seam: the one instant of the race, between a pass's read of the record and of the
        # journal; the store, the archive and both passes are the real ones
        store.read_journal = read_after_the_other_pass  # type: ignore[method-assign]
        assert await engine.retain() == 0  # not this pass's to fold: its reads came after the delete
        assert await engine.journal(eid) == live_journal  # the archive the other pass wrote, whole
