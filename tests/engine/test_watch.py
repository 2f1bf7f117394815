"""``engine.watch``: every entry once, in order, woken by the engine's own wake-ups and not by a
sleep loop (the store reads are counted); of one execution's journal or of the control log;
across processes on PostgreSQL, where the test engine's slow poll is set far beyond the test's
bounds, so that only notifications can deliver."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import flowli
from flowli import Context, Principal, Registry
from flowli.domain import EntryKind, UnknownExecutionError
from flowli.testing import drain, store_of

from ..crash import Workers, until
from ..crash.app import registry as crash_registry
from ..pg import fresh_schema
from .conftest import wait_status


def shout(x: str) -> str:
    return x.upper()


def app() -> Registry:
    registry = Registry()

    @registry.workflow("talks")
    async def talks(ctx: Context) -> list[str]:
        first = await ctx.step(shout, "a")
        said = await ctx.receive("go")
        return [first, await ctx.step(shout, said)]

    return registry


class Counted:
    """Counts the calls of a store read."""

    def __init__(self, store: Any, name: str):
        self.calls = 0
        real = getattr(store, name)

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return await real(*args, **kwargs)

        setattr(store, name, counted)


async def collect(stream: Any, until_kind: EntryKind, into: list[Any]) -> None:
    async for entry in stream:
        into.append(entry)
        if entry.kind is until_kind:
            return


@pytest.mark.integration
async def test_watch_of_a_journal_delivers_every_entry_once_in_order_without_polling(open_engine):
    async with open_engine(app(), poll_interval=30.0) as engine:
        eid = await engine.start("talks")
        await wait_status(engine, eid, "suspended")
        reads = Counted(store_of(engine), "read_journal")
        seen: list[Any] = []
        watcher = asyncio.ensure_future(collect(engine.watch(eid), EntryKind.EXECUTION_COMPLETED, seen))
        await until(lambda: any(e.kind is EntryKind.EXECUTION_SUSPENDED for e in seen), 10, "the entries so far")
        quiet = reads.calls
        await asyncio.sleep(1.0)  # nothing happens: the watch reads nothing
        assert reads.calls == quiet
        await engine.signal(eid, "go", "b")
        await asyncio.wait_for(watcher, 30)
        journal = await engine.journal(eid)
        assert [e.seq for e in seen] == [e.seq for e in journal] == list(range(1, len(journal) + 1))
        assert seen == journal
        assert reads.calls - quiet <= 2 * len(journal), "a read per wake-up, not per tick"
        later = [e async for e in _first(engine.watch(eid, after=journal[-3].seq), 2)]
        assert later == journal[-2:]


async def _first(stream: Any, n: int) -> Any:
    got = 0
    async for entry in stream:
        yield entry
        got += 1
        if got == n:
            return


@pytest.mark.integration
async def test_watch_of_the_control_log_delivers_the_lifecycle_of_every_execution(open_engine):
    async with open_engine(app(), poll_interval=30.0) as engine:
        seen: list[Any] = []

        async def watch_all() -> None:
            async for entry in engine.watch():
                seen.append(entry)
                if sum(e.kind is EntryKind.EXECUTION_COMPLETED for e in seen) == 2:
                    return

        watcher = asyncio.ensure_future(watch_all())
        eids = [await engine.start("talks") for _ in range(2)]
        for eid in eids:
            await wait_status(engine, eid, "suspended")
            await engine.signal(eid, "go", "x")
        await asyncio.wait_for(watcher, 30)
        log = await engine.control_log(0, 1000)
        assert [e.seq for e in seen] == [e.seq for e in log][:len(seen)]
        assert len({e.seq for e in seen}) == len(seen)
        for eid in eids:
            assert [e.kind for e in seen if e.eid == eid][0] is EntryKind.EXECUTION_STARTED
        assert all(e.kind.lifecycle or e.kind is EntryKind.ANNOUNCED for e in seen)


@pytest.mark.integration
async def test_watch_scoped_to_an_application_sees_its_own_only(open_engine):
    acme = Principal("ann@acme.example", application="acme", trusted=True)  # the application's own code
    async with open_engine(app(), poll_interval=30.0) as engine:
        theirs = await engine.start("talks", application="globex")
        mine = await engine.start("talks", by=acme)
        await wait_status(engine, mine, "suspended")
        seen = [e async for e in _first(engine.watch(application="acme"), 2)]
        assert {e.eid for e in seen} == {mine}
        with pytest.raises(UnknownExecutionError):
            async for _ in engine.watch(theirs, application="acme"):
                pass


@pytest.mark.integration
async def test_the_control_log_is_read_a_page_at_a_time_and_of_one_application(open_engine):
    acme = Principal("ann@acme.example", application="acme", trusted=True)  # the application's own code
    async with open_engine(app()) as engine:
        theirs = await engine.start("talks", application="globex")
        mine = await engine.start("talks", by=acme)
        for eid in (theirs, mine):
            await wait_status(engine, eid, "suspended")
        await drain(engine)  # this process's control-log appends are in
        everything = await engine.control_log()
        assert [e.seq for e in everything] == sorted(e.seq for e in everything)
        assert {e.eid for e in everything} == {theirs, mine}
        first, second = await engine.control_log(limit=2), await engine.control_log(after=everything[1].seq)
        assert first + second == everything
        own = await engine.control_log(application="acme")
        assert own == [e for e in everything if e.eid == mine] and own
        assert await engine.control_log(after=own[0].seq, limit=1, application="acme") == own[1:2]
        with pytest.raises(ValueError, match="limit"):
            await engine.control_log(limit=0)


@pytest.mark.e2e
async def test_watch_across_two_processes_on_postgresql(tmp_path: Path) -> None:
    """A worker process runs the execution; this process watches its journal, and waits for its
    result, with a slow poll of 60 s: the notifications alone deliver within the test's bounds."""
    async with fresh_schema() as url:
        workers = Workers(tmp_path, url)
        try:
            engine = await flowli.connect(url, crash_registry, poll_interval=60.0)
            async with engine:
                workers.spawn("w")
                await workers.ready("w")
                eid = await engine.start("crash.wait", str(tmp_path), by="watch-test@example.com")
                seen: list[Any] = []
                watcher = asyncio.ensure_future(collect(engine.watch(eid), EntryKind.EXECUTION_COMPLETED, seen))
                await until(lambda: any(e.kind is EntryKind.EXECUTION_SUSPENDED for e in seen), 20,
                            "the worker process's entries")
                reads = Counted(store_of(engine), "read_journal")
                await engine.signal(eid, "go", True)
                await asyncio.wait_for(watcher, 20)
                assert (await asyncio.wait_for(engine.result(eid), 20)).startswith("after")
                journal = await engine.journal(eid)
                assert seen == journal, "every entry once, in order"
                assert {e.provenance.site.pid for e in seen if e.kind is EntryKind.FRAME_COMPLETED} == \
                    {workers.procs["w"].pid}
                assert reads.calls <= len(journal), "woken by notifications, not a loop"
        finally:
            workers.close()


@pytest.mark.e2e
async def test_result_across_processes_on_postgresql_is_woken_by_the_end(tmp_path: Path) -> None:
    async with fresh_schema() as url:
        workers = Workers(tmp_path, url)
        try:
            engine = await flowli.connect(url, crash_registry, poll_interval=60.0)
            async with engine:
                workers.spawn("w")
                await workers.ready("w")
                eid = await engine.start("crash.nap", str(tmp_path), 0.5)
                reads = Counted(store_of(engine), "read_execution")
                assert (await asyncio.wait_for(engine.result(eid), 20)).startswith("after")
                assert reads.calls <= 4, "woken by the end's notification, not by polling"
        finally:
            workers.close()


@pytest.mark.integration
async def test_the_hub_leaves_nothing_behind(open_engine):
    async with open_engine(app()) as engine:
        eid = await engine.start("talks")
        # pending too: a loaded machine may not have taken the run up within 0.2 s
        with pytest.raises(TimeoutError, match=f"execution {eid} is still (pending|running|suspended) after 0.2 s"):
            await engine.result(eid, timeout=0.2)
        await engine.signal(eid, "go", "z")
        await engine.result(eid, timeout=30)
        assert not engine._rt.wakeups.hub.active, "every wait unsubscribed"  # private: the in-process wake-ups; no public read shows them
