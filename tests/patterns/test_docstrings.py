"""The example of each pattern's docstring runs as written: its ``>>>``/``...`` code is executed
in a namespace that provides the pattern and the helpers it names, the function it defines is
registered as a workflow and run on an engine, and its result is checked."""

from __future__ import annotations

import doctest
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from flowli import Context, Registry
from flowli.domain import StepFailed
from flowli.patterns import Action, answer_review, delegate, fan_out, inbox, on_tick, review, saga
from flowli.testing import Clock

from ..crash import until

pytestmark = pytest.mark.integration


def example(pattern: Callable[..., Any], name: str, **helpers: Any) -> Callable[..., Any]:
    """Execute the docstring example of ``pattern``; return the function ``name`` that it defines."""
    examples = doctest.DocTestParser().get_examples(pattern.__doc__ or "")
    assert examples, f"{pattern.__name__} has no docstring example"
    namespace: dict[str, Any] = {
        "__name__": f"example_of_{pattern.__name__}", "timedelta": timedelta,
        "delegate": delegate, "review": review, "saga": saga, "Action": Action, "fan_out": fan_out,
        "on_tick": on_tick, **helpers,
    }
    exec(compile("".join(e.source for e in examples), f"<docstring of {pattern.__name__}>", "exec"), namespace)
    assert callable(namespace.get(name)), f"the example of {pattern.__name__} defines no {name}"
    return namespace[name]  # type: ignore[no-any-return]


async def test_the_delegate_example_returns_the_consumers_answer(open_engine):
    registry = Registry()
    registry.add(example(delegate, "approval"), "approval")
    async with open_engine(registry) as engine:
        eid = await engine.start("approval", {"id": "inv-7", "amount": 120})
        bot = engine.consumer("finance-bot", "finance-bot-1")
        [task] = await until(bot.dequeue, 20, "the delegated check on queue finance-bot")
        assert task.eid == eid and task.payload == {"check": {"id": "inv-7", "amount": 120}}
        await bot.answer(task, {"ok": True}, by="finance-bot")
        assert await engine.result(eid, timeout=30) is True


@pytest.mark.parametrize(("approved", "outcome"), [(True, "paid"), (False, "refused")])
async def test_the_review_example_pays_or_refuses_as_the_person_decides(open_engine, approved, outcome):
    registry = Registry()
    registry.add(example(review, "expense"), "expense")
    async with open_engine(registry) as engine:
        eid = await engine.start("expense", {"id": "c-3", "amount": 42})
        [opened] = await until(lambda: inbox(engine), 20, "the review in the inbox")
        assert (opened.eid, opened.subject, opened.data) == (eid, "expense c-3", {"id": "c-3", "amount": 42})
        await answer_review(engine, eid, approved, by="carol@example.com", reason="receipt attached")
        assert await engine.result(eid, timeout=30) == outcome


class Trips:
    """The helpers that the saga example names, as steps that note what they did."""

    def __init__(self) -> None:
        self.done: list[str] = []

    def helpers(self) -> dict[str, Callable[..., Any]]:
        def reserve_flight(trip: str) -> str:
            self.done.append("reserve_flight")
            return f"flight-{trip}"

        def cancel_flight(booking: str) -> None:
            self.done.append(f"cancel_flight {booking}")

        def reserve_hotel(trip: str) -> str:
            self.done.append("reserve_hotel")
            return f"hotel-{trip}"

        def cancel_hotel(booking: str) -> None:
            self.done.append(f"cancel_hotel {booking}")

        def charge_card(trip: str) -> str:
            if trip == "broke":
                raise ValueError("card declined")
            self.done.append("charge_card")
            return f"charge-{trip}"

        def refund(charge: str) -> None:
            self.done.append(f"refund {charge}")

        return {f.__name__: f for f in (reserve_flight, cancel_flight, reserve_hotel, cancel_hotel, charge_card, refund)}


async def test_the_saga_example_books_a_trip_and_compensates_a_declined_card(open_engine):
    trips = Trips()
    registry = Registry()
    registry.add(example(saga, "book_trip", **trips.helpers()), "book_trip")
    async with open_engine(registry) as engine:
        assert await engine.result(await engine.start("book_trip", "rome"), timeout=30) == [
            "flight-rome", "hotel-rome", "charge-rome",
        ]
        assert trips.done == ["reserve_flight", "reserve_hotel", "charge_card"]
        trips.done.clear()
        with pytest.raises(StepFailed) as failed:
            await engine.result(await engine.start("book_trip", "broke"), timeout=30)
        assert failed.value.fid == "root/charge_card:2"
        assert trips.done == ["reserve_flight", "reserve_hotel", "cancel_hotel hotel-broke", "cancel_flight flight-broke"]


def shrink(image: str) -> str:
    return f"small-{image}"


async def test_the_fan_out_example_resizes_every_image(open_engine):
    registry = Registry()
    registry.add(example(fan_out, "resize_all"), "resize_all")

    @registry.workflow("resize")
    async def resize(ctx: Context, image: str) -> str:
        return await ctx.step(shrink, image)

    async with open_engine(registry) as engine:
        eid = await engine.start("resize_all", ["a.png", "b.png", "c.png"])
        assert await engine.result(eid, timeout=30) == ["small-a.png", "small-b.png", "small-c.png"]


async def test_the_on_tick_example_runs_the_nightly_report_seven_times(open_engine):
    registry = Registry()
    registry.add(example(on_tick, "nightly"), "nightly")

    @registry.workflow("report")
    async def report(ctx: Context, tick: str) -> str:
        return f"report of {tick}"

    clock = Clock()
    first = clock.now()
    async with open_engine(registry, clock=clock) as engine:
        eid = await engine.start("nightly")

        async def reports_done() -> int:
            return len(await engine.list(status="completed", workflow="report"))

        for night in range(1, 7):
            await until(lambda n=night: _at_least(reports_done, n), 20, f"report {night} of 7")
            await clock.advance(timedelta(days=1))
        assert await engine.result(eid, timeout=30) is None  # the example returns nothing
        reports = await engine.list(workflow="report")
        ticks = sorted([(await engine.status(r.eid)).args[0] for r in reports])
        assert ticks == [(first + timedelta(days=n)).isoformat() for n in range(7)]
        assert {(await engine.status(r.eid)).result for r in reports} == {f"report of {t}" for t in ticks}


async def _at_least(count: Callable[[], Any], n: int) -> bool:
    return bool(await count() >= n)
