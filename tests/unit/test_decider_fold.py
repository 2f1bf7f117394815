"""Folding a decider's events: the pure part of deciders (``flowli.engine.deciders``), with no
store and no engine. What the engine stores as a decider's state is ``fold`` of its journal's
events; these tests hold the fold itself and the registration's refusals."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from flowli import Registry
from flowli.domain import Actor, Code, Entry, EntryKind, Provenance, RegistrationError, Site
from flowli.engine._decider import event_value, events_of  # private: the journal form of events, which verify folds
from flowli.engine.deciders import Event, Signal, Timer

pytestmark = pytest.mark.unit

T = datetime(2026, 1, 1, tzinfo=timezone.utc)


def evolve(state: dict[str, Any], event: Event) -> dict[str, Any]:
    return {**state, "total": state["total"] + event.data, "seen": [*state["seen"], event.kind]}


def decide(state: dict[str, Any], command: Any) -> tuple[list[Event], list[Any]]:
    return ([Event("added", command.payload)], []) if isinstance(command, Signal) else ([], [])


def counter(registry: Registry | None = None) -> Any:
    return (registry or Registry()).decider("counter", version="2", initial={"total": 0, "seen": []},
                                            evolve=evolve)(decide)


def entry(kind: EntryKind, value: Any, seq: int) -> Entry:
    return Entry(eid="e", kind=kind, fid="decider", value=value, seq=seq,
                 provenance=Provenance(Actor("human", "a@example.com"), Site(), Code("counter", "2"), T))


def test_folding_the_events_from_the_initial_state_gives_the_state_step_by_step() -> None:
    d = counter()
    events = [Event("added", 2), Event("added", 3), Event("added", -1)]
    assert d.fold(events) == {"total": 4, "seen": ["added"] * 3}
    # the fold of a journal in two parts is the fold of the whole: what each command does
    half = d.fold(events[:1])
    assert d.fold(events[1:], half, start=False) == d.fold(events)
    assert d.fold([]) == {"total": 0, "seen": []}


def test_a_fold_never_changes_the_initial_state_of_the_next_execution() -> None:
    def appending(state: dict[str, Any], event: Event) -> dict[str, Any]:
        state["seen"].append(event.kind)  # an evolve that mutates its input
        return state

    d = Registry().decider("mutating", initial={"seen": []}, evolve=appending)(decide)
    assert d.fold([Event("x")]) == {"seen": ["x"]}
    assert d.fold([Event("y")]) == {"seen": ["y"]}
    assert d.initial == {"seen": []}


def test_the_events_of_a_journal_are_its_event_entries_in_order() -> None:
    journal = [entry(EntryKind.EXECUTION_STARTED, {"workflow": "counter"}, 1),
               entry(EntryKind.EVENT, event_value(Event("added", 5)), 2),
               entry(EntryKind.EXECUTION_SUSPENDED, {"reason": "decider"}, 3),
               entry(EntryKind.EVENT, event_value(Event("added", 1)), 4)]
    assert events_of(journal) == [Event("added", 5), Event("added", 1)]
    assert counter().fold(events_of(journal))["total"] == 6


def test_decide_is_called_as_registered() -> None:
    d = counter()
    assert d.decide(d.start_state(), Signal("add", 7)) == ([Event("added", 7)], [])


def test_a_timer_takes_an_instant_or_a_delay_not_both() -> None:
    assert Timer("t", after=timedelta(seconds=5)).instant(T) == T + timedelta(seconds=5)
    assert Timer("t", at=T).instant(T + timedelta(days=1)) == T
    with pytest.raises(ValueError):
        Timer("t").instant(T)


def test_registration_refuses_what_cannot_work() -> None:
    registry = Registry()
    counter(registry)
    assert registry.decider_of("counter") is not None and registry.decider_of("other") is None
    with pytest.raises(RegistrationError, match="registered already"):
        counter(registry)
    with pytest.raises(RegistrationError, match="not JSON"):
        registry.decider("bad", initial={"at": T}, evolve=evolve)(decide)

    async def coroutine(state: Any, command: Any) -> Any:
        return [], []

    with pytest.raises(RegistrationError, match="plain function"):
        registry.decider("async", initial={}, evolve=evolve)(coroutine)  # type: ignore[arg-type]

    @registry.workflow("taken")
    async def taken(ctx: Any) -> None:
        return None

    with pytest.raises(RegistrationError, match="a workflow has that name"):
        registry.decider("taken", initial={}, evolve=evolve)(decide)
