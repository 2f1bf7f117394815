"""saga under normal runs: the actions run in order; when one fails, the completed ones are
undone in reverse order, each undo a step of its own, and the failure is raised again."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from flowli import Context, Registry
from flowli.domain import EntryKind, RetryPolicy, StepFailed
from flowli.patterns import Action, saga

pytestmark = pytest.mark.integration


class Bookings:
    """Steps that note what they did, in the order they ran."""

    def __init__(self, fail_at: str | None = None, flaky_undo: int = 0):
        self.done: list[str] = []
        self.fail_at = fail_at
        self.flaky_undo = flaky_undo

    def do(self, name: str) -> Any:
        def action(trip: str) -> str:
            if name == self.fail_at:
                raise ValueError(f"{name} refused {trip}")
            self.done.append(name)
            return f"{name}-{trip}"

        action.__name__ = name
        return action

    def undo(self, name: str) -> Any:
        def compensation(value: str) -> str:
            if name == "cancel_hotel" and self.flaky_undo > 0:
                self.flaky_undo -= 1
                raise ConnectionError("the hotel's API is down")
            self.done.append(f"{name} {value}")
            return f"{name} done"

        compensation.__name__ = name
        return compensation


def trip_registry(b: Bookings, **undo_options: Any) -> Registry:
    registry = Registry()

    @registry.workflow("trip")
    async def trip(ctx: Context, name: str) -> list[Any]:
        return await saga(ctx, [
            Action(b.do("reserve_flight"), (name,), undo=b.undo("cancel_flight")),
            Action(b.do("notify"), (name,)),  # no undo: nothing to compensate
            Action(b.do("reserve_hotel"), (name,), undo=b.undo("cancel_hotel"), **undo_options),
            Action(b.do("charge_card"), (name,), undo=b.undo("refund"), key="charge"),
        ])

    return registry


async def test_a_saga_that_succeeds_returns_the_values_of_its_undoable_actions(open_engine):
    b = Bookings()
    async with open_engine(trip_registry(b)) as engine:
        eid = await engine.start("trip", "rome")
        assert await engine.result(eid, timeout=30) == ["reserve_flight-rome", "reserve_hotel-rome", "charge_card-rome"]
    assert b.done == ["reserve_flight", "notify", "reserve_hotel", "charge_card"]


async def test_a_failure_at_the_last_action_undoes_the_others_in_reverse_and_is_raised_again(open_engine):
    b = Bookings(fail_at="charge_card")
    async with open_engine(trip_registry(b)) as engine:
        eid = await engine.start("trip", "oslo")
        with pytest.raises(StepFailed) as failed:
            await engine.result(eid, timeout=30)
        journal = await engine.journal(eid)

    assert failed.value.fid == "root/charge_card:charge"
    assert failed.value.error_type == "ValueError" and "charge_card refused oslo" in failed.value.message
    assert b.done == [
        "reserve_flight", "notify", "reserve_hotel",
        "cancel_hotel reserve_hotel-oslo", "cancel_flight reserve_flight-oslo",
    ]
    completed = [e.fid for e in journal if e.kind is EntryKind.FRAME_COMPLETED]
    assert completed == [
        "root/reserve_flight:0", "root/notify:1", "root/reserve_hotel:2",
        "root/cancel_hotel:undo-2", "root/cancel_flight:undo-0",
    ]
    assert journal[-1].kind is EntryKind.EXECUTION_FAILED
    assert journal[-1].error is not None and journal[-1].error["fid"] == "root/charge_card:charge"


async def test_a_failure_at_the_first_action_undoes_nothing(open_engine):
    b = Bookings(fail_at="reserve_flight")
    async with open_engine(trip_registry(b)) as engine:
        with pytest.raises(StepFailed, match="root/reserve_flight:0"):
            await engine.result(await engine.start("trip", "lima"), timeout=30)
    assert b.done == []


async def test_an_undo_that_fails_is_retried_until_it_is_done(open_engine):
    b = Bookings(fail_at="charge_card", flaky_undo=2)
    retry = RetryPolicy(max_attempts=5, backoff=timedelta(milliseconds=20), backoff_factor=1.0)
    async with open_engine(trip_registry(b, undo_retry=retry)) as engine:
        eid = await engine.start("trip", "kyiv")
        with pytest.raises(StepFailed, match="root/charge_card:charge"):
            await engine.result(eid, timeout=30)
        journal = await engine.journal(eid)
    undo = [(str(e.kind), e.attempt) for e in journal if e.fid == "root/cancel_hotel:undo-2" and e.kind in
            (EntryKind.FRAME_FAILED, EntryKind.FRAME_COMPLETED)]
    assert undo == [("frame.failed", 1), ("frame.failed", 2), ("frame.completed", 3)]
    assert b.done[-2:] == ["cancel_hotel reserve_hotel-kyiv", "cancel_flight reserve_flight-kyiv"]
