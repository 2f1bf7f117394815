"""A direct start dies with its process: a worker process starts an execution itself (the record is
created leased to it, with no START task), and is SIGKILLed while a step of that execution holds.
No task points at the execution; the sweeper of a second worker finds the expired lease, and that
worker resumes it from the journal, runs only the steps not yet done, and completes it."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import flowli
from flowli.domain import EntryKind, Status, TaskKind

from . import Workers, completed_counts, epoch_of, lines, pid_of, summary, until
from .app import BEGUN, EFFECTS, RELEASE, registry

pytestmark = pytest.mark.e2e

SCRIPT = Path(__file__).resolve().parent / "start_and_work.py"
NAMES = ["s0", "s1", "s2", "s3", "s4"]
HELD = "s2"


def spawn_starter(workers: Workers, name: str, work_dir: Path, eid_file: Path) -> subprocess.Popen[bytes]:
    """The process that starts the execution and runs it; one of the test's workers (killed at its end)."""
    with open(workers.folder / f"{name}.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), workers.url, str(work_dir), "--names", *NAMES, "--hold-at", HELD,
             "--eid-file", str(eid_file), "--lease-ttl", "1.5"],
            stdout=log, stderr=subprocess.STDOUT, cwd=workers.folder,
        )
    workers.procs[name] = proc
    return proc


async def test_sigkill_of_the_process_that_started_and_ran_an_execution(tmp_path: Path, workers: Workers) -> None:
    eid_file = tmp_path / "eid.txt"
    engine = await flowli.connect(workers.url, registry)
    async with engine:  # the test process reads; it starts nothing and runs no worker
        a = spawn_starter(workers, "a", tmp_path, eid_file)
        await until(lambda: eid_file.exists() or a.poll() is not None, 20, "process A to start the execution")
        assert a.poll() is None, f"process A exited with {a.returncode}:\n{workers.log('a')}"
        eid = eid_file.read_text().strip()
        await until(lambda: [eid, HELD, str(a.pid)] in lines(tmp_path / BEGUN), 20, f"step {HELD} to begin in A")

        # the start was direct: leased to A at epoch 1 from its creation, no START task, ever
        record = await engine.status(eid)
        assert record.status is Status.RUNNING, record
        assert record.lease_owner is not None and f":{a.pid}:" in record.lease_owner, record
        assert record.lease_epoch == 1, record
        assert await engine.tasks(eid=eid, include_acked=True) == []
        before = await engine.journal(eid)
        assert before[0].kind is EntryKind.EXECUTION_STARTED and pid_of(before[0]) == a.pid
        assert not [e for e in before if e.kind is EntryKind.EXECUTION_RESUMED], summary(before)

        workers.kill("a")
        (tmp_path / RELEASE).touch()  # the held step returns at once when it runs again
        b = workers.spawn("b")
        value = await engine.result(eid, timeout=30)
        journal = await engine.journal(eid)
        tasks = await engine.tasks(eid=eid, include_acked=True)

    told = summary(journal)
    assert value == [f"s0:{a.pid}", f"s1:{a.pid}", f"s2:{b.pid}", f"s3:{b.pid}", f"s4:{b.pid}"], told

    done_before = {e.fid for e in before if e.kind is EntryKind.FRAME_COMPLETED}
    assert done_before == {"root/effect:s0", "root/effect:s1"}, summary(before)

    # each step ran to its end once, and is memoized once in the journal
    effects = [line for line in lines(tmp_path / EFFECTS) if line[0] == eid]
    assert Counter(line[1] for line in effects) == {name: 1 for name in NAMES}, effects
    assert {line[1]: int(line[2]) for line in effects} == {
        "s0": a.pid, "s1": a.pid, "s2": b.pid, "s3": b.pid, "s4": b.pid,
    }
    assert completed_counts(journal) == {
        "root/effect:s0": 1, "root/effect:s1": 1, "root/hold:s2": 1, "root/effect:s3": 1, "root/effect:s4": 1,
    }, told
    assert [e.seq for e in journal] == list(range(1, len(journal) + 1)), told
    assert [e.kind for e in journal].count(EntryKind.EXECUTION_STARTED) == 1, told

    # A wrote under the lease it was created with (epoch 1); B resumed it under a later one
    a_epochs = {epoch_of(e) for e in journal if pid_of(e) == a.pid and epoch_of(e) is not None}
    assert a_epochs == {1}, told
    resumed = [e for e in journal if e.kind is EntryKind.EXECUTION_RESUMED]
    assert resumed and {pid_of(e) for e in resumed} == {b.pid}, told
    b_epoch = epoch_of(resumed[0])
    assert b_epoch is not None and b_epoch > 1, told
    after = [e for e in journal if (e.seq or 0) > (resumed[0].seq or 0)]
    assert after and {pid_of(e) for e in after} == {b.pid}, told
    assert all((epoch_of(e) or 0) >= b_epoch for e in after if e.kind.value.startswith("frame.")), told
    assert journal[-1].kind is EntryKind.EXECUTION_COMPLETED, told

    # the recovery came from the sweeper (a RESUME task), never from a START task
    assert tasks and all(t.kind is TaskKind.RESUME for t in tasks), tasks
