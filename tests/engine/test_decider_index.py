"""The index of decider states (``Decider.index``, ``engine.decided``), on both backends: a
ticket decider whose index says its number, status, owner, tags, searchable text and whether it
waits for a person. Each filter picks exactly its rows, pages are newest first by number with the
count of all matches, a start is listed with the state its own write decided, and every command
rewrites the row in the write that advances the state (a stale row is never read)."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

import flowli
from flowli import Registry
from flowli.engine import OpenAttempt, StateQuery
from flowli.engine.deciders import Answered, Complete, Delegate, Event, Index, Signal, Start
from flowli.testing import Clock, store_of

from .conftest import wait_status

pytestmark = pytest.mark.integration


def decide(state: dict[str, Any], command: Any) -> tuple[list[Event], list[Any]]:
    match command:
        case Start(input=ticket):
            return [Event("opened", ticket)], []
        case Signal(channel="review"):
            return [Event("review.asked", {})], []
        case Signal(channel="retitle", payload=title):
            return [Event("retitled", {"title": title})], []
        case Signal(channel="close"):
            return [Event("closed", {})], [Complete(state["n"])]
    return [], []


def evolve(state: dict[str, Any], event: Event) -> dict[str, Any]:
    if event.kind == "opened":
        return {**state, **event.data, "status": "Open"}
    if event.kind == "review.asked":
        return {**state, "status": "Review"}
    if event.kind == "retitled":
        return {**state, **event.data}
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
        assert await page(application="app", limit=4, offset=4) == ([2, 1], 6)  # the last page, not full
        assert await page(application="app", limit=2, offset=6) == ([], 6)  # past the end: still the total
        assert await page(application="app", limit=2, offset=60) == ([], 6)
        assert await page(application="app", limit=0) == ([], 6)  # no rows asked for: the total alone
        assert await page(application="app", text="on fire", limit=1, offset=1) == ([2], 2)
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

        # the counts per label, in one read, under the same filters (a label with none is left out)
        async def counts(**filters: Any) -> dict[str, int]:
            return await engine.decided_counts(StateQuery("ticket", **filters))

        assert await counts(application="app") == {"Open": 3, "Review": 2, "Closed": 1}
        assert await counts() == {"Open": 4, "Review": 2, "Closed": 1}  # every application
        assert await counts(application="other") == {"Open": 1}
        assert await counts(application="app", name="bob") == {"Review": 1, "Closed": 1, "Open": 1}
        assert await counts(application="app", tags=("team:b", "k:v")) == {"Review": 1, "Open": 1, "Closed": 1}
        assert await counts(application="app", text="on fire") == {"Open": 2}
        assert await counts(application="app", waiting=True) == {"Review": 2}
        assert await counts(application="app", labels=("Review", "Closed")) == {"Review": 2, "Closed": 1}
        assert await counts(application="nobody") == {}
        for filters in ({"application": "app"}, {"application": "app", "name": "ann"}, {"application": "app", "text": "ticket"}):
            for label, n in (await counts(**filters)).items():  # each count is the total of that label's list
                assert (await page(**filters, labels=(label,)))[1] == n


async def test_a_text_filter_picks_exactly_the_rows_that_hold_the_text(open_engine: Any) -> None:
    """A text filter is a substring test of each row's text: parts inside a word, across a space,
    with a quote, of one or two characters, with accents; a row whose text a command changes is
    found by its new text only (the index row is rewritten in the command's write); other
    applications' rows never."""
    titles = {1: "Name-7 printer", 2: "name-77", 3: "xname-7y", 4: "name 7", 5: 'say "hi" to NAME-7',
              6: "ab", 7: "name-7 elsewhere", 8: "café crème"}
    async with open_engine(registry()) as engine:
        eids = {n: await engine.start("ticket", {"n": n, "owner": "al", "tags": ["k"] if n % 2 else [],
                                                 "title": title}, application="app" if n != 7 else "other")
                for n, title in titles.items()}
        for eid in eids.values():
            await wait_status(engine, eid, "suspended")

        async def page(text: str, **q: Any) -> tuple[list[int], int]:
            rows, total = await engine.decided(StateQuery("ticket", application="app", text=text, **q))
            return numbers(rows), total

        assert await page("name-7") == ([5, 3, 2, 1], 4)
        assert await page("ame-77") == ([2], 1)
        assert await page("e 7") == ([4], 1)
        assert await page("-7 p") == ([1], 1)
        assert await page('"hi"') == ([5], 1)
        assert await page('say "hi" to') == ([5], 1)
        assert await page("ab") == ([6], 1)
        assert await page("b") == ([6], 1)
        assert await page("crème") == ([8], 1)
        assert await page("name-7x") == ([], 0)
        assert await page("7 name") == ([], 0)
        assert await page("name-7", limit=2) == ([5, 3], 4)
        assert await page("name-7", limit=2, offset=2) == ([2, 1], 4)
        assert await page("name-7", tags=("k",)) == ([5, 3, 1], 3)
        assert await page("name-7", name="al", labels=("Open",)) == ([5, 3, 2, 1], 4)
        await engine.signal(eids[3], "retitle", "Something else", application="app")
        await engine.signal(eids[6], "retitle", "now name-7 too", application="app")
        await engine.signal(eids[2], "close", None, application="app")
        assert await page("name-7") == ([6, 5, 2, 1], 4)
        assert await page("xname") == ([], 0)
        assert await page("thing els") == ([3], 1)
        assert await page("name-7", labels=("Closed",)) == ([2], 1)


async def test_a_start_is_listed_with_the_state_its_start_decided(open_engine: Any) -> None:
    async with open_engine(registry(), worker=False) as engine:  # no worker: the start's own write decides it
        eid = await engine.start("ticket", {"n": 9, "owner": "cy", "tags": [], "title": "New"}, application="app")
        rows, total = await engine.decided(StateQuery("ticket", application="app", labels=("Open",)))
        assert total == 1 and rows[0].record.eid == eid and rows[0].version == 1 and rows[0].state["owner"] == "cy"
        assert (await engine.status(eid, application="app")).status.value == "suspended"



async def test_counts_and_tags_follow_every_write_and_are_rebuilt_for_a_database_of_the_release_before(
        db_url: str, tmp_path: Any) -> None:
    """The total of a page filtered by labels and the rows of a tag filter come from what the
    writes keep beside the index (label counts on SQLite, tag rows on both): right after starts,
    relabelling commands and retention, and built by the migration for a database whose index was
    written before them."""
    clock = Clock()

    def tickets(engine: Any) -> Any:
        async def page(**q: Any) -> tuple[list[int], int]:
            rows, total = await engine.decided(StateQuery("ticket", **q))
            return sorted(numbers(rows)), total
        return page

    async with await connect_engine(db_url, tmp_path, clock) as engine:
        eids = {}
        for n in range(1, 7):
            eids[n] = await engine.start("ticket", {"n": n, "owner": "al", "tags": ["red"] if n % 2 else ["blue", "red"],
                                                    "title": f"T{n}"}, application="app")
        for n in (1, 2):
            await engine.signal(eids[n], "close", None, application="app")
        await engine.signal(eids[3], "review", None, application="app")
        page = tickets(engine)
        assert await page(application="app", labels=("Open",)) == ([4, 5, 6], 3)
        assert await page(application="app", labels=("Open", "Review")) == ([3, 4, 5, 6], 4)
        assert await page(application="app", tags=("blue",)) == ([2, 4, 6], 3)
        assert await page(application="app", tags=("red",), labels=("Closed",)) == ([1, 2], 2)
        await clock.advance(timedelta(days=31))
        assert await engine.retain() == 2  # the two closed ones leave the live store
        assert await page(application="app") == ([3, 4, 5, 6], 4)
        assert await page(application="app", labels=("Closed",)) == ([], 0)
        assert await page(application="app", tags=("blue",)) == ([4, 6], 2)
    await forget_counts(db_url)  # as a database of the release before this schema held it
    async with await connect_engine(db_url, tmp_path, clock) as engine:
        page = tickets(engine)
        assert await page(application="app") == ([3, 4, 5, 6], 4)
        assert await page(application="app", labels=("Review",)) == ([3], 1)
        assert await page(application="app", tags=("blue",)) == ([4, 6], 2)
        await engine.signal(eids[4], "close", None, application="app")
        assert await page(application="app", labels=("Open",)) == ([5, 6], 2)
        assert await page(application="app", tags=("blue",), labels=("Open",)) == ([6], 1)
        assert await page(application="app", text="t5") == ([5], 1)  # the text of rows written before
        await engine.signal(eids[5], "retitle", "Renamed", application="app")
        assert await page(application="app", text="t5") == ([], 0)
        assert await page(application="app", text="renamed") == ([5], 1)


async def connect_engine(db_url: str, tmp_path: Any, clock: Any) -> Any:
    return await flowli.connect(db_url, registry(), clock=clock, bucket=str(tmp_path / "bucket"),
                                retention=timedelta(days=30), poll_interval=0.05, sweep_interval=0.05)


async def forget_counts(db_url: str) -> None:
    """Take the database back to the schema before the label counts and tag rows (SQLite 8,
    PostgreSQL 10), and before the index of the executions' start: its index rows stay as that
    release wrote them."""
    if db_url.startswith("sqlite"):
        conn = sqlite3.connect(db_url.removeprefix("sqlite:///"))
        for trigger in ("counted", "relabelled", "retagged", "uncounted"):
            conn.execute(f"DROP TRIGGER decider_states_{trigger}")
        conn.execute("DROP TABLE decider_labels")
        conn.execute("DROP TABLE decider_tags")
        conn.execute("ALTER TABLE decider_states DROP COLUMN tag_list")
        conn.execute("DROP INDEX executions_created")  # of a later release still
        conn.execute("DELETE FROM schema_version WHERE version > 8")
        conn.commit()
        conn.close()
        return
    base, _, schema = db_url.partition("?schema=")
    conn = await asyncpg.connect(base, server_settings={"search_path": schema})
    try:
        await conn.execute("DROP TRIGGER decider_states_tags ON decider_states; DROP FUNCTION flowli_decider_tags();"
                           " DROP TABLE decider_tags; ALTER TABLE decider_states DROP COLUMN tag_list; DROP INDEX executions_created;"
                           " DELETE FROM schema_version WHERE version > 10")
    finally:
        await conn.close()


async def test_a_page_that_runs_out_before_its_size_is_its_own_total(tmp_path: Any) -> None:
    """A page with fewer rows than its size holds the last matches: its total needs no count of
    the index (on SQLite, a text search counted its matches by testing every row a second time)."""
    engine = await flowli.connect(f"sqlite:///{tmp_path}/t.db", registry(), poll_interval=0.05)
    async with engine:
        for n in range(1, 6):
            eid = await engine.start("ticket", {"n": n, "owner": "ann", "tags": [], "title": f"t{n % 2}"},
                                     application="app")
        await wait_status(engine, eid, "suspended")
        statements: list[str] = []
        # the statements of the store's reader thread, to see which the page ran (no public hook)
        reader = store_of(engine)._reader  # type: ignore[attr-defined]
        reader.conn.set_trace_callback(statements.append)
        try:
            async def counted(**filters: Any) -> tuple[list[int], int, int]:
                statements.clear()
                rows, total = await engine.decided(StateQuery("ticket", application="app", **filters))
                return numbers(rows), total, sum("COUNT(" in s or "SUM(" in s for s in statements)

            assert await counted(text="t1") == ([5, 3, 1], 3, 0)
            assert await counted(text="t1", limit=2, offset=2) == ([1], 3, 0)
            assert await counted(text="t1", limit=2) == ([5, 3], 3, 1)  # a full page: more may follow
            assert await counted(text="t1", limit=2, offset=4) == ([], 3, 1)  # past the end
        finally:
            reader.conn.set_trace_callback(None)


def work_registry() -> Registry:
    """A decider that delegates two parts of each job, ``a`` and ``b``, and completes when both
    are answered; its index is the job's number."""

    def decide_job(state: dict[str, Any], command: Any) -> tuple[list[Event], list[Any]]:
        match command:
            case Start(input=n):
                return [Event("opened", {"n": n})], [Delegate("a", "parts", {"n": n, "base": 2}, attempt=1),
                                                     Delegate("b", "parts", {"n": n}, attempt=1)]
            case Answered(key=key):
                done = [*state["done"], key]
                return [Event("answered", {"key": key})], [Complete(state["n"])] if len(done) == 2 else []
        return [], []

    def evolve_job(state: dict[str, Any], event: Event) -> dict[str, Any]:
        if event.kind == "opened":
            return {**state, "n": event.data["n"]}
        return {**state, "done": [*state["done"], event.data["key"]]}

    reg = Registry()
    reg.decider("job", initial={"n": 0, "done": []}, evolve=evolve_job,
                index=lambda s: Index(number=s["n"], label="Open"))(decide_job)
    return reg


async def test_a_page_read_with_its_attempts_gives_each_row_its_open_delegations(open_engine: Any) -> None:
    """``StateQuery(attempts=True)``: each row carries the delegations of its execution not yet
    answered, read in the same call as the page, as ``OpenAttempt.of`` reads them from the
    execution's tasks (a lease taken shows as the attempt's owner; an answer takes it away)."""
    async with open_engine(work_registry(), worker=False) as engine, engine.worker(concurrency=4):
        eids = [await engine.start("job", n, application="app") for n in (1, 2, 3)]
        for eid in eids:
            await wait_status(engine, eid, "suspended")
        consumer = engine.consumer("parts", name="c1", lease=timedelta(seconds=30))
        taken = None
        while taken is None:  # one of the parts leased to c1
            got = await consumer.dequeue(limit=1, wait=0.05)
            taken = got[0] if got else None
        rows, total = await engine.decided(StateQuery("job", application="app", attempts=True))
        assert (numbers(rows), total) == ([3, 2, 1], 3)
        for r in rows:
            tasks = await engine.tasks(eid=r.record.eid)
            expected = sorted((a for a in map(OpenAttempt.of, tasks) if a is not None), key=lambda a: a.task_id)
            assert sorted(r.attempts, key=lambda a: a.task_id) == expected and len(expected) == 2
            assert {a.key: a.payload for a in r.attempts} == {"a": {"n": r.state["n"], "base": 2},
                                                              "b": {"n": r.state["n"]}}
        leased = [a for r in rows for a in r.attempts if a.lease_owner is not None]
        assert [a.task_id for a in leased] == [taken.id] and leased[0].visible_at > engine.clock.now()
        plain, _ = await engine.decided(StateQuery("job", application="app"))
        assert [r.attempts for r in plain] == [(), (), ()]  # not asked for: not read

        await consumer.answer(taken, "done")
        owner = next(r for r in rows if any(a.task_id == taken.id for a in r.attempts))
        for _ in range(200):
            after, _ = await engine.decided(StateQuery("job", application="app", attempts=True))
            left = next(r for r in after if r.record.eid == owner.record.eid).attempts
            if len(left) == 1:
                break
            await asyncio.sleep(0.02)
        assert [a.key for a in left] == [k for k in ("a", "b") if k != next(
            a.key for a in owner.attempts if a.task_id == taken.id)]
