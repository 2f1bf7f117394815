"""A crash between the two appends (the journal, then the control log): the sweeper appends the
missing lifecycle entries, so the projection shows every execution with the status of its record.
Where the store announces in its writes (SQLite), there is no second append: a crash leaves no
lifecycle entry off the control log, which these tests check there instead."""

from __future__ import annotations

import asyncio
import os
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import flowli
from flowli.domain import Actor, Code, Entry, EntryKind, Provenance, Site, Status
from flowli.store import Fence, StatusChange, Write
from flowli.testing import store_of

from . import Workers, lines, until
from .app import EFFECTS, registry

pytestmark = pytest.mark.e2e

BURST = 200
ROUNDS = 6  # a kill falls between the two appends of some execution in about one burst of three
NO_REPAIR = ("--repair-grace", "600", "--concurrency", str(BURST))  # the test's sweep repairs


async def test_sweep_repairs_the_control_log_after_a_sigkill_in_a_burst(
    tmp_path: Path, workers: Workers, record_property: pytest.RecordProperty
) -> None:
    seed = int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)
    record_property("seed", seed)
    engine = await flowli.connect(workers.url, registry)
    async with engine:
        # a burst of one-step executions whose steps end at spread instants, so that at any
        # moment some of them are between their last journal append and its announcement; a worker
        # killed at a random point of the burst; again, until a kill left an announcement missing
        eids: list[str] = []
        pids: set[int] = set()
        for burst in range(ROUNDS):
            batch = set(await asyncio.gather(*(
                engine.start("crash.steps", str(tmp_path), ["only"], None, 0.0, rng.uniform(0, 0.5))
                for _ in range(BURST)
            )))
            eids += sorted(batch)
            kill_after = rng.randint(10, BURST - 20)  # executions of the burst whose step ran
            pids.add(workers.spawn(f"a{burst}", *NO_REPAIR).pid)
            await until(lambda b=batch, k=kill_after: sum(line[0] in b for line in lines(tmp_path / EFFECTS)) >= k,
                        20, f"{kill_after} steps in worker a{burst}")
            workers.kill(f"a{burst}")
            missing = await store_of(engine).unannounced(datetime.now(UTC), 10 * len(eids))
            if store_of(engine).announces_in_write:
                assert missing == [], f"seed {seed}: a kill left lifecycle entries off the control log"
                break
            if any(e.kind is EntryKind.EXECUTION_COMPLETED for e in missing):
                break
        pids.add(workers.spawn("b", *NO_REPAIR).pid)
        for eid in eids:
            assert await engine.result(eid, timeout=25) in [[f"only:{pid}"] for pid in pids]
        workers.kill("b")

    fresh = await flowli.connect(workers.url, registry, repair_grace=timedelta(0))
    async with fresh:
        records = {eid: (await fresh.status(eid)).status for eid in eids}
        assert set(records.values()) == {Status.COMPLETED}
        listed = {s.eid: s.status for s in await fresh.list(limit=2 * len(eids))}
        stale = {eid for eid in eids if listed.get(eid) != records[eid]}
        unannounced = await store_of(fresh).unannounced(datetime.now(UTC), 10 * len(eids))
        ends = sum(e.kind is EntryKind.EXECUTION_COMPLETED for e in unannounced)
        report = (f"seed {seed}, {burst + 1} burst(s): {len(unannounced)} lifecycle entries missing from the control"
                  f" log ({ends} execution.completed), {len(stale)} executions listed with a stale status before"
                  " the sweep")
        print(report)
        record_property("unannounced_before_sweep", len(unannounced))
        record_property("completed_unannounced_before_sweep", ends)
        assert stale <= {e.eid for e in unannounced}, f"a stale status with no missing entry to repair it; {report}"

        for _ in range(len(unannounced) // 100 + 2):  # a sweep repairs a batch at most
            if not await fresh.sweep():
                break
        listed = {s.eid: s.status for s in await fresh.list(limit=2 * len(eids))}
        assert listed == records, report
        assert await store_of(fresh).unannounced(datetime.now(UTC), 10 * len(eids)) == []


async def test_sweep_appends_a_lifecycle_entry_that_a_worker_did_not_announce(tmp_path: Path, db_url: str) -> None:
    """Deterministic: a worker's last write (journal entry, status, release), through the Store,
    without the second append; a sweep after the repair grace appends it to the control log. (A
    store that announces in its writes has put it there in that write.)"""
    url = db_url
    engine = await flowli.connect(url, registry)  # the default grace: 5 s
    async with engine:
        eid = await engine.start("crash.steps", str(tmp_path), ["only"])
        owner, now = "crash-test:worker", datetime.now(UTC)
        acquired = await store_of(engine).acquire(eid, owner, timedelta(seconds=30), now)
        assert acquired.epoch is not None
        prov = Provenance(Actor("worker", owner), Site(worker=owner, epoch=acquired.epoch),
                          Code("crash.steps", "1", "root", "root"), now)
        entry = Entry(eid=eid, kind=EntryKind.EXECUTION_COMPLETED, provenance=prov, fid="root", value=["done"])
        written = await store_of(engine).write(
            Write(fence=Fence(eid, owner, acquired.epoch), entries=[entry],
                  status=StatusChange(eid, Status.COMPLETED, result=["done"]), release=True),
            now,
        )
        assert await engine.result(eid, timeout=5) == ["done"]
        control = [(e.kind, e.journal_seq) for e in await engine.control_log() if e.eid == eid]
        if store_of(engine).announces_in_write:  # the write put its end on the control log itself
            assert control == [(EntryKind.EXECUTION_STARTED, 1), (EntryKind.EXECUTION_COMPLETED, written.entry_seqs[0])]
            assert [(s.eid, s.status) for s in await engine.list()] == [(eid, Status.COMPLETED)]
            assert await store_of(engine).unannounced(datetime.now(UTC), 100) == []
            return
        assert [(s.eid, s.status) for s in await engine.list()] == [(eid, Status.PENDING)]
        await engine.sweep()  # within the grace: a live worker may be about to append it
        assert [(s.eid, s.status) for s in await engine.list()] == [(eid, Status.PENDING)]

    fresh = await flowli.connect(url, registry, repair_grace=timedelta(0))
    async with fresh:
        assert await fresh.sweep() == 1
        assert [(s.eid, s.status) for s in await fresh.list()] == [(eid, Status.COMPLETED)]
        control = [(e.kind, e.journal_seq) for e in await fresh.control_log() if e.eid == eid]
        assert control == [(EntryKind.EXECUTION_STARTED, 1), (EntryKind.EXECUTION_COMPLETED, written.entry_seqs[0])]
        assert await fresh.sweep() == 0  # repaired once


async def test_a_worker_that_does_not_crash_makes_both_appends(tmp_path: Path, db_url: str) -> None:
    """The complement of the repair: with no crash, every lifecycle entry of the journal reaches
    the control log through the worker itself, and nothing is left for the sweeper to repair."""
    engine = await flowli.connect(db_url, registry)
    async with engine:
        async with engine.worker(concurrency=4, sweeper=False):  # no sweeper repairs behind its back
            eid = await engine.start("crash.wait", str(tmp_path))
            await until(lambda: _status_is(engine, eid, Status.SUSPENDED), 10, "the execution to suspend")
            await engine.signal(eid, "go", 1, by="crash-test@example.com")
            assert await engine.result(eid, timeout=10) == f"after:{os.getpid()}"

            async def announced_end() -> bool:  # the second append follows the last write
                control = await engine.control_log()
                return any(e.eid == eid and e.kind is EntryKind.EXECUTION_COMPLETED for e in control)

            await until(announced_end, 10, "the end of the execution on the control log")
        journal = await engine.journal(eid)
        lifecycle = [(e.kind, e.seq) for e in journal if e.kind.lifecycle]
        control = [(e.kind, e.journal_seq) for e in await engine.control_log() if e.eid == eid]
        assert [k for k, _ in lifecycle] == [EntryKind.EXECUTION_STARTED, EntryKind.EXECUTION_SUSPENDED,
                                             EntryKind.EXECUTION_RESUMED, EntryKind.EXECUTION_COMPLETED]
        assert control == lifecycle
        assert await store_of(engine).unannounced(datetime.now(UTC), 100) == []


async def _status_is(engine: flowli.Engine, eid: str, status: Status) -> bool:
    return (await engine.status(eid)).status is status
