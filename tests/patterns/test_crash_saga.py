"""A saga whose worker is SIGKILLed in the middle of its compensation: another worker replays
it from the journal and finishes compensating, each undo's effect exactly once, in reverse order,
and the failure that started the compensation is the execution's failure."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

import flowli
from flowli.domain import EntryKind, StepFailed

from ..crash import completed_counts, lines, pid_of, summary, until
from . import PatternWorkers
from .app import BEGUN, EFFECTS, RELEASE, registry

pytestmark = pytest.mark.e2e

TRIP = "paris"


async def test_a_saga_killed_mid_compensation_compensates_each_step_exactly_once(
    tmp_path: Path, workers: PatternWorkers
) -> None:
    engine = await flowli.connect(workers.url, registry)
    async with engine:  # the test process starts and reads; it runs no worker
        a = workers.spawn("a")
        await workers.ready("a")
        eid = await engine.start("patterns.trip", str(tmp_path), TRIP, by="travel-desk@example.com")
        # the second undo (cancel_flight) holds in worker A: kill A there
        await until(lambda: [TRIP, "cancel_flight", str(a.pid)] in lines(tmp_path / BEGUN), 30,
                    "the second undo to begin in worker A")
        workers.kill("a")
        (tmp_path / RELEASE).touch()  # the undo that worker B runs again returns at once
        b = workers.spawn("b")
        with pytest.raises(StepFailed) as failed:
            await engine.result(eid, timeout=60)
        journal = await engine.journal(eid)

    told = summary(journal)
    assert failed.value.fid == "root/charge_card:2", told
    assert failed.value.error_type == "ValueError" and f"card declined for {TRIP}" in failed.value.message

    effects = lines(tmp_path / EFFECTS)
    assert [(line[0], line[1]) for line in effects] == [
        (TRIP, "reserve_flight"), (TRIP, "reserve_hotel"), (TRIP, "cancel_hotel"), (TRIP, "cancel_flight"),
    ], effects  # each effect once, the undos in reverse order
    assert {line[1]: int(line[2]) for line in effects} == {
        "reserve_flight": a.pid, "reserve_hotel": a.pid, "cancel_hotel": a.pid, "cancel_flight": b.pid,
    }, effects
    assert Counter((line[1], int(line[2])) for line in lines(tmp_path / BEGUN)) == {
        ("cancel_flight", a.pid): 1, ("cancel_flight", b.pid): 1,  # the killed undo ran again, once
    }

    assert completed_counts(journal) == {
        "root/reserve_flight:0": 1, "root/reserve_hotel:1": 1,
        "root/cancel_hotel:undo-1": 1, "root/cancel_flight:undo-0": 1,
    }, told
    [charge] = [e for e in journal if e.kind is EntryKind.FRAME_FAILED]
    assert charge.fid == "root/charge_card:2" and pid_of(charge) == a.pid, told
    [undo_hotel] = [e for e in journal if e.kind is EntryKind.FRAME_COMPLETED and e.fid == "root/cancel_hotel:undo-1"]
    [undo_flight] = [e for e in journal if e.kind is EntryKind.FRAME_COMPLETED and e.fid == "root/cancel_flight:undo-0"]
    assert (pid_of(undo_hotel), pid_of(undo_flight)) == (a.pid, b.pid), told
    assert (undo_hotel.seq or 0) < (undo_flight.seq or 0), told
    assert journal[-1].kind is EntryKind.EXECUTION_FAILED and pid_of(journal[-1]) == b.pid, told
