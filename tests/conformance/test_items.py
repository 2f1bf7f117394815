"""Items: the named records of the layers above the engine. Put is insert-if-absent (exactly one
of concurrent callers, also across stores sharing a database, creates it); an item is unique by
kind, application and key; ids are numeric and grow; lists are scoped and paged."""

from __future__ import annotations

import asyncio

import pytest

from flowli.testing import open_store

from .conftest import T0, at

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
