"""acquire_many: the executions of several START and RESUME tasks acquired in one call, each as
``acquire`` would (epoch + 1, the journal, the task acked whether acquired or not), the answers
in the order of ``wanted``; a repeat of an eid, an unknown eid, a live lease of another owner and
a terminal execution answer Acquired(None, None, [])."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from flowli.domain import EntryKind, LeaseLost, Status, TaskKind, task_id
from flowli.store import Acquired, Fence, StatusChange, Write
from flowli.testing import open_store

from .conftest import TTL, at, create, entry, started, task

pytestmark = pytest.mark.integration

NOT_ACQUIRED = Acquired(None, None, [])


def start_of(eid: str) -> tuple[str, str]:
    return (eid, task_id(TaskKind.START, eid))


async def acked(store, eid: str, tid: str) -> bool:
    """Whether task ``tid`` of ``eid`` exists and is no longer ready."""
    ready = {t.id for t in await store.read_tasks(eid=eid)}
    every = {t.id for t in await store.read_tasks(eid=eid, include_acked=True)}
    return tid in every and tid not in ready


async def resume_task(store, eid: str, key: str) -> str:
    t = task(task_id(TaskKind.RESUME, eid, key), eid=eid)
    await store.write(Write(tasks=[t]), at(0))
    return t.id


async def test_several_starts_are_acquired_in_the_order_wanted(store):
    eids = [await create(store) for _ in range(6)]
    # a journal longer than execution.started for one of them (a write with no fence)
    await store.write(Write(entries=[entry(eids[2], EntryKind.ANNOUNCED, "root/x#0", value="v")]), at(0))
    wanted = [start_of(eid) for eid in reversed(eids)]  # not the order of creation, nor of the eids
    got = await store.acquire_many(wanted, "w1", TTL, at(1))

    assert len(got) == len(wanted)
    for (eid, tid), acquired in zip(wanted, got):
        assert acquired.epoch == 1, eid
        record = acquired.record
        assert record is not None and record.eid == eid
        assert (record.status, record.lease_owner, record.lease_epoch) == (Status.RUNNING, "w1", 1)
        assert record.lease_expires_at == at(1) + TTL
        assert acquired.journal == await store.read_journal(eid)
        expected = [EntryKind.EXECUTION_STARTED] + ([EntryKind.ANNOUNCED] if eid == eids[2] else [])
        assert [e.kind for e in acquired.journal] == expected
        assert [e.seq for e in acquired.journal] == list(range(1, len(expected) + 1))
        assert all(e.eid == eid for e in acquired.journal)
        assert await store.read_execution(eid) == record
        assert await acked(store, eid, tid)
        # the lease holds: the holder writes, another owner does not acquire
        result = await store.write(Write(fence=Fence(eid, "w1", 1), entries=[entry(eid)]), at(2))
        assert result.entry_seqs == [len(expected) + 1]
        assert (await store.acquire(eid, "w2", TTL, at(2))).epoch is None


async def test_a_live_lease_of_another_owner_is_not_acquired_but_its_task_is_acked(store):
    free_a = await create(store)
    held, fence = await started(store, "w9")
    free_b = await create(store)
    resume = await resume_task(store, held, "sig:1")
    wanted = [start_of(free_a), (held, resume), start_of(free_b)]

    got = await store.acquire_many(wanted, "w1", TTL, at(5))

    assert got[1] == NOT_ACQUIRED
    assert [g.epoch for g in (got[0], got[2])] == [1, 1]
    assert [g.record.eid for g in (got[0], got[2])] == [free_a, free_b]
    for eid, tid in wanted:
        assert await acked(store, eid, tid), eid
    record = await store.read_execution(held)
    assert (record.lease_owner, record.lease_epoch, record.lease_expires_at) == ("w9", fence.epoch, at(0) + TTL)
    await store.write(Write(fence=fence, entries=[entry(held)]), at(6))  # the holder still writes


@pytest.mark.parametrize("status", [Status.COMPLETED, Status.FAILED, Status.CANCELLED])
async def test_a_terminal_execution_is_not_acquired(store, status):
    done, fence = await started(store, "w9")
    await store.write(Write(fence=fence, release=True, status=StatusChange(done, status)), at(1))
    resume = await resume_task(store, done, "late")
    other = await create(store)

    got = await store.acquire_many([(done, resume), start_of(other)], "w1", TTL, at(100))

    assert got[0] == NOT_ACQUIRED
    assert got[1].epoch == 1 and got[1].record.eid == other
    record = await store.read_execution(done)
    assert (record.status, record.lease_owner, record.lease_epoch) == (status, None, fence.epoch)
    assert await acked(store, done, resume)


async def test_an_expired_lease_is_acquired_at_the_next_epoch_with_the_holders_journal(store):
    eid, old = await started(store, "w9", ttl=timedelta(seconds=10))
    await store.write(Write(fence=old, entries=[entry(eid, EntryKind.FRAME_STARTED, "root/f#0"),
                                                entry(eid, EntryKind.FRAME_COMPLETED, "root/f#0", value=7)]), at(1))
    resume = await resume_task(store, eid, "lease")
    fresh = await create(store)

    # not yet expired: refused
    early = await store.acquire_many([(eid, resume)], "w1", TTL, at(9))
    assert early == [NOT_ACQUIRED]
    resume2 = await resume_task(store, eid, "lease-2")
    got = await store.acquire_many([start_of(fresh), (eid, resume2)], "w1", TTL, at(10))

    assert got[0].epoch == 1
    taken = got[1]
    assert taken.epoch == old.epoch + 1
    assert (taken.record.lease_owner, taken.record.lease_epoch) == ("w1", old.epoch + 1)
    assert [(e.seq, e.kind, e.value) for e in taken.journal] == [
        (1, EntryKind.EXECUTION_STARTED, {"args": [1, "two"]}),
        (2, EntryKind.FRAME_STARTED, None),
        (3, EntryKind.FRAME_COMPLETED, 7),
    ]
    assert await acked(store, eid, resume) and await acked(store, eid, resume2)
    with pytest.raises(LeaseLost):
        await store.write(Write(fence=old, entries=[entry(eid)]), at(11))
    assert (await store.write(Write(fence=Fence(eid, "w1", taken.epoch), entries=[entry(eid)]), at(11))).entry_seqs == [4]


async def test_an_eid_wanted_twice_is_acquired_once_and_both_tasks_are_acked(store):
    eid = await create(store)
    other = await create(store)
    resume = await resume_task(store, eid, "sig:1")
    wanted = [start_of(eid), start_of(other), (eid, resume)]

    got = await store.acquire_many(wanted, "w1", TTL, at(1))

    assert got[0].epoch == 1 and got[0].record.eid == eid
    assert got[0].journal == await store.read_journal(eid)
    assert got[1].epoch == 1 and got[1].record.eid == other
    assert got[2] == NOT_ACQUIRED
    assert (await store.read_execution(eid)).lease_epoch == 1  # acquired once, not twice
    for e, tid in wanted:
        assert await acked(store, e, tid), tid


async def test_an_unknown_eid_is_not_acquired(store):
    known = await create(store)
    got = await store.acquire_many([("unknown", "RESUME:unknown:x"), start_of(known)], "w1", TTL, at(1))
    assert got[0] == NOT_ACQUIRED
    assert got[1].epoch == 1
    assert await store.read_execution("unknown") is None


async def test_nothing_wanted_answers_nothing(store):
    eid = await create(store)
    assert await store.acquire_many([], "w1", TTL, at(1)) == []
    record = await store.read_execution(eid)
    assert (record.status, record.lease_owner, record.lease_epoch) == (Status.PENDING, None, 0)


async def test_concurrent_acquire_many_over_overlapping_eids_acquire_each_execution_once(store):
    eids = [await create(store) for _ in range(12)]
    wants = {
        "w1": [start_of(e) for e in eids[:8]],
        "w2": [start_of(e) for e in reversed(eids[4:])],
        "w3": [start_of(e) for e in eids[::2]],
    }
    owners = list(wants)
    outcomes = await asyncio.gather(*(store.acquire_many(wants[o], o, TTL, at(1)) for o in owners))

    winners: dict[str, list[str]] = {eid: [] for eid in eids}
    for owner, got in zip(owners, outcomes):
        assert len(got) == len(wants[owner])
        for (eid, _), acquired in zip(wants[owner], got):
            if acquired.epoch is None:
                assert acquired == NOT_ACQUIRED
                continue
            assert acquired.epoch == 1
            assert (acquired.record.eid, acquired.record.lease_owner) == (eid, owner)
            assert [e.kind for e in acquired.journal] == [EntryKind.EXECUTION_STARTED]
            winners[eid].append(owner)
    assert all(len(w) == 1 for w in winners.values()), winners
    for eid, (owner,) in winners.items():
        record = await store.read_execution(eid)
        assert (record.lease_owner, record.lease_epoch) == (owner, 1)
        assert await store.read_tasks(eid=eid) == []


async def test_acquire_many_of_two_stores_on_one_database_acquire_each_execution_once(shared_url):
    """As two worker processes would: each store its own connections."""
    stores = [open_store(shared_url) for _ in range(2)]
    for s in stores:
        await s.open()
    try:
        eids = [await create(stores[0]) for _ in range(30)]
        for round_ in range(3):
            wants = [[start_of(e) for e in eids[: 20 + round_]], [start_of(e) for e in reversed(eids[10 - round_:])]]
            # the second round on: the leases of the round before expired, so each goes again
            now = at(1 + round_ * (TTL.total_seconds() + 1))
            outcomes = await asyncio.gather(*(s.acquire_many(w, f"p{i}", TTL, now)
                                              for i, (s, w) in enumerate(zip(stores, wants))))
            winners: dict[str, list[str]] = {eid: [] for eid in eids}
            for i, (want, got) in enumerate(zip(wants, outcomes)):
                for (eid, _), acquired in zip(want, got):
                    if acquired.epoch is not None:
                        assert acquired.epoch == round_ + 1
                        winners[eid].append(f"p{i}")
            assert all(len(w) == 1 for w in winners.values()), (round_, winners)
            for eid, (owner,) in winners.items():
                record = await stores[1].read_execution(eid)
                assert (record.lease_owner, record.lease_epoch) == (owner, round_ + 1)
    finally:
        for s in stores:
            await s.close()
