"""Many executions, a worker SIGKILLed at a random moment, then a second worker: every execution
completes, every frame has one outcome, and no memoized step runs again."""

from __future__ import annotations

import asyncio
import os
import random
from collections import Counter
from pathlib import Path

import pytest

import flowli
from flowli.domain import EntryKind

from . import Workers, completed_counts, lines, pid_of, step_name
from .app import EFFECTS, registry

pytestmark = pytest.mark.e2e

EXECUTIONS = 20
NAMES = ["s0", "s1", "s2", "s3"]
PAUSE = 0.25  # seconds in each step: an execution lasts about a second in worker A


async def test_random_sigkill_then_second_worker_completes_all(
    tmp_path: Path, workers: Workers, record_property: pytest.RecordProperty
) -> None:
    seed = int.from_bytes(os.urandom(4), "big")
    delay = random.Random(seed).uniform(0.1, 1.0)
    record_property("seed", seed)
    engine = await flowli.connect(workers.url, registry)
    async with engine:
        a = workers.spawn("a")
        await workers.ready("a")
        eids = await asyncio.gather(
            *(engine.start("crash.steps", str(tmp_path), NAMES, None, 0.0, PAUSE) for _ in range(EXECUTIONS))
        )
        await asyncio.sleep(delay)
        workers.kill("a")
        before = {eid: await engine.journal(eid) for eid in eids}  # A is dead: this is the state at the kill
        b = workers.spawn("b")
        values = {eid: await engine.result(eid, timeout=25) for eid in eids}
        journals = {eid: await engine.journal(eid) for eid in eids}

    memoized = {
        (eid, step_name(e.fid)): pid_of(e)
        for eid, journal in before.items()
        for e in journal
        if e.kind is EntryKind.FRAME_COMPLETED and e.fid is not None
    }
    effects = lines(tmp_path / EFFECTS)
    runs = Counter((line[0], line[1]) for line in effects)
    twice = {k: n for k, n in runs.items() if n > 1}
    report = (f"seed {seed}, kill after {delay:.2f} s: {len(memoized)} steps memoized before the kill,"
              f" {len(twice)} steps ran twice (running at the kill)")
    print(report)
    record_property("steps_run_twice", len(twice))
    record_property("steps_memoized_before_kill", len(memoized))

    for eid in eids:
        journal = journals[eid]
        assert completed_counts(journal) == {f"root/effect:{n}": 1 for n in NAMES}, (eid, report)
        first = {e.fid: e.value for e in journal if e.kind is EntryKind.FRAME_COMPLETED}
        assert values[eid] == [first[f"root/effect:{n}"] for n in NAMES], (eid, report)
        for name, value in zip(NAMES, values[eid]):
            assert value in (f"{name}:{a.pid}", f"{name}:{b.pid}"), (eid, value, report)
            assert runs[(eid, name)] >= 1, (eid, name, report)

    for (eid, name), pid in memoized.items():
        assert pid == a.pid
        ran = [int(line[2]) for line in effects if (line[0], line[1]) == (eid, name)]
        assert ran == [a.pid], f"memoized step {eid} {name} ran again: {ran} ({report})"
        assert values[eid][NAMES.index(name)] == f"{name}:{a.pid}"
    assert set(runs) == {(eid, n) for eid in eids for n in NAMES}
