"""One schedule, three executions of it, three worker processes, and a SIGKILL in the middle of
a tick's child: each tick's child execution exists once and its effect happens once."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import flowli
from flowli.domain import EntryKind

from ..crash import lines, summary, until
from . import PatternWorkers
from .app import BEGUN, EFFECTS, HOLD_TICK, RELEASE, registry

pytestmark = pytest.mark.e2e

EVERY = 2.0
TICKS = 3


async def test_three_schedulers_on_three_workers_run_each_tick_once_across_a_kill(
    tmp_path: Path, workers: PatternWorkers
) -> None:
    engine = await flowli.connect(workers.url, registry)
    async with engine:  # the test process starts and reads; it runs no worker
        for name in "abc":
            workers.spawn(name)
        for name in "abc":
            await workers.ready(name)
        start = datetime.now(UTC) + timedelta(seconds=2)
        stamps = [(start + n * timedelta(seconds=EVERY)).isoformat() for n in range(TICKS)]
        (tmp_path / HOLD_TICK).write_text(stamps[1])  # the child of the second tick holds
        eids = [await engine.start("patterns.schedule", start.isoformat(), EVERY, TICKS, by="cron@example.com")
                for _ in range(3)]

        begun = await until(lambda: [line for line in lines(tmp_path / BEGUN) if line[0] == stamps[1]], 60,
                            "the child of the second tick to begin")
        holder = next(name for name, proc in workers.procs.items() if proc.pid == int(begun[0][2]))
        workers.kill(holder)
        (tmp_path / RELEASE).touch()
        workers.spawn("d")

        mine = [await engine.result(eid, timeout=60) for eid in eids]
        children = await engine.list(workflow="patterns.tick")
        records = [await engine.status(c.eid) for c in children]
        journals = [await engine.journal(eid) for eid in eids]

    told = "\n\n".join(summary(j) for j in journals)
    assert sorted(stamp for ran in mine for stamp in ran) == stamps, (mine, told)  # each tick by one of them

    assert Counter(r.args[0] for r in records) == Counter(stamps), [(r.eid, r.args) for r in records]
    assert {r.status.value for r in records} == {"completed"}
    assert {r.parent_eid for r in records} <= set(eids)

    effects = lines(tmp_path / EFFECTS)
    assert Counter(line[0] for line in effects) == Counter(stamps), effects  # each tick's effect once
    held = [line for line in lines(tmp_path / BEGUN) if line[0] == stamps[1]]
    assert len(held) == 2 and held[0][2] != held[1][2], held  # killed in one worker, run again in another
    assert [line[2] for line in effects if line[0] == stamps[1]] == [held[1][2]]

    claims = [e.value for j in journals for e in j
              if e.kind is EntryKind.FRAME_COMPLETED and (e.fid or "").startswith("root/claim#")]
    assert sorted(claims) == [False] * (2 * TICKS) + [True] * TICKS, told  # one winner per tick
