"""Deciders in the engine, on both backends: an order decider (start -> a DELEGATE "charge",
retried on a timer after a failure or an expired lease -> a signal "ship" -> a child execution
-> the end) driven through crashes between writes, lease expiry, timers, signals, a child's end,
cancel, a middleware refusal and a command racing another on the state's version. After each,
folding the journal with the registered ``evolve`` gives the stored state."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

import flowli
from flowli import Context, Registry
from flowli.domain import EntryKind, Status
from flowli.engine.deciders import (
    Answered,
    Cancel,
    CancelRequested,
    Child,
    ChildEnded,
    Complete,
    Delegate,
    Event,
    Expired,
    Fail,
    Failed,
    Signal,
    Start,
    Timer,
    TimerFired,
)
from flowli.testing import Clock, drain

from .conftest import FAST

pytestmark = pytest.mark.integration

RETRY = timedelta(seconds=30)
MAX_ATTEMPTS = 3


def decide(state: dict[str, Any], command: Any) -> tuple[list[Event], list[Any]]:
    """An order: charge it (a DELEGATE on ``payments``, up to three attempts, each retry after a
    timer), wait for ``ship``, ship it (a child execution), end with what the child returned."""
    match command:
        case Start(input=order):
            return [Event("order.placed", order)], [Delegate("charge", "payments", order, attempt=1)]
        case Answered(key="charge", attempt=attempt, value=value) if state["status"] == "charging":
            return [Event("charge.succeeded", {"attempt": attempt, "receipt": value})], []
        case Failed(key="charge", attempt=attempt) | Expired(key="charge", attempt=attempt) \
                if state["status"] == "charging":
            why = "expired" if isinstance(command, Expired) else command.error_type
            if attempt >= MAX_ATTEMPTS:
                return [Event("charge.failed", {"attempt": attempt, "why": why, "final": True})], \
                    [Fail(f"charge failed {attempt} times", "ChargeFailed")]
            return [Event("charge.failed", {"attempt": attempt, "why": why, "final": False})], \
                [Timer("retry", after=RETRY)]
        case TimerFired(key="retry") if state["status"] == "waiting_retry":
            attempt = state["attempt"] + 1
            return [Event("charge.retried", {"attempt": attempt})], \
                [Delegate("charge", "payments", state["order"], attempt=attempt)]
        case Signal(channel="ship", payload=address) if state["status"] == "charged":
            return [Event("ship.requested", {"address": address})], \
                [Child("ship", "shipping", (state["order"]["id"], address))]
        case Signal(channel="note", payload=note):
            return [Event("note.added", note)], []
        case ChildEnded(key="ship", status="completed", result=parcel):
            return [Event("order.shipped", {"parcel": parcel})], [Complete({"order": state["order"]["id"], "parcel": parcel})]
        case ChildEnded(key="ship", error=error):
            return [Event("ship.failed", error)], [Fail("shipping failed", "ShippingFailed")]
        case CancelRequested(reason=reason):
            return [Event("order.cancelled", {"reason": reason})], [Cancel(reason)]
    return [], []  # a command this state does not expect: nothing changes


def evolve(state: dict[str, Any], event: Event) -> dict[str, Any]:
    s = dict(state)
    data = event.data
    if event.kind == "order.placed":
        s.update(order=data, status="charging", attempt=1)
    elif event.kind == "charge.succeeded":
        s.update(status="charged", receipt=data["receipt"])
    elif event.kind == "charge.failed":
        s.update(status="failed" if data["final"] else "waiting_retry", failures=s["failures"] + [data["why"]])
    elif event.kind == "charge.retried":
        s.update(status="charging", attempt=data["attempt"])
    elif event.kind == "ship.requested":
        s.update(status="shipping", address=data["address"])
    elif event.kind == "order.shipped":
        s.update(status="shipped", parcel=data["parcel"])
    elif event.kind == "ship.failed":
        s.update(status="ship_failed")
    elif event.kind == "note.added":
        s.update(notes=s["notes"] + [data])
    elif event.kind == "order.cancelled":
        s.update(status="cancelled")
    return s


INITIAL = {"status": "new", "attempt": 0, "order": None, "failures": [], "notes": []}


def make_registry() -> Registry:
    registry = Registry()
    registry.decider("order", version="1", initial=INITIAL, evolve=evolve)(decide)

    @registry.workflow("shipping")
    async def shipping(ctx: Context, order_id: str, address: str) -> str:
        return await ctx.step(lambda: f"parcel-{order_id}-{address}")

    return registry


ORDER = {"id": "o-1", "amount": 42}


async def folds(engine: flowli.Engine, eid: str) -> dict[str, Any]:
    """Folding the journal with the registered evolve gives the stored state; returns it."""
    decider = engine.registry.decider_of("order")
    assert decider is not None
    journal = await engine.journal(eid)
    events = [Event(e.value["event"], e.value["data"]) for e in journal if e.kind is EntryKind.EVENT]
    version, state = await engine.decider_state(eid)
    assert decider.fold(events) == state
    return state


async def until(predicate: Any, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not await predicate():
        if loop.time() > end:
            raise AssertionError("the condition never held")
        await asyncio.sleep(0.01)


async def state_is(engine: flowli.Engine, eid: str, status: str) -> None:
    async def holds() -> bool:
        return (await engine.decider_state(eid))[1] is not None and (await engine.decider_state(eid))[1]["status"] == status

    await until(holds)


async def take(engine: flowli.Engine, name: str = "pay", lease: timedelta = timedelta(seconds=60)) -> Any:
    consumer = engine.consumer("payments", name=name, lease=lease)
    for _ in range(500):
        tasks = await consumer.dequeue(limit=1, wait=0.05)
        if tasks:
            return consumer, tasks[0]
    raise AssertionError("no charge task came")


async def connect(url: str, tmp_path: Any, clock: Clock | None = None) -> flowli.Engine:
    return await flowli.connect(url, make_registry(), clock=clock, bucket=str(tmp_path / "bucket"), **FAST)


async def test_an_order_runs_start_charge_signal_child_end(db_url: str, tmp_path: Any) -> None:
    engine = await connect(db_url, tmp_path)
    async with engine, engine.worker():
        eid = await engine.start("order", ORDER, by="alice@example.com")
        consumer, task = await take(engine)
        assert task.payload == ORDER and task.attempt == 1
        await consumer.answer(task, "r-1")
        await state_is(engine, eid, "charged")
        assert (await engine.status(eid)).status is Status.SUSPENDED
        await engine.signal(eid, "ship", "Main St", by="bob@example.com")
        assert await engine.result(eid, timeout=10) == {"order": "o-1", "parcel": "parcel-o-1-Main St"}
        state = await folds(engine, eid)
        assert state["status"] == "shipped"
        journal = await engine.journal(eid)
        assert [e.value["event"] for e in journal if e.kind is EntryKind.EVENT] == [
            "order.placed", "charge.succeeded", "ship.requested", "order.shipped"]
        # provenance: who sent each command
        by = {e.value["event"]: e.provenance for e in journal if e.kind is EntryKind.EVENT}
        assert by["ship.requested"].actor.id == "bob@example.com"
        assert by["charge.succeeded"].code.workflow == "order"
        assert journal[-1].kind is EntryKind.EXECUTION_COMPLETED
        # five commands: start, answer, signal, child's end; the version counts them
        assert (await engine.decider_state(eid))[0] == 4
        await drain(engine)  # the control log holds its lifecycle entries: verify finds it
        verification = await engine.verify(make_registry())
        assert [(c.eid, c.compatible) for c in verification.checked if c.eid == eid] == [(eid, True)]
