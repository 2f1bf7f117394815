"""Many processes on one PostgreSQL schema: the schema upgrade, the spread of executions, the
sweeper in every worker, recovery, and the wake-up by notification.

The worker processes are those of the crash tests (``tests/crash/worker_main.py``).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from importlib import resources
from pathlib import Path

import pytest

import flowli
from flowli.domain import EntryKind, Status, TaskKind
from flowli.store.postgres import parse_url

from .crash import Workers, lines, pid_of, summary, until
from .crash.app import BEGUN, RELEASE, registry
from .pg import fresh_schema

pytestmark = pytest.mark.e2e


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    async with fresh_schema(empty=True) as url:  # new: the processes migrate it themselves
        yield url


@pytest.fixture
def workers(tmp_path: Path, pg_url: str) -> Iterator[Workers]:
    w = Workers(tmp_path, pg_url)
    try:
        yield w
    finally:
        w.close()


async def spawn_ready(workers: Workers, names: list[str], *options: str) -> list[int]:
    procs = [workers.spawn(name, *options) for name in names]
    for name in names:
        await workers.ready(name)
    return [p.pid for p in procs]


async def all_completed(engine: flowli.Engine, eids: list[str], timeout: float) -> None:
    async def ended() -> bool:
        return all(r.terminal for r in await engine.statuses(eids))

    await until(ended, timeout, f"{len(eids)} executions to end")
    statuses = Counter(r.status for r in await engine.statuses(eids))
    assert statuses == {Status.COMPLETED: len(eids)}, statuses


# ---- the schema ---------------------------------------------------------------------------

CONNECT = textwrap.dedent("""
    import asyncio, pathlib, sys, time
    import flowli

    async def main(url, ready, go):
        pathlib.Path(ready).touch()
        while not pathlib.Path(go).exists():
            time.sleep(0.001)
        engine = await flowli.connect(url, flowli.Registry())
        await engine.close()

    asyncio.run(main(*sys.argv[1:]))
""")


def connect_process(url: str, ready: Path, go: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", CONNECT, url, str(ready), str(go)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


async def test_six_processes_upgrade_a_fresh_schema_once(tmp_path: Path, pg_url: str) -> None:
    """Six processes connect at the same instant (each waits for a ``go`` file): each one
    succeeds, and the schema holds each migration once."""
    import asyncpg

    go = tmp_path / "go"
    procs = [connect_process(pg_url, tmp_path / f"{i}.ready", go) for i in range(6)]
    try:
        await until(lambda: all((tmp_path / f"{i}.ready").exists() or procs[i].poll() is not None for i in range(6)),
                    30, "six processes to import flowli")
        go.touch()
        outputs = [await asyncio.to_thread(p.communicate, timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    failed = [(p.returncode, out.decode(errors="replace")) for p, (out, _) in zip(procs, outputs) if p.returncode != 0]
    assert not failed, failed

    folder = resources.files("flowli.store") / "sql" / "postgres"
    migrations = sorted(int(f.name.split("_", 1)[0]) for f in folder.iterdir() if f.name.endswith(".sql"))
    assert migrations
    dsn, schema = parse_url(pg_url)
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(f'SELECT version FROM "{schema}".schema_version')
    finally:
        await conn.close()
    assert Counter(r["version"] for r in rows) == {v: 1 for v in migrations}


# ---- many workers -------------------------------------------------------------------------


async def test_executions_spread_across_workers(tmp_path: Path, pg_url: str, workers: Workers) -> None:
    """Three workers of eight slots each, sixty executions of four steps: the executions run
    in more than one of them (each slot holds one execution at a time)."""
    pids = await spawn_ready(workers, ["a", "b", "c"], "--concurrency", "8")
    engine = await flowli.connect(pg_url, registry)
    async with engine:
        eids = await asyncio.gather(*(
            engine.start("crash.steps", str(tmp_path), ["s0", "s1", "s2", "s3"], None, 0.0, 0.05) for _ in range(60)
        ))
        await all_completed(engine, eids, 60)
        journals = [await engine.journal(eid) for eid in eids]
    ran_in = Counter(pid_of(e) for journal in journals for e in journal if e.kind is EntryKind.FRAME_COMPLETED)
    print(f"frame.completed entries by worker pid: {dict(ran_in)}")
    assert set(ran_in) <= set(pids), (ran_in, pids)
    assert len(ran_in) >= 2, f"every step ran in one worker: {dict(ran_in)}"


async def test_sweepers_in_every_worker_fire_each_timer_once(tmp_path: Path, pg_url: str, workers: Workers) -> None:
    """Three workers, each with its sweeper (every 0.2 s); thirty executions sleep a second:
    each timer fires once (one RESUME ``timer:`` task), and after the suspension of the sleep
    the execution resumes once."""
    await spawn_ready(workers, ["a", "b", "c"])
    engine = await flowli.connect(pg_url, registry)
    async with engine:
        eids = await asyncio.gather(*(engine.start("crash.nap", str(tmp_path), 1.0) for _ in range(30)))
        await all_completed(engine, eids, 60)
        tasks = await engine.tasks(include_acked=True)
        journals = {eid: await engine.journal(eid) for eid in eids}

    for eid in eids:
        fired = [t.id for t in tasks if t.eid == eid and t.kind is TaskKind.RESUME and "timer:" in t.id]
        assert len(fired) == 1, (eid, fired)
        journal = journals[eid]
        told = summary(journal)
        suspended = [e.seq for e in journal if e.kind is EntryKind.EXECUTION_SUSPENDED]
        # one suspension (the sleep), one resumption after it, and the end
        assert len(suspended) == 1, told
        resumed = [e for e in journal if e.kind is EntryKind.EXECUTION_RESUMED and (e.seq or 0) > suspended[0]]
        assert len(resumed) == 1, told
        sleep_done = [e for e in journal if e.kind is EntryKind.FRAME_COMPLETED and e.fid == "root/sleep#0"]
        assert len(sleep_done) == 1 and (sleep_done[0].seq or 0) > (resumed[0].seq or 0), told


async def test_each_dead_execution_is_recovered_once(tmp_path: Path, pg_url: str, workers: Workers) -> None:
    """Worker A dies (SIGKILL) in the held step of twenty executions; three workers, each with
    its sweeper, recover each of them by exactly one RESUME ``recover:`` task."""
    (a,) = await spawn_ready(workers, ["a"])
    engine = await flowli.connect(pg_url, registry)
    async with engine:
        eids = await asyncio.gather(*(
            engine.start("crash.steps", str(tmp_path), ["s0", "held", "s1"], "held", 60.0) for _ in range(20)
        ))
        await until(lambda: {line[0] for line in lines(tmp_path / BEGUN)} >= set(eids), 30,
                    "every execution to begin its held step in worker A")
        workers.kill("a")
        (tmp_path / RELEASE).touch()  # the held steps of the next workers return at once
        await spawn_ready(workers, ["b", "c", "d"])
        await all_completed(engine, eids, 60)
        tasks = await engine.tasks(include_acked=True)
        journals = {eid: await engine.journal(eid) for eid in eids}

    for eid in eids:
        recovered = [t.id for t in tasks if t.eid == eid and t.kind is TaskKind.RESUME and "recover:" in t.id]
        assert len(recovered) == 1, (eid, recovered)
        told = summary(journals[eid])
        resumed = [e for e in journals[eid] if e.kind is EntryKind.EXECUTION_RESUMED]
        assert len(resumed) == 1 and pid_of(resumed[0]) != a, told


async def test_a_notification_wakes_an_idle_worker(tmp_path: Path, pg_url: str, workers: Workers) -> None:
    """A worker that polls at most once a minute, idle: an execution started from this process
    completes within a bound shorter than the wait for its next poll, so a notification woke it.

    The idle worker doubles its wait between polls (10 ms, 20 ms, ... up to the poll interval),
    from when its dequeue loop starts, after it writes its ready file: once idle for more than
    10.23 s, its next poll comes 20.47 s after it went idle. Started 12 s after the ready file,
    the execution would wait more than 8 s for a poll (on SQLite, which sends no notification,
    this very setup completes after about 8.6 s); the test allows it 6 s."""
    engine = await flowli.connect(pg_url, registry)
    async with engine:
        await spawn_ready(workers, ["idle"], "--poll-interval", "60", "--sweep-interval", "60")
        await asyncio.sleep(12)
        began = time.monotonic()
        eid = await engine.start("crash.steps", str(tmp_path), ["s0", "s1"])
        value = await engine.result(eid, timeout=6)
        print(f"completed {time.monotonic() - began:.2f} s after its start")
    pid = workers.procs["idle"].pid
    assert value == [f"s0:{pid}", f"s1:{pid}"]
