"""A paused worker loses its lease: another worker recovers the execution and completes it, and
the paused worker, once it runs again, gets LeaseLost and writes nothing more."""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import flowli
from flowli.domain import Entry, EntryKind, Status

from . import Workers, epoch_of, lines, pid_of, summary, until
from .app import BEGUN, RELEASE, registry

pytestmark = pytest.mark.e2e

NAMES = ["s0", "s1", "s2"]
HELD = "s1"
HOLD_SECONDS = 4.0  # longer than the lease (1.5 s in the workers)


@dataclass
class Outcome:
    a_pid: int
    b_pid: int
    a_epoch: int
    value: Any
    journal_at_end: list[Entry]
    journal: list[Entry]
    a_log: str
    a_alive: bool


async def pause_a_until_b_completes(tmp_path: Path, workers: Workers) -> Outcome:
    """Worker A runs the held step; the test SIGSTOPs A, waits out its lease, lets worker B
    recover and complete the execution, then SIGCONTs A and waits for A to log the lost lease."""
    engine = await flowli.connect(workers.url, registry)
    async with engine:
        a = workers.spawn("a")
        eid = await engine.start("crash.steps", str(tmp_path), NAMES, HELD, HOLD_SECONDS)

        async def held_step_started() -> bool:
            journal = await engine.journal(eid)
            return [eid, HELD, str(a.pid)] in lines(tmp_path / BEGUN) and any(
                e.kind is EntryKind.FRAME_STARTED and e.fid == f"root/hold:{HELD}" for e in journal
            )

        await until(held_step_started, 20, f"step {HELD} to begin in worker A")
        await workers.pause("a")
        record = await engine.status(eid)
        assert record.status is Status.RUNNING and record.lease_owner is not None

        async def lease_expired() -> bool:
            r = await engine.status(eid)
            return r.lease_expires_at is not None and r.lease_expires_at < datetime.now(UTC)

        await until(lease_expired, 10, "the lease of paused worker A to expire")
        (tmp_path / RELEASE).touch()  # the held step of worker B returns at once
        b = workers.spawn("b")
        value = await engine.result(eid, timeout=20)
        journal_at_end = await engine.journal(eid)

        os.kill(a.pid, signal.SIGCONT)
        await until(lambda: "lease lost" in workers.log("a").lower(), 10, "worker A to log that it lost the lease")
        # A logs it when its activation has ended; give A a few more renewals and sweeps, in
        # which it must not touch the execution either, then read the journal again
        await asyncio.sleep(1.0)
        journal = await engine.journal(eid)
        return Outcome(a.pid, b.pid, record.lease_epoch, value, journal_at_end, journal, workers.log("a"), a.poll() is None)


async def test_paused_worker_loses_its_lease_and_writes_nothing_more(tmp_path: Path, workers: Workers) -> None:
    o = await pause_a_until_b_completes(tmp_path, workers)
    assert o.value == [f"s0:{o.a_pid}", f"s1:{o.b_pid}", f"s2:{o.b_pid}"]
    assert o.journal == o.journal_at_end, "worker A appended to the journal after it lost the lease"
    assert o.a_alive, f"worker A died of LeaseLost:\n{o.a_log}"

    told = summary(o.journal)
    resumed = [e for e in o.journal if e.kind is EntryKind.EXECUTION_RESUMED]
    assert resumed and {pid_of(e) for e in resumed} == {o.b_pid}, told
    b_epoch = epoch_of(resumed[0])
    assert b_epoch is not None and b_epoch > o.a_epoch, told
    after = [e for e in o.journal if (e.seq or 0) > (resumed[0].seq or 0)]
    assert after and {pid_of(e) for e in after} == {o.b_pid}, told
    assert all((epoch_of(e) or 0) >= b_epoch for e in after), told
    by_a = [e for e in o.journal if pid_of(e) == o.a_pid and epoch_of(e) is not None]
    assert by_a and {epoch_of(e) for e in by_a} == {o.a_epoch}, told
    assert all((e.seq or 0) < (resumed[0].seq or 0) for e in by_a), told
    assert [(e.fid, pid_of(e)) for e in o.journal if e.kind is EntryKind.FRAME_COMPLETED] == [
        ("root/effect:s0", o.a_pid), (f"root/hold:{HELD}", o.b_pid), ("root/effect:s2", o.b_pid),
    ], told


async def test_lost_lease_is_one_warning_not_an_error(tmp_path: Path, workers: Workers) -> None:
    """A lost lease is an expected event of the protocol: the worker logs it once, as a warning,
    and leaves no task whose exception nobody retrieved (asyncio logs those as errors)."""
    o = await pause_a_until_b_completes(tmp_path, workers)
    assert o.a_log.lower().count("lease lost") == 1, o.a_log
    assert "Task exception was never retrieved" not in o.a_log, o.a_log
    assert " ERROR " not in o.a_log, o.a_log
