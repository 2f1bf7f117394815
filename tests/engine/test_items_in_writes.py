"""Records of the layers above written in the write of a transition (``items=`` on
``engine.start``, ``engine.signal`` and a consumer's answer): they commit with it, or not at all
(a middleware's refusal, a keyed start that finds its execution, a stale answer, a terminal
execution). ``engine.announce`` records on an execution what changed nothing else, as a journal
entry that no decider folds and no replay reads. Both backends."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from flowli import Registry
from flowli.domain import EntryKind, ExecutionTerminalError, StaleAnswer, Status, UnknownExecutionError
from flowli.engine.deciders import Delegate, Event, Start
from flowli.store import NewItem

from .test_deciders import ORDER, folds, make_registry

pytestmark = pytest.mark.integration


async def test_a_starts_items_are_written_only_when_it_creates_the_execution(open_engine):
    registry = Registry()

    @registry.workflow("quiet")
    async def quiet(ctx: Any) -> None:
        return None

    async with open_engine(registry, worker=False) as engine:
        refusing: list[str] = []

        async def refuse(t: Any, call_next: Any) -> Any:
            if not refusing:
                refusing.append(t.kind)
                raise PermissionError("refused by policy")
            return await call_next()

        engine.use(refuse, kinds=("start",))
        ids = await engine.items.reserve(2)
        rows = [NewItem("thing", "a", "k1", {"n": 1}, id=ids[0]), NewItem("thing", "a", "k2", {"n": 2}, id=ids[1])]
        with pytest.raises(PermissionError):
            await engine.start("quiet", key="once", items=rows)
        assert await engine.items.count("thing", "a") == 0
        eid = await engine.start("quiet", key="once", items=rows)
        assert [(await engine.items.get("thing", i)).key for i in ids] == ["k1", "k2"]
        # a keyed start that finds the execution writes nothing
        again = await engine.start("quiet", key="once", items=[NewItem("thing", "a", "k3", {})])
        assert again == eid and await engine.items.count("thing", "a") == 2


async def test_a_signals_and_an_answers_items_commit_with_them_or_not_at_all(open_engine):
    async with open_engine(make_registry(), worker=False) as engine:
        eid = await engine.start("order", ORDER, items=[NewItem("order", "", "o-1", {"n": 0})])
        async with engine.worker(concurrency=4, queues=("default",)):
            for _ in range(200):  # a worker decides its start
                if (await engine.decider_state(eid))[0] >= 1:
                    break
                await asyncio.sleep(0.02)
        await engine.signal(eid, "note", {"text": "hi"}, items=[NewItem("note", "", f"{eid}/1", {"text": "hi"})])
        assert (await engine.items.find("note", f"{eid}/1", "")).body == {"text": "hi"}
        consumer = engine.consumer("payments", "pay", timedelta(seconds=30))
        [task] = await consumer.dequeue(1)
        await consumer.answer(task, {"receipt": "r-1"}, items=[NewItem("receipt", "", eid, {"id": "r-1"})])
        assert (await engine.items.find("receipt", eid, "")).body == {"id": "r-1"}
        with pytest.raises(StaleAnswer):  # answered already: none of its items
            await consumer.answer(task, {"receipt": "r-2"}, items=[NewItem("receipt", "", "stale", {})])
        assert await engine.items.find("receipt", "stale", "") is None
        await engine.cancel(eid)
        for _ in range(200):
            if (await engine.status(eid)).status is Status.CANCELLED:
                break
            await asyncio.sleep(0.02)
        with pytest.raises(ExecutionTerminalError):
            await engine.signal(eid, "note", {"text": "late"}, items=[NewItem("note", "", f"{eid}/2", {})])
        assert await engine.items.find("note", f"{eid}/2", "") is None
        # an announcement is recorded on the ended execution, and its decider's state is untouched
        seq = await engine.announce(eid, "answer.refused", {"why": "late"}, by="pay")
        [entry] = [e for e in await engine.journal(eid) if e.kind is EntryKind.ANNOUNCED]
        assert (entry.seq, entry.value, entry.provenance.actor.id) == (seq, {"kind": "answer.refused",
                                                                            "data": {"why": "late"}}, "pay")
        assert (await folds(engine, eid))["notes"] == [{"text": "hi"}]
        with pytest.raises(UnknownExecutionError):
            await engine.announce("no-such-execution", "answer.refused", {})


async def test_a_keyed_deciders_start_that_finds_its_execution_writes_nothing(open_engine):
    """A decider's start decides its Start in the write that creates it: a second start with the
    same key finds the execution and writes nothing of what its own decision would have (no
    items, no events, no DELEGATE, no new state version)."""
    registry = Registry()

    def decide(state: Any, command: Any) -> Any:
        if isinstance(command, Start):
            return [Event("opened", {"n": command.input})], [Delegate("work", "clerks", {"n": command.input})]
        return [], []

    registry.decider("desk", initial={}, evolve=lambda state, event: {**state, **event.data})(decide)
    async with open_engine(registry, worker=False) as engine:
        ids = await engine.items.reserve(1)
        eid = await engine.start("desk", 1, key="once", items=[NewItem("thing", "a", "k1", {}, id=ids[0])])
        journal = await engine.journal(eid)
        assert await engine.decider_state(eid) == (1, {"n": 1})
        again = await engine.start("desk", 2, key="once", items=[NewItem("thing", "a", "k2", {})])
        assert again == eid
        assert await engine.items.count("thing", "a") == 1
        assert await engine.journal(eid) == journal
        assert await engine.decider_state(eid) == (1, {"n": 1})
        assert [t.payload for t in await engine.tasks(eid=eid)] == [{"n": 1}]


async def test_ids_are_reserved_in_blocks_that_two_processes_never_share(open_engine):
    """``items.reserve`` hands ids out of blocks that one store write takes from the sequence:
    ids of one process rise, two processes (two engines on one database) never get the same id,
    and an item inserted without an id takes one past every block taken."""
    async with open_engine(Registry(), worker=False) as a, open_engine(Registry(), worker=False) as b:
        taken = [(await a.items.reserve(3)), (await b.items.reserve(2)), (await a.items.reserve(1)),
                 (await b.items.reserve(70))]
        mine_a, mine_b = taken[0] + taken[2], taken[1] + taken[3]
        assert mine_a == sorted(mine_a) and mine_b == sorted(mine_b) and len(set(mine_a + mine_b)) == 76
        assert await a.items.reserve(0) == []
        item, _ = await a.items.put("thing", "a", "k", {}, a.clock.now())
        assert item.id > max(mine_a + mine_b)


async def test_started_gives_the_record_its_start_stored_without_a_read_and_whether_it_created_it(open_engine):
    registry = make_registry()

    @registry.workflow("quiet")
    async def quiet(ctx: Any) -> None:
        return None

    async with open_engine(registry, worker=False) as engine:
        for workflow, args in (("order", (ORDER,)), ("shipping", ("o-1", "Main St"))):
            record, created = await engine.started(workflow, *args, key="k", application="app")
            stored = await engine.status(record.eid, application="app")
            assert created
            # a decider's start is decided in its write: the record says the status that write stored
            assert (record.eid, record.workflow, record.status, record.args, record.created_at, record.key) == \
                (stored.eid, stored.workflow, stored.status, stored.args, stored.created_at, stored.key)
            assert record.status is (Status.SUSPENDED if workflow == "order" else Status.PENDING)
            again, created = await engine.started(workflow, *args, key="k", application="app")
            assert not created and again == stored
            assert await engine.start(workflow, *args, key="k", application="app") == record.eid
        with pytest.raises(UnknownExecutionError):
            await engine.status(record.eid, application="other")
