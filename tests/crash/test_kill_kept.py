"""A worker that continued an execution from its workflow cache (no replay) is SIGKILLed in a
step; a second worker replays the journal that those continuations wrote and finishes it: no
memoized step runs again, every frame has one outcome, every message is received once."""

from __future__ import annotations

import os
import signal
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import flowli
from flowli.domain import EntryKind, Status

from . import Workers, completed_counts, lines, until
from .app import BEGUN, EFFECTS, RELEASE, STARTS, registry

pytestmark = pytest.mark.e2e

ROUNDS = 5
HOLD_AT = 3


async def _signal_after_step(engine: flowli.Engine, eid: str, folder: Path, k: int) -> None:
    """Signal ``go`` once round ``k``'s step is journaled and the execution waits at its receive."""

    async def waiting() -> bool:
        done = any(e.kind is EntryKind.FRAME_COMPLETED and e.fid is not None and e.fid.endswith(f":r{k}")
                   for e in await engine.journal(eid))
        return done and (await engine.status(eid)).status is Status.SUSPENDED

    await until(waiting, 20, f"round {k}'s receive")
    await engine.signal(eid, "go", k)


async def _continued_then_held(engine: flowli.Engine, workers: Workers, folder: Path) -> tuple[Any, str]:
    """Worker a runs a ``crash.rounds`` run through its first rounds (each resume a continuation
    from its cache) into the step that holds; its process and the run's eid."""
    a = workers.spawn("a")
    await workers.ready("a")
    eid = await engine.start("crash.rounds", str(folder), ROUNDS, HOLD_AT)
    for k in range(HOLD_AT):
        await _signal_after_step(engine, eid, folder, k)
    await until(lambda: any(line[1] == f"r{HOLD_AT}" for line in lines(folder / BEGUN)), 20,
                f"round {HOLD_AT}'s step to begin in worker a")
    return a, eid


async def test_a_worker_killed_after_continuing_from_its_cache_leaves_a_journal_that_replays(
    tmp_path: Path, workers: Workers
) -> None:
    engine = await flowli.connect(workers.url, registry)
    async with engine:
        a, eid = await _continued_then_held(engine, workers, tmp_path)
        # worker a resumed the execution three times and never started its function again
        assert lines(tmp_path / STARTS) == [[eid, str(a.pid)]]
        workers.kill("a")

        (tmp_path / RELEASE).write_text("")
        b = workers.spawn("b")
        for k in range(HOLD_AT, ROUNDS):
            await _signal_after_step(engine, eid, tmp_path, k)
        value = await engine.result(eid, timeout=30)
        journal = await engine.journal(eid)

    assert value == [f"r{k}:{a.pid}" for k in range(HOLD_AT)] + [f"r{k}:{b.pid}" for k in range(HOLD_AT, ROUNDS)]
    # b replayed once (its lease came after a's expired), then continued from its own cache
    assert lines(tmp_path / STARTS) == [[eid, str(a.pid)], [eid, str(b.pid)]]
    effects = [(line[1], line[2]) for line in lines(tmp_path / EFFECTS)]
    assert effects == [(f"r{k}", str(a.pid)) for k in range(HOLD_AT)] + \
        [(f"r{k}", str(b.pid)) for k in range(HOLD_AT, ROUNDS)]
    frames = [f"root/effect:r{k}" for k in range(ROUNDS) if k != HOLD_AT] + [f"root/hold:r{HOLD_AT}"]
    receives = [f"root/receive#{k}" for k in range(ROUNDS)]
    assert completed_counts(journal) == {fid: 1 for fid in frames + receives}
    received = [e.value["payload"] for e in journal if e.kind is EntryKind.FRAME_COMPLETED
                and e.fid in receives]
    assert received == list(range(ROUNDS))


async def test_a_worker_that_lost_the_lease_of_a_continued_run_writes_nothing_more(
    tmp_path: Path, workers: Workers
) -> None:
    """Worker a continues the run from its cache, then stalls (SIGSTOP) in a step past its lease;
    worker b recovers the run by replaying it; a, let run again, finds its lease lost and writes
    nothing; the run ends with each frame's one outcome."""
    engine = await flowli.connect(workers.url, registry)
    async with engine:
        a, eid = await _continued_then_held(engine, workers, tmp_path)
        await workers.pause("a")
        held = await engine.status(eid)

        async def lease_expired() -> bool:
            r = await engine.status(eid)
            return r.lease_expires_at is not None and r.lease_expires_at < datetime.now(UTC)

        await until(lease_expired, 10, "the lease of paused worker a to expire")
        (tmp_path / RELEASE).write_text("")
        b = workers.spawn("b")
        await _signal_after_step(engine, eid, tmp_path, HOLD_AT)
        os.kill(a.pid, signal.SIGCONT)
        await until(lambda: "lease lost" in workers.log("a").lower(), 10, "worker a to log that it lost the lease")
        for k in range(HOLD_AT + 1, ROUNDS):
            await _signal_after_step(engine, eid, tmp_path, k)
        value = await engine.result(eid, timeout=30)
        journal = await engine.journal(eid)

    assert value[:HOLD_AT] == [f"r{k}:{a.pid}" for k in range(HOLD_AT)]
    assert value[HOLD_AT] == f"r{HOLD_AT}:{b.pid}"
    # nothing that a wrote under the lease it lost is in the journal after its step began
    assert not [e for e in journal if e.provenance.site.pid == a.pid and e.provenance.site.epoch == held.lease_epoch
                and e.fid == f"root/hold:r{HOLD_AT}" and e.kind is not EntryKind.FRAME_STARTED]
    frames = [f"root/effect:r{k}" for k in range(ROUNDS) if k != HOLD_AT] + [f"root/hold:r{HOLD_AT}"]
    receives = [f"root/receive#{k}" for k in range(ROUNDS)]
    assert completed_counts(journal) == {fid: 1 for fid in frames + receives}
    assert [e.value["payload"] for e in journal if e.kind is EntryKind.FRAME_COMPLETED and e.fid in receives] \
        == list(range(ROUNDS))
