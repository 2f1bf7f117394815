"""Chaos on PostgreSQL: four worker processes share 1 000 executions of five steps; two of them
die of SIGKILL at random moments and one comes back. Every execution completes, every step ran
(at least once), every frame has one outcome, and no task is left unacked.

Each step appends ``"{eid} {step-name} {pid}"`` to ``effects.txt`` at its end (fsync'd); the
step name is the key of its frame (``root/effect:{step-name}``).
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import flowli
from flowli.domain import EntryKind

from ..pg import fresh_schema
from . import Workers, completed_counts, lines, summary, until
from .app import EFFECTS, registry

pytestmark = pytest.mark.e2e

EXECUTIONS = 1000
NAMES = ["s0", "s1", "s2", "s3", "s4"]
STEPS = EXECUTIONS * len(NAMES)
WORKERS = ["w0", "w1", "w2", "w3"]
COMPLETION_BOUND = 180.0  # seconds for every execution to complete, from the first start


@pytest.fixture
async def pg_workers(tmp_path: Path) -> AsyncIterator[Workers]:
    async with fresh_schema() as url:
        w = Workers(tmp_path, url)
        try:
            yield w
        finally:
            w.close()


async def stranded(engine: flowli.Engine, eids: list[str]) -> str:
    """The state of the executions that did not end (three at most): record, journal, tasks."""
    left = [r for r in await engine.statuses(eids) if not r.terminal]
    told = [f"{len(left)} executions did not end"]
    for r in left[:3]:
        ready = {t.id for t in await engine.tasks(eid=r.eid)}
        tasks = await engine.tasks(eid=r.eid, include_acked=True)
        told += [
            f"-- {r.eid}: {r.status.value}, lease {r.lease_owner} epoch {r.lease_epoch} until {r.lease_expires_at}",
            summary(await engine.journal(r.eid)),
            *(f"   task {t.id} {'ready' if t.id in ready else 'acked'} deliveries={t.deliveries} owner={t.lease_owner}"
              for t in tasks),
        ]
    return "\n".join(told)


@pytest.mark.timeout(300)
async def test_two_sigkills_and_a_restart_lose_no_execution(
    tmp_path: Path, pg_workers: Workers, record_property: pytest.RecordProperty
) -> None:
    workers = pg_workers
    seed = int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)
    record_property("seed", seed)
    # the kills fall at random points of the run (counted in steps done), a little past them
    first_kill = rng.randint(STEPS // 10, STEPS // 2)
    second_kill = rng.randint(first_kill + STEPS // 10, STEPS * 4 // 5)
    victims = rng.sample(WORKERS, 2)
    restart_after = rng.uniform(0.2, 3.0)
    plan = (f"seed {seed}: kill {victims[0]} after {first_kill} steps, restart it {restart_after:.1f} s later;"
            f" kill {victims[1]} after {second_kill} steps")
    print(plan)
    effects_file = tmp_path / EFFECTS

    def steps_done() -> int:
        return len(lines(effects_file))

    engine = await flowli.connect(workers.url, registry)
    async with engine:
        for name in WORKERS:
            workers.spawn(name)
        for name in WORKERS:
            await workers.ready(name)
        began = time.monotonic()
        eids: list[str] = []
        for at in range(0, EXECUTIONS, 100):
            eids += await asyncio.gather(*(
                engine.start("crash.steps", str(tmp_path), NAMES) for _ in range(at, min(at + 100, EXECUTIONS))
            ))

        async def kill_after(steps: int, name: str) -> None:
            await until(lambda: steps_done() >= steps, COMPLETION_BOUND, f"{steps} steps before killing {name}")
            await asyncio.sleep(rng.uniform(0, 0.2))
            workers.kill(name)

        await kill_after(first_kill, victims[0])
        await asyncio.sleep(restart_after)
        workers.spawn(f"{victims[0]}-again")
        await kill_after(second_kill, victims[1])

        async def all_ended() -> bool:
            return all(r.terminal for r in await engine.statuses(eids))

        remaining = COMPLETION_BOUND - (time.monotonic() - began)
        try:
            await until(all_ended, max(remaining, 1.0), f"the {EXECUTIONS} executions to end")
        except AssertionError as exc:
            raise AssertionError(f"{exc} ({plan})\n{await stranded(engine, eids)}") from None
        ran_for = time.monotonic() - began
        records = {r.eid: r for r in await engine.statuses(eids)}
        journals = {eid: await engine.journal(eid) for eid in eids}

        async def no_task_left() -> bool:
            return not await engine.tasks()

        # a task that a killed worker dequeued becomes visible again after its ttl (1.5 s);
        # a live worker dequeues and acks it, even for an execution that ended meanwhile
        try:
            await until(no_task_left, 30, "every task to be acked")
        except AssertionError:
            left = await engine.tasks()
            raise AssertionError(f"{len(left)} tasks left unacked: {[t.id for t in left[:10]]} ({plan})") from None

    effects = lines(effects_file)
    runs = Counter((line[0], line[1]) for line in effects)
    twice = sum(n - 1 for n in runs.values() if n > 1)
    report = f"{plan}; all ended in {ran_for:.1f} s; {twice} step effects ran more than once"
    print(report)
    record_property("effects_run_twice", twice)
    record_property("seconds_to_complete", round(ran_for, 1))

    statuses = Counter(r.status.value for r in records.values())
    failures = [r.error for r in records.values() if r.status.value != "completed"][:3]
    assert statuses == {"completed": EXECUTIONS}, (statuses, failures, report)
    missing = [(eid, n) for eid in eids for n in NAMES if runs[(eid, n)] < 1]
    assert not missing, f"{len(missing)} steps with no effect, e.g. {missing[:5]} ({report})"
    for eid in eids:
        journal = journals[eid]
        assert completed_counts(journal) == {f"root/effect:{n}": 1 for n in NAMES}, (eid, report)
        memo = {e.fid: e.value for e in journal if e.kind is EntryKind.FRAME_COMPLETED}
        assert records[eid].result == [memo[f"root/effect:{n}"] for n in NAMES], (eid, report)
        assert sum(e.kind is EntryKind.EXECUTION_COMPLETED for e in journal) == 1, (eid, report)
    # a kill is the only failure here: no worker logs an error (a lease renewal that fails
    # lets leases expire under live workers)
    logs = [line for name in workers.procs for line in workers.log(name).splitlines()]
    errors = Counter(line.split(" ERROR ", 1)[1] for line in logs if " ERROR " in line)
    causes = Counter(line for line in logs if re.match(r"[\w.]+(Error|Exception)\b", line))
    assert not errors, f"errors in the workers' logs: {dict(errors)}, raised as {dict(causes)} ({report})"
