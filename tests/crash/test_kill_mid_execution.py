"""A worker SIGKILLed in the middle of an execution: a second worker resumes it from the journal
and runs none of the completed steps again."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

import flowli
from flowli.domain import EntryKind

from . import Workers, completed_counts, epoch_of, lines, pid_of, summary, until
from .app import BEGUN, EFFECTS, RELEASE, registry

pytestmark = pytest.mark.e2e

NAMES = ["s0", "s1", "s2", "s3", "s4"]
HELD = "s2"


async def test_sigkill_mid_execution_then_second_worker_runs_only_the_rest(tmp_path: Path, workers: Workers) -> None:
    engine = await flowli.connect(workers.url, registry)
    async with engine:  # the test process starts and reads; it runs no worker
        a = workers.spawn("a")
        eid = await engine.start("crash.steps", str(tmp_path), NAMES, HELD, by="crash-test@example.com")
        await until(lambda: [eid, HELD, str(a.pid)] in lines(tmp_path / BEGUN), 20, f"step {HELD} to begin in worker A")
        before = await engine.journal(eid)
        workers.kill("a")
        (tmp_path / RELEASE).touch()  # the held step of worker B returns at once
        b = workers.spawn("b")
        value = await engine.result(eid, timeout=20)
        journal = await engine.journal(eid)

    assert value == [f"s0:{a.pid}", f"s1:{a.pid}", f"s2:{b.pid}", f"s3:{b.pid}", f"s4:{b.pid}"]

    done_before = {e.fid for e in before if e.kind is EntryKind.FRAME_COMPLETED}
    assert done_before == {"root/effect:s0", "root/effect:s1"}

    effects = [line for line in lines(tmp_path / EFFECTS) if line[0] == eid]
    assert Counter(line[1] for line in effects) == {name: 1 for name in NAMES}, effects
    ran_by = {line[1]: int(line[2]) for line in effects}
    assert ran_by == {"s0": a.pid, "s1": a.pid, "s2": b.pid, "s3": b.pid, "s4": b.pid}

    assert completed_counts(journal) == {
        "root/effect:s0": 1, "root/effect:s1": 1, "root/hold:s2": 1, "root/effect:s3": 1, "root/effect:s4": 1,
    }

    told = summary(journal)
    a_epochs = {epoch_of(e) for e in journal if pid_of(e) == a.pid and epoch_of(e) is not None}
    assert a_epochs, f"worker A appended no fenced entry\n{told}"
    resumed = [e for e in journal if e.kind is EntryKind.EXECUTION_RESUMED]
    assert resumed and {pid_of(e) for e in resumed} == {b.pid}, told
    b_epoch = epoch_of(resumed[0])
    assert b_epoch is not None and b_epoch > max(a_epochs), told

    after = [e for e in journal if (e.seq or 0) > (resumed[0].seq or 0)]
    frames = [e for e in after if e.kind.value.startswith("frame.")]
    assert frames, f"worker B appended no frame entry\n{told}"
    assert {pid_of(e) for e in frames} == {b.pid}, told
    assert all((epoch_of(e) or 0) >= b_epoch for e in frames), told
    assert journal[-1].kind is EntryKind.EXECUTION_COMPLETED, told
