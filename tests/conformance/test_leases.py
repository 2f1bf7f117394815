"""Leases: acquire (epoch + 1 at each acquisition), renew, release, expiry, ack in the acquire."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from flowli.domain import EntryKind, LeaseLost, Status, TaskKind, task_id
from flowli.store import Fence, StatusChange, Write

from .conftest import T0, TTL, at, create, entry, started, task

pytestmark = pytest.mark.integration


async def test_acquire_takes_the_lease_and_returns_the_record_and_journal(store):
    eid = await create(store)
    acquired = await store.acquire(eid, "w1", TTL, at(1))
    assert acquired.epoch == 1
    record = acquired.record
    assert record is not None and record.eid == eid
    assert (record.status, record.lease_owner, record.lease_epoch) == (Status.RUNNING, "w1", 1)
    assert record.lease_expires_at == at(1) + TTL
    assert [(e.seq, e.kind) for e in acquired.journal] == [(1, EntryKind.EXECUTION_STARTED)]
    assert await store.read_execution(eid) == record


async def test_a_second_acquire_of_an_unexpired_lease_is_refused(store):
    eid, fence = await started(store, "w1")
    for owner in ("w2", "w1"):
        refused = await store.acquire(eid, owner, TTL, at(29))
        assert refused.epoch is None
    record = await store.read_execution(eid)
    assert (record.lease_owner, record.lease_epoch) == ("w1", fence.epoch)
    await store.write(Write(fence=fence, entries=[entry(eid)]), at(29))  # the holder still writes


async def test_an_expired_lease_is_acquired_by_another_owner_at_the_next_epoch(store):
    eid, old = await started(store, "w1", ttl=timedelta(seconds=10))
    assert old.epoch == 1
    assert (await store.acquire(eid, "w2", TTL, T0 + timedelta(seconds=10) - timedelta(microseconds=1))).epoch is None
    stolen = await store.acquire(eid, "w2", TTL, at(10))
    assert stolen.epoch == 2
    assert stolen.record.lease_owner == "w2"

    with pytest.raises(LeaseLost):
        await store.write(Write(fence=old, entries=[entry(eid, EntryKind.FRAME_COMPLETED, value="late")]), at(11))
    new = Fence(eid, "w2", 2)
    result = await store.write(Write(fence=new, entries=[entry(eid, EntryKind.FRAME_COMPLETED, value="w2")]), at(11))
    assert [e.value for e in await store.read_journal(eid, after=1)] == ["w2"]
    assert result.entry_seqs == [2]


async def test_each_acquisition_increases_the_epoch(store):
    eid = await create(store)
    epochs = []
    for i, owner in enumerate(["w1", "w2", "w1", "w3"]):
        acquired = await store.acquire(eid, owner, TTL, at(i))
        epochs.append(acquired.epoch)
        await store.write(Write(fence=Fence(eid, owner, acquired.epoch), release=True), at(i))
    assert epochs == [1, 2, 3, 4]


async def test_release_frees_the_lease_at_once(store):
    eid, fence = await started(store, "w1")
    await store.write(Write(fence=fence, release=True, status=StatusChange(eid, Status.SUSPENDED)), at(1))
    record = await store.read_execution(eid)
    assert (record.status, record.lease_owner) == (Status.SUSPENDED, None)

    again = await store.acquire(eid, "w2", TTL, at(2))  # long before the old lease would expire
    assert again.epoch == fence.epoch + 1
    with pytest.raises(LeaseLost):
        await store.write(Write(fence=fence, entries=[entry(eid)]), at(3))


async def test_a_write_fenced_after_release_is_refused(store):
    eid, fence = await started(store, "w1")
    await store.write(Write(fence=fence, release=True), at(1))
    with pytest.raises(LeaseLost):
        await store.write(Write(fence=fence, entries=[entry(eid)]), at(2))


@pytest.mark.parametrize("status", [Status.COMPLETED, Status.FAILED, Status.CANCELLED])
async def test_a_terminal_execution_is_not_acquired(store, status):
    eid, fence = await started(store, "w1")
    await store.write(Write(fence=fence, release=True, status=StatusChange(eid, status)), at(1))
    acquired = await store.acquire(eid, "w2", TTL, at(100))
    assert acquired.epoch is None
    assert acquired.record is not None and acquired.record.status == status
    assert (await store.read_execution(eid)).lease_epoch == fence.epoch


async def test_an_unknown_execution_is_not_acquired(store):
    acquired = await store.acquire("unknown", "w1", TTL, T0)
    assert (acquired.record, acquired.epoch) == (None, None)


async def test_acquire_acks_the_task_whether_it_acquires_or_not(store):
    eid = await create(store)
    start = task_id(TaskKind.START, eid)
    assert (await store.acquire(eid, "w1", TTL, T0, ack=start)).epoch == 1
    assert await store.read_tasks(eid=eid) == []
    assert [t.id for t in await store.read_tasks(eid=eid, include_acked=True)] == [start]

    resume = task(task_id(TaskKind.RESUME, eid, "k"), eid=eid)
    await store.write(Write(tasks=[resume]), T0)
    assert (await store.acquire(eid, "w2", TTL, at(1), ack=resume.id)).epoch is None  # refused, acked all the same
    assert await store.read_tasks(eid=eid) == []


async def test_renew_extends_the_leases_still_held(store):
    eid, fence = await started(store, "w1", ttl=timedelta(seconds=10))
    renewal = await store.renew("w1", [(eid, fence.epoch)], timedelta(seconds=10), at(8))
    assert (renewal.lost, renewal.cancel_requested) == ([], [])
    assert (await store.read_execution(eid)).lease_expires_at == at(18)
    assert (await store.acquire(eid, "w2", TTL, at(15))).epoch is None  # past the first expiry, within the renewal
    assert await store.expired_leases(at(15), 10) == []


async def test_renew_reports_the_stolen_and_the_unknown_leases(store):
    kept, kept_fence = await started(store, "w1", ttl=timedelta(seconds=10))
    stolen, stolen_fence = await started(store, "w1", ttl=timedelta(seconds=10))
    await store.renew("w1", [(kept, kept_fence.epoch)], timedelta(seconds=10), at(5))
    assert (await store.acquire(stolen, "w2", TTL, at(10))).epoch == 2
    leases = [(kept, kept_fence.epoch), (stolen, stolen_fence.epoch), ("unknown", 1)]
    renewal = await store.renew("w1", leases, TTL, at(11))
    assert sorted(renewal.lost) == sorted([stolen, "unknown"])
    assert renewal.cancel_requested == []
    assert (await store.read_execution(stolen)).lease_owner == "w2"  # renew took nothing back


async def test_renew_at_a_stale_epoch_is_lost(store):
    eid, fence = await started(store, "w1")
    await store.write(Write(fence=fence, release=True), at(1))
    again = await store.acquire(eid, "w1", TTL, at(2))
    renewal = await store.renew("w1", [(eid, fence.epoch)], TTL, at(3))
    assert renewal.lost == [eid]
    assert (await store.renew("w1", [(eid, again.epoch)], TTL, at(3))).lost == []


async def test_renew_reports_cancel_requests(store):
    calm, calm_fence = await started(store, "w1")
    asked, asked_fence = await started(store, "w1")
    await store.write(Write(cancel_request=(asked, {"by": "alice@example.com"})), at(1))
    renewal = await store.renew("w1", [(calm, calm_fence.epoch), (asked, asked_fence.epoch)], TTL, at(2))
    assert (renewal.lost, renewal.cancel_requested) == ([], [asked])


async def test_expired_leases_lists_running_executions_whose_lease_expired(store):
    live, _ = await started(store, "w1", ttl=timedelta(seconds=60))
    dead, _ = await started(store, "w2", ttl=timedelta(seconds=10))
    parked, parked_fence = await started(store, "w3", ttl=timedelta(seconds=10))
    await store.write(Write(fence=parked_fence, release=True, status=StatusChange(parked, Status.SUSPENDED)), at(1))
    pending = await create(store)
    assert await store.expired_leases(at(9), 10) == []
    expired = await store.expired_leases(at(10), 10)
    assert [r.eid for r in expired] == [dead]
    assert expired[0].status == Status.RUNNING
    assert {r.eid for r in await store.expired_leases(at(61), 10)} == {live, dead}
    assert len(await store.expired_leases(at(61), 1)) == 1
    assert pending not in {r.eid for r in await store.expired_leases(at(1000), 10)}


async def test_exactly_one_of_concurrent_acquires_wins(store):
    eid = await create(store)
    outcomes = await asyncio.gather(*(store.acquire(eid, f"w{i}", TTL, at(1)) for i in range(10)))
    winners = [i for i, a in enumerate(outcomes) if a.epoch is not None]
    assert len(winners) == 1
    assert outcomes[winners[0]].epoch == 1
    assert (await store.read_execution(eid)).lease_owner == f"w{winners[0]}"
