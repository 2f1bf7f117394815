"""Items: the named records of the layers above the engine. Put is insert-if-absent (exactly one
of concurrent callers, also across stores sharing a database, creates it); an item is unique by
kind, application and key; ids are numeric and grow; lists are scoped and paged."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from flowli.domain import StaleState, Status, UnknownExecutionError
from flowli.store import Advance, Intent, NewItem, NewMessage, Resume, Write
from flowli.testing import open_store

from .conftest import T0, at, create, new_execution, prov

pytestmark = pytest.mark.integration


async def test_put_is_insert_if_absent_and_returns_the_stored_item(store):
    items = store.items()
    first, created = await items.put("key", "billing", "h1", {"name": "ci", "role": "operator"}, T0)
    assert created and first.body == {"name": "ci", "role": "operator"} and first.application == "billing"
    again, created = await items.put("key", "billing", "h1", {"name": "other"}, at(1))
    assert not created and again == first  # the first body stays
    other_app, created = await items.put("key", "shop", "h1", {"name": "shop"}, at(2))
    assert created and other_app.id > first.id
    assert await items.get("key", first.id) == first
    assert await items.get("pipeline", first.id) is None  # the id of another kind
    assert await items.find("key", "h1", "shop") == other_app
    assert await items.find("key", "h1") == first  # in any application: the first by id
    assert await items.find("key", "nope") is None


async def test_lists_are_scoped_ordered_paged_and_counted(store):
    items = store.items()
    made = [(await items.put("pipeline", "a" if i % 2 else "b", f"p{i:02d}", {"n": i}, at(i)))[0] for i in range(10)]
    in_a = [m for m in made if m.application == "a"]
    assert [i.id for i in await items.list("pipeline", "a")] == [m.id for m in in_a]
    assert [i.body["n"] for i in await items.list("pipeline", "a", newest_first=True, limit=2, offset=1)] == [7, 5]
    assert await items.count("pipeline", "a") == 5 and await items.count("pipeline", None) == 10
    assert [i.key for i in await items.list("pipeline", None, prefix="p0")] == [f"p0{i}" for i in range(10)]
    assert await items.count("pipeline", "b", prefix="p0") == 5


async def test_update_and_delete(store):
    items = store.items()
    item, _ = await items.put("policy", "a", "retry-upstream", {"state": "enabled"}, T0)
    assert await items.update("policy", item.id, {"state": "disabled"}, at(5))
    assert (await items.get("policy", item.id)).body == {"state": "disabled"}
    assert not await items.update("policy", item.id + 1000, {}, at(5))
    assert await items.delete("policy", item.id)
    assert not await items.delete("policy", item.id)
    assert await items.get("policy", item.id) is None


async def test_an_update_that_expects_a_body_changes_only_that_body(store):
    items = store.items()
    item, _ = await items.put("schedule", "a", "nightly", {"state": "enabled", "firings": 1}, T0)
    # a firing counted itself after an operator read the body: the operator's change is refused
    assert await items.update("schedule", item.id, {"state": "enabled", "firings": 2}, at(1), expect=item.body)
    assert not await items.update("schedule", item.id, {"state": "paused", "firings": 1}, at(2), expect=item.body)
    fresh = await items.get("schedule", item.id)
    assert fresh.body == {"firings": 2, "state": "enabled"} and fresh.at == at(1)
    # read again, the change goes in (the expected body compares as stored: key order aside)
    assert await items.update("schedule", item.id, {**fresh.body, "state": "paused"}, at(3),
                              expect={"state": "enabled", "firings": 2})
    assert (await items.get("schedule", item.id)).body == {"state": "paused", "firings": 2}
    assert not await items.update("schedule", item.id + 1000, {}, at(4), expect={})


async def test_exactly_one_put_creates_among_concurrent_stores(shared_url):
    stores = [open_store(shared_url) for _ in range(3)]
    for s in stores:
        await s.open()
    try:
        results = await asyncio.gather(*(s.items().put("idem", "a", "k", {"by": i}, T0) for i, s in enumerate(stores)))
        assert sum(created for _, created in results) == 1
        assert len({item.id for item, _ in results}) == 1
    finally:
        for s in stores:
            await s.close()


async def test_put_many_is_one_transaction_of_puts(store):
    items = store.items()
    existing, _ = await items.put("stage", "a", "e/s1", {"n": 0}, T0)
    stored = await items.put_many([("pipeline", "a", "e", {"name": "p"}), ("stage", "a", "e/s1", {"n": 1}),
                                   ("stage", "a", "e/s2", {"n": 2})], at(1))
    assert [(i.kind, i.key, created) for i, created in stored] == [
        ("pipeline", "e", True), ("stage", "e/s1", False), ("stage", "e/s2", True)]
    assert stored[1][0] == existing and stored[2][0].id > stored[0][0].id


# ---- items in a write: reserved ids, inserted in the write's transaction, or not at all ----------


async def test_reserved_ids_are_distinct_and_never_given_to_another_item(store):
    items = store.items()
    before, _ = await items.put("pipeline", "a", "before", {}, T0)
    reserved = await items.reserve(3)
    assert len(set(reserved)) == 3 and min(reserved) > before.id and await items.reserve(0) == []
    after, _ = await items.put("pipeline", "a", "after", {}, T0)
    assert after.id > max(reserved)  # the next item's id is past the reservation
    assert [await items.get("pipeline", i) for i in reserved] == [None] * 3  # a reservation is only a number


async def test_ids_reserved_by_concurrent_stores_are_distinct(shared_url):
    stores = [open_store(shared_url) for _ in range(3)]
    for s in stores:
        await s.open()
    try:
        got = await asyncio.gather(*(s.items().reserve(4) for s in stores for _ in range(3)))
        ids = [i for batch in got for i in batch]
        assert len(ids) == 36 and len(set(ids)) == 36
    finally:
        for s in stores:
            await s.close()


async def test_items_of_a_new_execution_are_written_only_by_the_write_that_creates_it(store):
    items = store.items()
    pid, sid = await items.reserve(2)
    new = new_execution()
    rows = (NewItem("pipeline", "a", new.record.eid, {"name": "p"}, id=pid),
            NewItem("stage", "a", f"{new.record.eid}/s1", {"n": 1}, id=sid))
    assert (await store.write(Write(executions=[dataclasses.replace(new, items=rows)]), T0)).created == [True]
    assert (await items.get("pipeline", pid)).key == new.record.eid
    assert (await items.get("stage", sid)).body == {"n": 1}
    # a second start of the same eid (a keyed start that finds it) writes none of its items
    again = (NewItem("pipeline", "a", "other", {"name": "q"}, id=(await items.reserve(1))[0]),)
    assert (await store.write(Write(executions=[dataclasses.replace(new, items=again)]), at(1))).created == [False]
    assert await items.find("pipeline", "other", "a") is None


async def test_a_refused_write_writes_none_of_its_items(store):
    items = store.items()
    [sid] = await items.reserve(1)
    refused = Write(expect=("no-such-execution", frozenset(Status)),
                    items=[NewItem("stage", "a", "e/s1", {"n": 1}, id=sid)])
    with pytest.raises(UnknownExecutionError):
        await store.write(refused, T0)
    assert await items.get("stage", sid) is None and await items.count("stage", "a") == 0
    eid = await create(store)
    stale = Write(advance=Advance(eid, 2, {"v": 2}), items=[NewItem("stage", "a", "e/s1", {"n": 1}, id=sid)])
    with pytest.raises(StaleState):  # its state is at version 0: a write fenced on version 1 is refused
        await store.write(stale, T0)
    assert await items.count("stage", "a") == 0


async def test_an_item_of_a_write_is_inserted_if_absent_or_replaced(store):
    items = store.items()
    eid = await create(store)
    keep = NewItem("stage", "a", f"{eid}/s1", {"n": 1}, id=(await items.reserve(1))[0])
    await store.write(Write(expect=(eid, frozenset(Status)), items=[keep]), T0)
    # inserted if absent: a second item of the key changes nothing
    await store.write(Write(expect=(eid, frozenset(Status)), items=[dataclasses.replace(keep, id=None, body={"n": 2})]),
                      at(1))
    assert (await items.find("stage", f"{eid}/s1", "a")).body == {"n": 1}
    # replaced: the last body of the key wins, whatever the write held before it (its id stays)
    sealed = [NewItem("secret", "a", f"{eid}/k", {"value": v}, replace=True) for v in ("x", "y")]
    await store.write(Write(expect=(eid, frozenset(Status)), items=sealed), at(2))
    first = await items.find("secret", f"{eid}/k", "a")
    await store.write(Write(expect=(eid, frozenset(Status)), items=[dataclasses.replace(sealed[0], body={"value": "z"})]),
                      at(3))
    now = await items.find("secret", f"{eid}/k", "a")
    assert (first.body, now.body, now.id, now.at) == ({"value": "y"}, {"value": "z"}, first.id, at(3))


async def test_a_start_or_a_signal_with_items_writes_them_whatever_intent_it_says(store):
    # a backend's one-statement form of a start or a signal has no room for items: such a write
    # takes the generic path, so its items are written in its transaction all the same
    items = store.items()
    new = new_execution()
    [pid] = await items.reserve(1)
    said = Write(intent=Intent.START, executions=[dataclasses.replace(new, items=(
        NewItem("pipeline", "a", new.record.eid, {"name": "p"}, id=pid),))])
    assert (await store.write(said, T0)).created == [True]
    assert (await items.get("pipeline", pid)).key == new.record.eid
    eid = new.record.eid
    signal = Write(intent=Intent.SIGNAL, expect=(eid, frozenset(Status)), messages=[NewMessage(f"{eid}.c", 1, prov())],
                   resumes=[Resume(f"RESUME:{eid}:s", eid, None, prov(), T0)],
                   items=[NewItem("stage", "a", f"{eid}/s", {"n": 1})])
    assert (await store.write(signal, at(1))).message_seqs == [1]
    assert (await items.find("stage", f"{eid}/s", "a")).body == {"n": 1}
