"""Executions: create once (NewExecution), read, change status, request cancellation, expect."""

from __future__ import annotations

import dataclasses

import pytest

from flowli.domain import EntryKind, ExecutionStateError, Status, TaskKind, task_id
from flowli.store import NewMessage, StatusChange, Write

from .conftest import T0, TTL, at, create, entry, new_execution, prov, snapshot, started, task

pytestmark = pytest.mark.integration


async def test_a_new_execution_is_created_with_its_entry_and_its_start_task(store):
    new = new_execution(queue="q1", key="k-1", parent_eid="p-1", parent_fid="root/child#0")
    eid = new.record.eid
    result = await store.write(Write(executions=[new]), T0)
    assert result.created == [True]

    record = await store.read_execution(eid)
    assert record is not None
    assert (record.eid, record.workflow, record.version, record.status) == (eid, "wf", "1", Status.PENDING)
    assert (record.args, record.queue, record.key) == ([1, "two"], "q1", "k-1")
    assert (record.parent_eid, record.parent_fid) == ("p-1", "root/child#0")
    assert record.created_at == T0
    assert (record.lease_owner, record.lease_epoch, record.cancel_requested) == (None, 0, None)

    journal = await store.read_journal(eid)
    assert journal == [dataclasses.replace(new.entry, seq=1)]

    tasks = await store.dequeue(["q1"], [TaskKind.START], "w1", 10, TTL, T0)
    assert [(t.id, t.kind, t.eid) for t in tasks] == [(task_id(TaskKind.START, eid), TaskKind.START, eid)]


async def test_a_second_new_execution_with_the_same_eid_changes_nothing(store):
    eid = await create(store)
    before = await snapshot(store, [eid])
    again = new_execution(eid, queue="other", now=at(5))
    again = dataclasses.replace(again, task=dataclasses.replace(again.task, id="START:other"))
    result = await store.write(Write(executions=[again]), at(5))
    assert result.created == [False]
    assert await snapshot(store, [eid]) == before


async def test_created_reports_each_new_execution_in_order(store):
    old = await create(store)
    fresh = new_execution()
    result = await store.write(Write(executions=[new_execution(old), fresh]), T0)
    assert result.created == [False, True]
    assert await store.read_execution(fresh.record.eid) is not None


async def test_read_executions_returns_the_known_ones(store):
    a, b = await create(store), await create(store)
    found = await store.read_executions([a, "unknown", b])
    assert sorted(r.eid for r in found) == sorted([a, b])
    assert await store.read_executions([]) == []


async def test_a_status_change_sets_status_result_error_blocked_and_version(store):
    eid, fence = await started(store)
    blocked = {"reason": "nondeterminism", "fid": "root/fetch#0"}
    await store.write(
        Write(fence=fence, status=StatusChange(eid, Status.SUSPENDED, blocked=blocked, version="2")), at(1)
    )
    record = await store.read_execution(eid)
    assert (record.status, record.blocked, record.version) == (Status.SUSPENDED, blocked, "2")

    await store.write(Write(status=StatusChange(eid, Status.FAILED, error={"type": "Boom", "message": "no"})), at(2))
    record = await store.read_execution(eid)
    assert (record.status, record.error, record.result, record.blocked) == (
        Status.FAILED,
        {"type": "Boom", "message": "no"},
        None,
        None,
    )
    assert record.version == "2"  # a change without a version keeps it
    assert record.terminal


async def test_a_completed_status_keeps_its_result(store):
    eid, fence = await started(store)
    await store.write(
        Write(fence=fence, status=StatusChange(eid, Status.COMPLETED, result={"total": [1, 2.5, None]})), at(1)
    )
    record = await store.read_execution(eid)
    assert (record.status, record.result) == (Status.COMPLETED, {"total": [1, 2.5, None]})


async def test_a_cancel_request_is_set_once(store):
    eid = await create(store)
    await store.write(Write(cancel_request=(eid, {"by": "alice@example.com", "reason": "first"})), at(1))
    await store.write(Write(cancel_request=(eid, {"by": "bob@example.com", "reason": "second"})), at(2))
    record = await store.read_execution(eid)
    assert record.cancel_requested == {"by": "alice@example.com", "reason": "first"}


async def test_expect_refuses_a_write_when_the_status_is_not_allowed_and_applies_nothing(store):
    eid = await create(store)
    before = await snapshot(store, [eid], ["ch"])
    write = Write(
        expect=(eid, frozenset({Status.RUNNING, Status.SUSPENDED})),
        entries=[entry(eid, EntryKind.FRAME_COMPLETED, value=1)],
        messages=[NewMessage("ch", "x", prov())],
        tasks=[task(eid=eid)],
        status=StatusChange(eid, Status.COMPLETED),
        cancel_request=(eid, {"by": "x"}),
    )
    with pytest.raises(ExecutionStateError):
        await store.write(write, at(1))
    assert await snapshot(store, [eid], ["ch"]) == before


async def test_expect_lets_a_write_through_when_the_status_is_allowed(store):
    eid = await create(store)
    result = await store.write(
        Write(expect=(eid, frozenset({Status.PENDING})), entries=[entry(eid, EntryKind.FRAME_COMPLETED, value=7)]),
        at(1),
    )
    assert result.entry_seqs == [2]
    assert [e.value for e in await store.read_journal(eid, after=1)] == [7]
