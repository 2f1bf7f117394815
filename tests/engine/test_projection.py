"""The projection: registered projectors over the control log; ``engine.list`` pages by cursor
and counts per status; a projector's view is persistent (a new engine on the database does not
replay the control log) and each entry is applied once, however many engines catch up at once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import flowli
from flowli import Context, Registry
from flowli.domain import EntryKind, RegistrationError
from flowli.engine import Projector
from flowli.testing import drain, store_of

from ..crash import until
from .conftest import FAST, wait_status

pytestmark = pytest.mark.integration


def app() -> Registry:
    registry = Registry()

    @registry.workflow("quick")
    async def quick(ctx: Context, n: int) -> int:
        return n

    @registry.workflow("waits")
    async def waits(ctx: Context) -> None:
        await ctx.receive("never")

    @registry.workflow("tells")
    async def tells(ctx: Context, n: int) -> int:
        await ctx.announce("told", {"n": n})
        return n

    return registry


def _told_plan(entries: list[Any]) -> Any:
    for e in entries:
        if e.kind is EntryKind.ANNOUNCED and (e.value or {}).get("kind") == "told":
            # no ON CONFLICT: an entry applied twice would fail the catch-up
            yield ("exec", "INSERT INTO view_told (seq, eid, n) VALUES (?,?,?)", (e.seq, e.eid, e.value["data"]["n"]))


TOLD = Projector(
    name="told", version=1, tables=("view_told",),
    schema=("CREATE TABLE IF NOT EXISTS view_told (seq BIGINT PRIMARY KEY, eid TEXT NOT NULL, n BIGINT NOT NULL)",),
    plan=_told_plan,
)


async def test_list_pages_by_cursor_newest_first_and_counts_per_status(open_engine):
    async with open_engine(app()) as engine:
        done = [await engine.start("quick", n) for n in range(5)]
        for eid in done:
            await engine.result(eid, timeout=30)
        waiting = [await engine.start("waits") for _ in range(2)]
        for eid in waiting:
            await wait_status(engine, eid, "suspended")
        everyone = done + waiting
        seen: list[str] = []
        cursor = None
        pages = 0
        while True:
            page = await engine.list(limit=3, cursor=cursor)
            pages += 1
            seen += [row.eid for row in page]
            assert page.counts["completed"] == 5 and page.counts["suspended"] == 2 and page.counts["failed"] == 0
            if page.next is None:
                break
            cursor = page.next
        assert pages == 3 and seen == list(reversed(everyone))  # newest first, each once
        page = await engine.list(status="completed", limit=2)
        assert [r.eid for r in page] == done[::-1][:2]
        assert page.counts["suspended"] == 2, "the counts keep the filters but the status"
        by_workflow = await engine.list(workflow="waits")
        assert {r.eid for r in by_workflow} == set(waiting) and by_workflow.next is None
        assert by_workflow.counts == {"pending": 0, "running": 0, "suspended": 2, "completed": 0, "failed": 0,
                                      "cancelled": 0, "blocked": 0}
        with pytest.raises(ValueError, match="invalid cursor 'nonsense'"):
            await engine.list(cursor="nonsense")
        with pytest.raises(ValueError, match="limit must be at least 1"):
            await engine.list(limit=0)


async def test_a_registered_projector_keeps_its_view_and_reads_it(open_engine):
    async with open_engine(app()) as engine:
        engine.project(TOLD)
        engine.project(TOLD)  # the same one again: nothing changes
        eids = [await engine.start("tells", n) for n in (3, 4)]
        for eid in eids:
            await engine.result(eid, timeout=30)
        rows = await engine.read_view("told", "SELECT eid, n FROM view_told ORDER BY seq")
        assert sorted(rows) == sorted([(eids[0], 3), (eids[1], 4)])
        with pytest.raises(RegistrationError, match="another projector is registered as 'told'"):
            engine.project(Projector("told", 2, ("view_told",), TOLD.schema, _told_plan))
        with pytest.raises(RegistrationError, match="must start with view_"):
            Projector("bad", 1, ("reviews",), (), _told_plan)
        with pytest.raises(RegistrationError, match="no projector 'absent'"):
            await engine.read_view("absent", "SELECT 1")


async def test_a_new_version_of_a_projector_rebuilds_its_view_from_the_control_log(db_url, tmp_path):
    async with await flowli.connect(db_url, app(), bucket=str(tmp_path / "b"), **FAST) as engine:
        async with engine.worker():
            eid = await engine.start("tells", 7)
            await engine.result(eid, timeout=30)
        engine.project(TOLD)
        assert await engine.read_view("told", "SELECT n FROM view_told") == [(7,)]
    doubled = Projector("told", 2, ("view_told",), TOLD.schema, lambda es: (
        ("exec", q, (p[0], p[1], p[2] * 2)) for _, q, p in _told_plan(es)))
    async with await flowli.connect(db_url, app(), bucket=str(tmp_path / "b"), **FAST) as engine:
        engine.project(doubled)
        assert await engine.read_view("told", "SELECT n FROM view_told") == [(14,)]


async def _all_completed(engine: Any, n: int) -> bool:
    page = await engine.list(limit=100)
    return len(page) == n and page.counts["completed"] == n


async def test_a_new_engine_on_the_database_does_not_replay_the_control_log(db_url, tmp_path):
    async with await flowli.connect(db_url, app(), bucket=str(tmp_path / "b"), **FAST) as engine:
        async with engine.worker():
            eids = [await engine.start("quick", n) for n in range(20)]
            for eid in eids:
                await engine.result(eid, timeout=30)
        # every completion on the control log (and in the projection) first: its announcement
        # follows the result, and a repair by the sweeper may still be under way
        await until(lambda: _all_completed(engine, 20), 30, "20 completions in the projection")
        last = (await engine.control_log(0, 10_000))[-1].seq
    fresh = await flowli.connect(db_url, app(), bucket=str(tmp_path / "b"), **FAST)
    async with fresh:
        reads: list[int] = []
        store = store_of(fresh)
        real = store.read_control_log

        async def counted(after: int = 0, limit: int = 1000) -> Any:
            reads.append(after)
            return await real(after, limit)

        store.read_control_log = counted  # type: ignore[method-assign]
        page = await fresh.list(limit=100)
        assert len(page) == 20 and page.counts["completed"] == 20
        assert reads == [last], "the new engine read the control log from the cursor left by the first"


async def test_engines_catching_up_at_once_apply_each_entry_once(db_url, tmp_path):
    writer = await flowli.connect(db_url, app(), bucket=str(tmp_path / "b"), **FAST)
    async with writer:
        async with writer.worker():
            eids = [await writer.start("tells", n) for n in range(30)]
            for eid in eids:
                await writer.result(eid, timeout=30)
        await drain(writer)
        readers = [await flowli.connect(db_url, app(), bucket=str(tmp_path / "b"), **FAST) for _ in range(3)]
        try:
            for r in readers:
                r.project(TOLD)
            results = await asyncio.gather(*(r.read_view("told", "SELECT COUNT(*) FROM view_told") for r in readers))
            assert results == [[(30,)]] * 3
        finally:
            for r in readers:
                await r.close()


def test_the_executions_view_keeps_a_change_announced_before_the_start():
    """Two announcements may reach the control log in either order (or a repair re-announces a
    start): the view ends at the execution's latest state, with what its start says."""
    import sqlite3

    from flowli.engine import EXECUTIONS
    from tests.conformance.conftest import prov

    def entry(kind: EntryKind, journal_seq: int, value: Any = None) -> Any:
        from flowli.domain import Entry

        return Entry(eid="e1", kind=kind, provenance=prov(), fid="root", value=value, journal_seq=journal_seq)

    started = entry(EntryKind.EXECUTION_STARTED, 1, {"workflow": "quick", "version": "1", "application": "a"})
    completed = entry(EntryKind.EXECUTION_COMPLETED, 2)
    for order in ([started, completed], [completed, started], [started, completed, started]):
        conn = sqlite3.connect(":memory:")
        for statement in EXECUTIONS.schema:
            conn.execute(statement)
        plan = EXECUTIONS.plan(order)
        try:
            query = next(plan)
            while True:
                _, sql, params = query
                conn.execute(sql.replace("{lock}", ""), params)
                query = plan.send(None)
        except StopIteration:
            pass
        row = conn.execute("SELECT workflow, version, application, status, last_seq FROM view_executions").fetchone()
        assert row == ("quick", "1", "a", "completed", 2), order
