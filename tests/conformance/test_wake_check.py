"""WakeCheck: a suspending write enqueues its RESUME in the same transaction when a condition
holds already (a message past the cursor, a child that ended, a due instant, a step outcome
past a journal seq, a cancel request), and only then."""

from __future__ import annotations

import pytest

from flowli.domain import EntryKind, Status, TaskKind, task_id
from flowli.store import Fence, NewMessage, StatusChange, WakeCheck, Write

from .conftest import T0, TTL, at, create, entry, prov, started, task

pytestmark = pytest.mark.integration


def wake_task(eid):
    return task(task_id(TaskKind.RESUME, eid, "wake:1"), eid=eid, visible_at=at(5))


async def suspend(store, eid, fence, now=at(5), **conditions):
    """Suspend the execution with a WakeCheck; return whether it woke, and check that the
    wake task is on the queue exactly when it did."""
    write = Write(
        fence=fence,
        entries=[entry(eid, EntryKind.EXECUTION_SUSPENDED, "root", when=now)],
        status=StatusChange(eid, Status.SUSPENDED),
        release=True,
        wake=WakeCheck(task=wake_task(eid), **conditions),
    )
    result = await store.write(write, now)
    record = await store.read_execution(eid)
    assert (record.status, record.lease_owner) == (Status.SUSPENDED, None)  # the rest applied either way
    resumes = [t.id for t in await store.read_tasks(eid=eid) if t.kind is TaskKind.RESUME]
    assert resumes == ([wake_task(eid).id] if result.woke else []), (result.woke, resumes)
    return result.woke


async def test_no_condition_holds_then_nothing_is_enqueued(store):
    eid, fence = await started(store)
    child = await create(store)
    await store.write(Write(messages=[NewMessage(f"{eid}.go", 1, prov())]), at(1))
    await store.write(Write(entries=[entry(eid, EntryKind.FRAME_STARTED, "root/f#0")]), at(2))
    assert not await suspend(
        store,
        eid,
        fence,
        channels={f"{eid}.go": 1, f"{eid}.other": 0},
        children=[child],
        due_by=at(6),
        journal_after=1,
        cancel=True,
    )


async def test_a_message_past_the_cursor_wakes(store):
    eid, fence = await started(store)
    await store.write(Write(messages=[NewMessage("go", i, prov()) for i in range(2)]), at(1))
    assert await suspend(store, eid, fence, channels={"quiet": 0, "go": 1})
    dequeued = await store.dequeue(["default"], [TaskKind.RESUME], "w2", 10, TTL, at(5))
    assert [t.id for t in dequeued] == [wake_task(eid).id]


async def test_no_message_past_the_cursor_does_not_wake(store):
    eid, fence = await started(store)
    await store.write(Write(messages=[NewMessage("go", i, prov()) for i in range(2)]), at(1))
    assert not await suspend(store, eid, fence, channels={"go": 2})


async def test_a_child_that_ended_wakes(store):
    eid, fence = await started(store)
    running, ended = await create(store), await create(store)
    await store.write(Write(status=StatusChange(ended, Status.FAILED, error={"type": "X"})), at(1))
    assert await suspend(store, eid, fence, children=[running, ended])


async def test_children_that_did_not_end_do_not_wake(store):
    eid, fence = await started(store)
    pending = await create(store)
    running, _ = await started(store, "w9")
    suspended, sfence = await started(store, "w9")
    await store.write(Write(fence=sfence, release=True, status=StatusChange(suspended, Status.SUSPENDED)), at(1))
    assert not await suspend(store, eid, fence, children=[pending, running, suspended, "unknown"])


async def test_a_due_instant_wakes(store):
    eid, fence = await started(store)
    assert await suspend(store, eid, fence, now=at(5), due_by=at(5))


async def test_a_future_instant_does_not_wake(store):
    eid, fence = await started(store)
    assert not await suspend(store, eid, fence, now=at(5), due_by=at(5.5))


async def test_a_step_outcome_past_the_journal_seq_wakes(store):
    for kind in (EntryKind.FRAME_COMPLETED, EntryKind.FRAME_FAILED):
        eid, fence = await started(store)
        await store.write(Write(fence=fence, entries=[entry(eid, EntryKind.FRAME_STARTED, "root/f#0")]), at(1))
        await store.write(Write(entries=[entry(eid, kind, "root/f#0", value=1)]), at(2))  # a RUN_STEP worker
        assert await suspend(store, eid, fence, journal_after=2), kind


async def test_no_step_outcome_past_the_journal_seq_does_not_wake(store):
    eid, fence = await started(store)
    await store.write(
        Write(
            fence=fence,
            entries=[
                entry(eid, EntryKind.FRAME_STARTED, "root/f#0"),
                entry(eid, EntryKind.FRAME_COMPLETED, "root/f#0"),
            ],
        ),
        at(1),
    )
    await store.write(Write(fence=fence, entries=[entry(eid, EntryKind.FRAME_STARTED, "root/g#0")]), at(2))
    other, _ = await started(store)  # an outcome in another execution's journal does not count
    await store.write(Write(entries=[entry(other, EntryKind.FRAME_COMPLETED, "root/g#0")]), at(3))
    assert not await suspend(store, eid, fence, journal_after=3)


async def test_a_cancel_request_wakes(store):
    eid, fence = await started(store)
    await store.write(Write(cancel_request=(eid, {"by": "alice@example.com"})), at(1))
    assert await suspend(store, eid, fence, cancel=True)


async def test_a_cancel_request_does_not_wake_a_check_that_does_not_ask(store):
    eid, fence = await started(store)
    await store.write(Write(cancel_request=(eid, {"by": "alice@example.com"})), at(1))
    assert not await suspend(store, eid, fence, cancel=False)


async def test_a_wake_task_is_enqueued_once(store):
    eid, fence = await started(store)
    assert await suspend(store, eid, fence, due_by=T0)
    again = await store.acquire(eid, "w2", TTL, at(6))
    result = await store.write(
        Write(
            fence=Fence(eid, "w2", again.epoch),
            wake=WakeCheck(task=task(wake_task(eid).id, eid=eid, payload="x"), due_by=T0),
        ),
        at(7),
    )
    assert result.woke
    assert [t.payload for t in await store.read_tasks(eid=eid) if t.kind is TaskKind.RESUME] == [None]
