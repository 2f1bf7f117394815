"""Waiters: an execution waits on a channel until its next clear_waiters; WakeWaiters enqueues
one RESUME per waiting execution, on its queue, idempotent by key."""

from __future__ import annotations

import pytest

from flowli.domain import TaskKind, task_id
from flowli.store import WakeWaiters, Write

from .conftest import T0, at, create, prov

pytestmark = pytest.mark.integration


async def test_waiters_are_added_and_cleared_per_execution(store):
    a, b = await create(store), await create(store)
    await store.write(Write(waiters=[("news", a), ("news", b), ("alerts", a), ("news", a)]), T0)
    assert sorted(await store.waiters("news")) == sorted([a, b])
    assert await store.waiters("alerts") == [a]
    await store.write(Write(clear_waiters=[a]), at(1))
    assert await store.waiters("news") == [b]
    assert await store.waiters("alerts") == []
    assert await store.waiters("nothing") == []


async def test_clear_then_add_in_one_write_replaces_the_waits(store):
    eid = await create(store)
    await store.write(Write(waiters=[("old", eid)]), T0)
    await store.write(Write(clear_waiters=[eid], waiters=[("new", eid)]), at(1))
    assert (await store.waiters("old"), await store.waiters("new")) == ([], [eid])


async def test_wake_waiters_enqueues_a_resume_per_waiting_execution_on_its_queue(store):
    a, b = await create(store, queue="qa"), await create(store, queue="qb")
    c = await create(store, queue="qa")  # waits elsewhere
    await store.write(Write(waiters=[("news", a), ("news", b), ("other", c)]), T0)
    p = prov("alice@example.com", kind="human", when=at(5))
    await store.write(Write(wake_waiters=[WakeWaiters("news", "send:1", p)]), at(5))

    resumes = [t for t in await store.read_tasks() if t.kind is TaskKind.RESUME]
    assert sorted((t.id, t.queue, t.eid) for t in resumes) == sorted(
        [
            (task_id(TaskKind.RESUME, a, "send:1"), "qa", a),
            (task_id(TaskKind.RESUME, b, "send:1"), "qb", b),
        ]
    )
    assert all(t.provenance == p for t in resumes)
    got = await store.dequeue(["qb"], [TaskKind.RESUME], "w1", 10, at(1) - T0, at(5))
    assert [t.id for t in got] == [f"RESUME:{b}:send:1"]
    assert sorted(await store.waiters("news")) == sorted([a, b])  # they wait until their next clear


async def test_wake_waiters_is_idempotent_by_key(store):
    a = await create(store)
    await store.write(Write(waiters=[("news", a)]), T0)
    wake = WakeWaiters("news", "send:1", prov())
    await store.write(Write(wake_waiters=[wake]), at(1))
    await store.write(Write(acks=[(task_id(TaskKind.RESUME, a, "send:1"), None)]), at(2))
    await store.write(Write(wake_waiters=[wake, wake]), at(3))
    assert [t.id for t in await store.read_tasks(eid=a) if t.kind is TaskKind.RESUME] == []
    await store.write(Write(wake_waiters=[WakeWaiters("news", "send:2", prov())]), at(4))
    assert [t.id for t in await store.read_tasks(eid=a) if t.kind is TaskKind.RESUME] == [
        task_id(TaskKind.RESUME, a, "send:2")
    ]


async def test_wake_waiters_sees_the_waiters_of_the_same_write(store):
    a = await create(store)
    await store.write(Write(waiters=[("news", a)], wake_waiters=[WakeWaiters("news", "k", prov())]), T0)
    assert [t.id for t in await store.read_tasks(eid=a) if t.kind is TaskKind.RESUME] == [
        task_id(TaskKind.RESUME, a, "k")
    ]


async def test_wake_waiters_without_waiters_enqueues_nothing(store):
    a = await create(store)
    result = await store.write(Write(wake_waiters=[WakeWaiters("empty", "k", prov())]), T0)
    assert result.entry_seqs == []
    assert [t.id for t in await store.read_tasks(include_acked=True)] == [task_id(TaskKind.START, a)]
