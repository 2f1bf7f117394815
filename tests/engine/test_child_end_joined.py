"""A child's end and its decider parent's command in one store write, on both backends: the
child's end write carries the parent's transition (``Write.then``), so no RESUME goes between
them; a refused or stale parent command never loses the child's end; and a joined write is
applied whole or not at all."""

from __future__ import annotations

from typing import Any

import pytest

import flowli
from flowli.domain import Actor, Code, Entry, EntryKind, Provenance, Site, StaleState, Status, TaskKind, task_id
from flowli.store import Advance, Write
from flowli.testing import store_of

from .test_deciders import ORDER, connect, folds, shipped_order, state_is, take

pytestmark = pytest.mark.integration


async def ship_child(engine: flowli.Engine, eid: str) -> Any:
    children = [r for r in await engine.statuses([c.eid for c in await engine.list()]) if r.parent_eid == eid]
    assert len(children) == 1
    return children[0]


async def test_a_childs_end_and_its_parents_command_are_one_write(db_url: str, tmp_path: Any) -> None:
    engine = await connect(db_url, tmp_path)
    store = store_of(engine)
    writes: list[tuple[Write, Write | None]] = []  # each write, and the write joined to it then
    write_of = store.write

    async def recording(write: Write, now: Any) -> Any:
        writes.append((write, write.then))
        return await write_of(write, now)

    store.write = recording  # type: ignore[method-assign]
    observed: list[tuple[str, str | None, bool]] = []
    engine.observe(lambda t, result: observed.append((t.kind, t.workflow, result is not None)))
    async with engine, engine.worker():
        eid = await shipped_order(engine)
        child = await ship_child(engine, eid)
        del store.write
        def shipping(w: Write) -> bool:
            return w.advance is not None and w.advance.eid == eid and any(
                e.kind is EntryKind.EVENT and e.value["event"] == "order.shipped" for e in w.entries)

        ends = [(w, then) for w, then in writes
                if any(e.kind is EntryKind.EXECUTION_COMPLETED and e.eid == child.eid for e in w.entries)]
        assert len(ends) == 1
        joined = ends[0][1]
        assert joined is not None and shipping(joined)  # the parent's command rode on the child's end
        assert not [w for w, _ in writes if shipping(w)]  # and was no write of its own
        # no RESUME carried the end: nothing was queued between the two
        assert await store.read_task(task_id(TaskKind.RESUME, eid, f"child:{child.eid}@1")) is None
        # each transition went through the observers, as two commits would
        assert ("end", "shipping", True) in observed and ("decide", "order", True) in observed
        assert (await folds(engine, eid))["status"] == "shipped"


async def test_a_refused_parent_command_leaves_the_childs_end_to_its_resume(db_url: str, tmp_path: Any) -> None:
    engine = await connect(db_url, tmp_path)
    refused: list[Any] = []

    async def once(t: Any, call_next: Any) -> Any:
        if t.kind == "decide" and t.workflow == "order" and (t.payload or {}).get("command") == "ChildEnded" \
                and not refused:
            refused.append(t.payload)
            raise PermissionError("not now")
        return await call_next()

    engine.use(once)
    async with engine, engine.worker():
        eid = await shipped_order(engine)
        child = await ship_child(engine, eid)
        assert refused == [{"command": "ChildEnded", "child": child.eid}]
        # the child ended all the same, and its RESUME brought the end to the parent afterwards
        assert child.status is Status.COMPLETED
        state = await folds(engine, eid)
        assert state["status"] == "shipped"
        journal = await engine.journal(eid)
        assert [e.value["event"] for e in journal if e.kind is EntryKind.EVENT].count("order.shipped") == 1


async def test_a_parent_advanced_by_another_process_is_decided_again_in_the_joined_write(
        db_url: str, tmp_path: Any) -> None:
    engine = await connect(db_url, tmp_path)
    other = await connect(db_url, tmp_path)  # another process on the same database
    raced: list[int] = []

    async def race(t: Any, call_next: Any) -> Any:
        if t.kind == "decide" and (t.payload or {}).get("command") == "ChildEnded" and not raced:
            raced.append((await other.decider_state(t.eid))[0])
            await other.signal(t.eid, "note", "from elsewhere")  # the state moves on under this command
        return await call_next()

    engine.use(race)
    async with other, engine, engine.worker():
        eid = await engine.start("order", ORDER)
        consumer, task = await take(engine)
        await consumer.answer(task, "r-1")
        await state_is(engine, eid, "charged")
        await engine.signal(eid, "ship", "Main St")
        assert (await engine.result(eid, timeout=10))["parcel"] == "parcel-o-1-Main St"
        child = await ship_child(engine, eid)
        assert len(raced) == 1
        state = await folds(engine, eid)
        assert state["status"] == "shipped" and state["notes"] == ["from elsewhere"]
        journal = await engine.journal(eid)
        events = [e.value["event"] for e in journal if e.kind is EntryKind.EVENT]
        assert events[-2:] == ["note.added", "order.shipped"]
        child_journal = await engine.journal(child.eid)
        assert [e.kind for e in child_journal].count(EntryKind.EXECUTION_COMPLETED) == 1


async def test_a_joined_write_is_applied_whole_or_not_at_all(db_url: str, tmp_path: Any) -> None:
    engine = await connect(db_url, tmp_path)
    async with engine, engine.worker():
        eid = await engine.start("order", ORDER)
        consumer, task = await take(engine)
        await consumer.answer(task, "r-1")
        await state_is(engine, eid, "charged")
        note = await engine.start("order", {"id": "o-2", "amount": 1})
        store = store_of(engine)
        version, state = await engine.decider_state(eid)
        before = await engine.journal(note)
        now = engine.clock.now()
        entry = Entry(eid=note, kind=EntryKind.EVENT, provenance=Provenance(Actor("worker", "t"), Site(), Code(), now), fid="root",
                      value={"event": "note.added", "data": "lost"})
        stale = Write(advance=Advance(eid, version, state))  # from a version before the stored one
        with pytest.raises(StaleState):
            await store.write(Write(entries=[entry], then=stale), engine.clock.now())
        assert await engine.journal(note) == before  # the first part was not applied either
        assert await store.read_status(note) is Status.SUSPENDED
        assert await store.read_status("no-such-execution") is None
        fresh = Write(advance=Advance(eid, version + 1, {**state, "notes": ["kept"]}))
        result = await store.write(Write(entries=[entry], then=fresh), engine.clock.now())
        assert result.then is not None and len(result.entry_seqs) == 1
        assert [e.value for e in await engine.journal(note)][-1] == {"event": "note.added", "data": "lost"}
        assert (await engine.decider_state(eid)) == (version + 1, {**state, "notes": ["kept"]})
