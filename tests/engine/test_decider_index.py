"""The index of decider states (``Decider.index``, ``engine.decided``), on both backends: a
ticket decider whose index says its number, status, owner, tags, searchable text and whether it
waits for a person. Each filter picks exactly its rows, pages are newest first by number with the
count of all matches, a start is listed with the state its own write decided, and every command
rewrites the row in the write that advances the state (a stale row is never read)."""

from __future__ import annotations

from typing import Any

import pytest

from flowli import Registry
from flowli.engine import StateQuery
from flowli.engine.deciders import Complete, Event, Index, Signal, Start

from .conftest import wait_status

pytestmark = pytest.mark.integration


def decide(state: dict[str, Any], command: Any) -> tuple[list[Event], list[Any]]:
    match command:
        case Start(input=ticket):
            return [Event("opened", ticket)], []
        case Signal(channel="review"):
            return [Event("review.asked", {})], []
        case Signal(channel="close"):
            return [Event("closed", {})], [Complete(state["n"])]
    return [], []


def evolve(state: dict[str, Any], event: Event) -> dict[str, Any]:
    if event.kind == "opened":
        return {**state, **event.data, "status": "Open"}
    if event.kind == "review.asked":
        return {**state, "status": "Review"}
    return {**state, "status": "Closed"}


def index(state: dict[str, Any]) -> Index:
    return Index(number=state["n"], label=state["status"], name=state["owner"],
                 tags=tuple(state["tags"]), text=state["title"].lower(), waiting=int(state["status"] == "Review"))


def registry() -> Registry:
    reg = Registry()
    reg.decider("ticket", initial={"n": 0, "status": None, "owner": None, "tags": [], "title": ""},
                evolve=evolve, index=index)(decide)
    return reg


def numbers(rows: list[Any]) -> list[int]:
    return [r.state["n"] if r.state else r.record.args[0]["n"] for r in rows]


async def test_each_filter_picks_its_rows_newest_first_with_the_count_of_all(open_engine: Any) -> None:
    async with open_engine(registry()) as engine:
        eids = {}
        for n in range(1, 8):
            ticket = {"n": n, "owner": "ann" if n % 2 else "bob", "tags": [f"team:{'a' if n < 4 else 'b'}", "k:v"],
                      "title": f"Printer {n} is ON FIRE" if n in (2, 5) else f"Ticket {n}"}
            eids[n] = await engine.start("ticket", ticket, application="app" if n != 7 else "other")
        for n in eids:
            await wait_status(engine, eids[n], "suspended")
        await engine.signal(eids[3], "review", None)
        await engine.signal(eids[6], "review", None)
        await engine.signal(eids[4], "close", None)
        await wait_status(engine, eids[4], "completed")

        async def page(**filters: Any) -> tuple[list[int], int]:
            rows, total = await engine.decided(StateQuery("ticket", **filters))
            return numbers(rows), total

        assert await page(application="app", limit=100) == ([6, 5, 4, 3, 2, 1], 6)
        assert await page(application="other") == ([7], 1)
        assert await page(application="app", limit=2) == ([6, 5], 6)
        assert await page(application="app", limit=2, offset=4) == ([2, 1], 6)
        assert await page(application="app", labels=("Review",)) == ([6, 3], 2)
        assert await page(application="app", labels=("Closed", "Open")) == ([5, 4, 2, 1], 4)
        assert await page(application="app", name="bob") == ([6, 4, 2], 3)
        assert await page(application="app", tags=("team:a",)) == ([3, 2, 1], 3)
        assert await page(application="app", tags=("team:b", "k:v")) == ([6, 5, 4], 3)
        assert await page(application="app", tags=("team:",)) == ([], 0)  # a tag matches whole
        assert await page(application="app", text="ON fire") == ([5, 2], 2)  # any case
        assert await page(application="app", waiting=True) == ([6, 3], 2)
        assert await page(application="app", labels=("Review",), name="ann") == ([3], 1)
        rows, _ = await engine.decided(StateQuery("ticket", application="app", labels=("Closed",)))
        assert rows[0].record.status.value == "completed" and rows[0].version == 2 and rows[0].label == "Closed"


async def test_a_start_is_listed_with_the_state_its_start_decided(open_engine: Any) -> None:
    async with open_engine(registry(), worker=False) as engine:  # no worker: the start's own write decides it
        eid = await engine.start("ticket", {"n": 9, "owner": "cy", "tags": [], "title": "New"}, application="app")
        rows, total = await engine.decided(StateQuery("ticket", application="app", labels=("Open",)))
        assert total == 1 and rows[0].record.eid == eid and rows[0].version == 1 and rows[0].state["owner"] == "cy"
        assert (await engine.status(eid, application="app")).status.value == "suspended"

