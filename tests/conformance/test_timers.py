"""Timers: set, read, due, fired (exactly that timer), cleared; and next_wake."""

from __future__ import annotations

from datetime import timedelta

import pytest

from flowli.domain import TaskKind, Timer
from flowli.store import Withdrawal, Write

from .conftest import T0, TTL, at, create, task

pytestmark = pytest.mark.integration


async def set_timers(store, *timers, now=T0):
    await store.write(Write(timers=list(timers)), now)


async def test_timers_are_set_and_read_in_order(store):
    a, b = await create(store), await create(store)
    ta1, ta0, tb = Timer(a, "root/sleep#1", at(20)), Timer(a, "root/sleep#0", at(10)), Timer(b, "root/sleep#0", at(15))
    await set_timers(store, ta1, ta0, tb)
    assert await store.read_timers(a) == [ta0, ta1]
    assert await store.read_timers(b) == [tb]
    assert await store.read_timers() == [ta0, tb, ta1]
    assert await store.read_timers("unknown") == []


async def test_a_timer_keeps_its_instant_to_the_microsecond(store):
    eid = await create(store)
    t = Timer(eid, "root/sleep#0", T0 + timedelta(days=400, microseconds=987654))
    await set_timers(store, t)
    (got,) = await store.read_timers(eid)
    assert got == t and got.at.utcoffset() == timedelta(0)


async def test_due_timers_are_those_at_or_before_now_earliest_first(store):
    eid = await create(store)
    timers = [Timer(eid, f"root/sleep#{i}", at(10 * (i + 1))) for i in range(4)]  # 10, 20, 30, 40
    await set_timers(store, *reversed(timers))
    assert await store.due_timers(at(9), 10) == []
    assert await store.due_timers(at(10), 10) == timers[:1]
    assert await store.due_timers(at(35), 10) == timers[:3]
    assert await store.due_timers(at(100), 2) == timers[:2]


async def test_fired_deletes_exactly_that_timer(store):
    a, b = await create(store), await create(store)
    fired, kept_same_eid = Timer(a, "root/sleep#0", at(10)), Timer(a, "root/sleep#1", at(10))
    kept_other = Timer(b, "root/sleep#0", at(10))
    await set_timers(store, fired, kept_same_eid, kept_other)
    await store.write(Write(fired=[fired]), at(10))
    left = await store.read_timers()
    assert sorted(left, key=lambda t: (t.eid, t.fid)) == [kept_same_eid, kept_other]


async def test_fired_leaves_a_timer_that_moved_since_it_was_read(store):
    eid = await create(store)
    old = Timer(eid, "root/sleep#0", at(10))
    await set_timers(store, old)
    (due,) = await store.due_timers(at(10), 10)
    moved = Timer(eid, "root/sleep#0", at(60))
    await store.write(Write(clear_timers=[eid], timers=[moved]), at(10))  # the execution suspended again
    await store.write(Write(fired=[due]), at(11))
    assert await store.read_timers(eid) == [moved]


async def test_clear_timers_deletes_every_timer_of_those_executions(store):
    a, b, c = await create(store), await create(store), await create(store)
    await set_timers(
        store,
        Timer(a, "root/sleep#0", at(1)),
        Timer(a, "root/sleep#1", at(2)),
        Timer(b, "root/sleep#0", at(3)),
        Timer(c, "root/sleep#0", at(4)),
    )
    await store.write(Write(clear_timers=[a, c]), at(1))
    assert [t.eid for t in await store.read_timers()] == [b]


async def test_clear_then_set_in_one_write_replaces_the_timers(store):
    eid = await create(store)
    await set_timers(store, Timer(eid, "root/sleep#0", at(10)), Timer(eid, "root/retry#1", at(20)))
    new = Timer(eid, "root/sleep#2", at(30))
    await store.write(Write(clear_timers=[eid], timers=[new]), at(5))
    assert await store.read_timers(eid) == [new]


async def test_next_wake_is_the_earliest_timer_or_delayed_task(store):
    assert await store.next_wake(T0) is None
    eid = await create(store, now=at(-100))
    await store.write(Write(acks=[(f"START:{eid}", None)]), at(-100))
    assert await store.next_wake(T0) is None  # an acked task wakes nothing

    await set_timers(store, Timer(eid, "root/sleep#0", at(50)), Timer(eid, "root/sleep#1", at(70)))
    assert await store.next_wake(T0) == at(50)
    await store.write(Write(tasks=[task("later", visible_at=at(30)), task("gone", visible_at=at(20))]), T0)
    assert await store.next_wake(T0) == at(20)
    await store.write(Write(withdrawals=[Withdrawal("gone")]), T0)
    assert await store.next_wake(T0) == at(30)
    await store.write(Write(acks=[("later", None)]), T0)
    assert await store.next_wake(T0) == at(50)
    await store.write(Write(clear_timers=[eid]), T0)
    assert await store.next_wake(T0) is None


async def test_next_wake_leaves_out_the_tasks_visible_already_and_keeps_an_overdue_timer(store):
    # a task visible now is the workers' to dequeue: a sweeper that woke for it would wake at once, again and again
    await store.write(Write(tasks=[task("now", visible_at=T0), task("soon", visible_at=at(5))]), T0)
    assert await store.next_wake(T0) == at(5)
    assert await store.next_wake(at(5)) is None
    eid = await create(store, now=T0)
    await set_timers(store, Timer(eid, "root/sleep#0", at(2)))
    assert await store.next_wake(at(10)) == at(2)  # due, not fired yet: it is still the next thing to do


async def test_next_wake_counts_a_dequeued_task_at_the_end_of_its_ttl(store):
    await store.write(Write(tasks=[task("t", visible_at=T0)]), T0)
    assert await store.next_wake(T0) is None
    await store.dequeue(["default"], [TaskKind.RESUME], "w1", 1, TTL, at(1))
    assert await store.next_wake(at(1)) == at(1) + TTL
