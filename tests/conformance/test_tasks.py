"""Tasks: enqueue is idempotent by id; dequeue respects queues, kinds, visibility and limit;
delivery is at-least-once; nack, ack (with an owner) and withdraw."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from flowli.domain import EntryKind, TaskKind
from flowli.store import Withdrawal, Write
from flowli.testing import open_store

from .conftest import T0, TTL, at, create, entry, task

pytestmark = pytest.mark.integration

ALL = list(TaskKind)
ENGINE = [TaskKind.START, TaskKind.RESUME, TaskKind.RUN_STEP]


async def enqueue(store, *tasks, now=T0):
    await store.write(Write(tasks=list(tasks)), now)


async def ids(store, queues=("default",), kinds=ALL, owner="w1", limit=100, ttl=TTL, now=T0):
    return sorted(t.id for t in await store.dequeue(list(queues), list(kinds), owner, limit, ttl, now))


async def test_a_task_round_trips(store):
    eid = await create(store)
    t = task("t-1", kind=TaskKind.RUN_STEP, queue="steps", eid=eid, payload={"fid": "root/f#0", "args": [1]})
    await enqueue(store, t)
    assert await store.read_tasks(queue="steps") == [t]
    (got,) = await store.dequeue(["steps"], ALL, "w1", 10, TTL, at(1))
    assert (got.id, got.kind, got.queue, got.eid, got.payload, got.provenance) == (
        t.id,
        t.kind,
        t.queue,
        t.eid,
        t.payload,
        t.provenance,
    )
    assert (got.deliveries, got.lease_owner) == (1, "w1")


async def test_enqueue_is_idempotent_by_id(store):
    await enqueue(store, task("t-1", payload="first"))
    await enqueue(store, task("t-1", payload="second", queue="other", visible_at=at(50)))
    assert [(t.payload, t.queue, t.visible_at) for t in await store.read_tasks(include_acked=True)] == [
        ("first", "default", T0)
    ]


async def test_enqueue_after_ack_is_still_a_no_op(store):
    await enqueue(store, task("t-1"))
    await store.write(Write(acks=[("t-1", None)]), T0)
    await enqueue(store, task("t-1"), now=at(1))
    assert await store.read_tasks() == []
    assert await ids(store, now=at(1)) == []
    assert [t.id for t in await store.read_tasks(include_acked=True)] == ["t-1"]


async def test_dequeue_takes_only_the_given_queues(store):
    await enqueue(store, task("a", queue="q1"), task("b", queue="q2"), task("c", queue="q3"))
    assert await ids(store, queues=["q1", "q3"]) == ["a", "c"]
    assert await ids(store, queues=["q1", "q2", "q3"]) == ["b"]


async def test_a_delegate_task_goes_only_to_a_dequeue_that_asks_for_it(store):
    await enqueue(
        store,
        task("d", kind=TaskKind.DELEGATE),
        task("r", kind=TaskKind.RESUME),
        task("s", kind=TaskKind.START),
        task("x", kind=TaskKind.RUN_STEP),
    )
    assert await ids(store, kinds=[TaskKind.RUN_STEP]) == ["x"]
    assert await ids(store, kinds=ENGINE) == ["r", "s"]
    assert await ids(store, kinds=ENGINE, now=at(100)) == ["r", "s", "x"]  # their ttl expired: visible again
    assert await ids(store, kinds=[TaskKind.DELEGATE], now=at(100)) == ["d"]


async def test_a_task_is_invisible_before_visible_at(store):
    await enqueue(store, task("later", visible_at=at(10)), task("now", visible_at=T0))
    assert await ids(store, now=at(9)) == ["now"]
    assert await ids(store, now=at(10)) == ["later"]


async def test_dequeue_hands_out_at_most_limit_tasks(store):
    await enqueue(store, *(task(f"t-{i}") for i in range(5)))
    first = await ids(store, limit=2)
    second = await ids(store, limit=2)
    third = await ids(store, limit=2)
    assert (len(first), len(second), len(third)) == (2, 2, 1)
    assert sorted(first + second + third) == [f"t-{i}" for i in range(5)]


async def test_a_dequeued_task_is_invisible_until_its_ttl_expires(store):
    await enqueue(store, task("t"))
    (first,) = await store.dequeue(["default"], ALL, "w1", 10, timedelta(seconds=10), T0)
    assert (first.deliveries, first.lease_owner) == (1, "w1")
    assert await ids(store, owner="w2", now=at(9)) == []
    (again,) = await store.dequeue(["default"], ALL, "w2", 10, timedelta(seconds=10), at(10))
    assert (again.id, again.deliveries, again.lease_owner) == ("t", 2, "w2")
    assert [t.deliveries for t in await store.read_tasks()] == [2]


async def test_nack_returns_a_task_after_its_delay(store):
    await enqueue(store, task("t"))
    await ids(store, now=T0)
    assert await store.nack("t", "w1", timedelta(seconds=5), at(1)) is True
    assert await ids(store, now=at(5)) == []
    (again,) = await store.dequeue(["default"], ALL, "w2", 10, TTL, at(6))
    assert (again.id, again.deliveries) == ("t", 2)


async def test_nack_without_delay_makes_the_task_visible_at_once(store):
    await enqueue(store, task("t"))
    await ids(store, now=T0)
    assert await store.nack("t", None, timedelta(0), at(1)) is True
    assert await ids(store, now=at(1)) == ["t"]


async def test_nack_by_another_owner_or_of_an_acked_task_does_nothing(store):
    await enqueue(store, task("t"), task("u"))
    await ids(store, owner="w1", now=T0)
    assert await store.nack("t", "w2", timedelta(0), at(1)) is False
    assert await ids(store, now=at(1)) == []
    await store.write(Write(acks=[("u", None)]), at(1))
    assert await store.nack("u", None, timedelta(0), at(2)) is False
    assert await store.nack("missing", None, timedelta(0), at(2)) is False
    assert await ids(store, now=at(2)) == []


async def test_an_acked_task_is_never_dequeued_again(store):
    await enqueue(store, task("t"))
    await ids(store, ttl=timedelta(seconds=1))
    await store.write(Write(acks=[("t", "w1")]), at(0.5))
    assert await ids(store, now=at(1000)) == []
    assert await store.read_tasks() == []


async def test_an_ack_with_an_owner_acks_only_if_that_owner_still_leases_the_task(store):
    await enqueue(store, task("t"))
    await store.dequeue(["default"], ALL, "w1", 10, timedelta(seconds=10), T0)
    await store.dequeue(["default"], ALL, "w2", 10, timedelta(seconds=10), at(10))  # w1's lease expired
    await store.write(Write(acks=[("t", "w1")]), at(11))
    assert [t.lease_owner for t in await store.read_tasks()] == ["w2"]
    await store.write(Write(acks=[("t", "w2")]), at(11))
    assert await store.read_tasks() == []


async def test_an_ack_without_an_owner_acks_a_ready_task(store):
    await enqueue(store, task("t"))
    await store.write(Write(acks=[("t", None)]), T0)
    assert await ids(store) == []


async def test_a_withdrawal_removes_a_ready_task_and_reports_it_in_the_memo(store):
    eid = await create(store)
    await enqueue(store, task("t", kind=TaskKind.DELEGATE), task("done"))
    await store.write(Write(acks=[("done", None)]), T0)
    result = await store.write(
        Write(
            entries=[
                entry(eid, EntryKind.FRAME_STARTED),
                entry(eid, EntryKind.FRAME_COMPLETED),
                entry(eid, EntryKind.FRAME_COMPLETED, "root/withdraw#1"),
                entry(eid, EntryKind.FRAME_COMPLETED, "root/withdraw#2"),
            ],
            withdrawals=[Withdrawal("t", memo=1), Withdrawal("done", memo=2), Withdrawal("missing", memo=3)],
        ),
        at(1),
    )
    assert result.entry_values == [None, True, False, False]
    assert [e.value for e in await store.read_journal(eid, after=1)] == [None, True, False, False]
    assert await ids(store, kinds=[TaskKind.DELEGATE], now=at(2)) == []
    again = await store.write(
        Write(entries=[entry(eid, EntryKind.FRAME_COMPLETED)], withdrawals=[Withdrawal("t", memo=0)]), at(3)
    )
    assert again.entry_values == [False]  # withdrawn once


async def test_read_tasks_filters_by_queue_eid_and_state(store):
    a, b = await create(store, queue="q1"), await create(store, queue="q2")
    await enqueue(store, task("ta", queue="q1", eid=a), task("tb", queue="q2", eid=b), task("free", queue="q1"))
    await store.write(Write(acks=[("ta", None)]), T0)
    assert sorted(t.id for t in await store.read_tasks(queue="q1")) == ["START:" + a, "free"]
    assert sorted(t.id for t in await store.read_tasks(queue="q1", include_acked=True)) == ["START:" + a, "free", "ta"]
    assert sorted(t.id for t in await store.read_tasks(eid=b)) == ["START:" + b, "tb"]
    assert sorted(t.id for t in await store.read_tasks(queue="q2", eid=a)) == []
    assert len(await store.read_tasks()) == 4
    assert len(await store.read_tasks(include_acked=True)) == 5


async def test_concurrent_dequeues_never_hand_out_one_task_twice(store):
    await enqueue(store, *(task(f"t-{i:02d}") for i in range(20)))
    batches = await asyncio.gather(*(store.dequeue(["default"], ALL, f"w{i}", 3, TTL, T0) for i in range(10)))
    handed = [t.id for batch in batches for t in batch]
    assert sorted(handed) == [f"t-{i:02d}" for i in range(20)]


async def test_dequeues_from_stores_sharing_a_database_never_hand_out_one_task_twice(shared_url):
    stores = [open_store(shared_url) for _ in range(3)]
    for s in stores:
        await s.open()
    try:
        await enqueue(stores[0], *(task(f"t-{i:02d}") for i in range(30)))
        batches = await asyncio.gather(
            *(s.dequeue(["default"], ALL, f"w{i}-{j}", 2, TTL, T0) for j in range(8) for i, s in enumerate(stores))
        )
        handed = [t.id for batch in batches for t in batch]
        assert len(handed) == len(set(handed)) == 30
    finally:
        for s in stores:
            await s.close()


async def test_a_dequeue_of_no_queue_or_no_kind_hands_out_nothing(store):
    await enqueue(store, task("t"))
    assert await ids(store, queues=[]) == []
    assert await ids(store, kinds=[]) == []
    assert await ids(store) == ["t"]
