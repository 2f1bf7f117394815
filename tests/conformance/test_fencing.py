"""Fencing: a write whose fence does not hold raises LeaseLost and applies nothing of itself,
also when it shares a group commit with writes that do hold."""

from __future__ import annotations

import asyncio

import pytest

from flowli.domain import EntryKind, LeaseLost, Status, TaskKind, Timer, task_id
from flowli.store import (
    Announcement,
    Fence,
    NewMessage,
    StatusChange,
    WakeCheck,
    WakeWaiters,
    Withdrawal,
    Write,
)

from .conftest import TTL, at, create, entry, new_execution, prov, snapshot, started, task

pytestmark = pytest.mark.integration


def everything(eid: str, fence: Fence, *, ack: str, withdraw: str, timer: Timer) -> Write:
    """A write that touches every part of the store."""
    return Write(
        fence=fence,
        entries=[entry(eid, EntryKind.FRAME_COMPLETED, value=None), entry(eid, EntryKind.EXECUTION_SUSPENDED, "root")],
        status=StatusChange(eid, Status.SUSPENDED),
        release=True,
        cancel_request=(eid, {"by": "x"}),
        executions=[new_execution("child-of-" + eid)],
        messages=[NewMessage("ch", "m", prov(), memo=0)],
        tasks=[task("new-task", eid=eid)],
        acks=[(ack, None)],
        withdrawals=[Withdrawal(withdraw)],
        timers=[Timer(eid, "root/sleep#1", at(500))],
        clear_timers=[],
        fired=[timer],
        waiters=[("ch2", eid)],
        clear_waiters=[eid],
        wake=WakeCheck(task=task("wake-task", eid=eid), due_by=at(0)),
        wake_waiters=[WakeWaiters("ch", "k", prov())],
        announcements=[Announcement(entry(eid, EntryKind.ANNOUNCED, value={"kind": "x"}))],
    )


async def _prepared(store):
    """An execution stolen from w1 by w2, with a timer, a waiter and two ready tasks."""
    eid, old = await started(store, "w1")
    assert (await store.acquire(eid, "w2", TTL, at(100))).epoch == old.epoch + 1
    timer = Timer(eid, "root/sleep#0", at(200))
    ack, withdraw = task("to-ack", eid=eid), task("to-withdraw", eid=eid)
    await store.write(Write(timers=[timer], waiters=[("ch", eid)], tasks=[ack, withdraw]), at(100))
    return eid, old, timer, ack.id, withdraw.id


@pytest.mark.parametrize("which", ["old epoch", "wrong owner", "future epoch", "unknown eid"])
async def test_a_write_with_a_bad_fence_raises_lease_lost_and_applies_nothing(store, which):
    eid, old, timer, ack, withdraw = await _prepared(store)
    fence = {
        "old epoch": old,
        "wrong owner": Fence(eid, "w1", old.epoch + 1),
        "future epoch": Fence(eid, "w2", old.epoch + 2),
        "unknown eid": Fence("unknown", "w2", old.epoch + 1),
    }[which]
    eids, channels = [eid, "child-of-" + eid], ["ch", "ch2"]
    before = await snapshot(store, eids, channels)
    with pytest.raises(LeaseLost):
        await store.write(everything(eid, fence, ack=ack, withdraw=withdraw, timer=timer), at(101))
    assert await snapshot(store, eids, channels) == before


async def test_the_holder_of_the_lease_writes_under_its_fence(store):
    eid, old, timer, ack, withdraw = await _prepared(store)
    result = await store.write(Write(fence=Fence(eid, "w2", old.epoch + 1), entries=[entry(eid)]), at(101))
    assert result.entry_seqs == [2]


async def test_group_commit_keeps_each_write_isolated(store):
    fences = [(await started(store, "w1"))[1] for _ in range(50)]
    bad = {i for i in range(50) if i % 7 == 3}
    before = {i: await snapshot(store, [fences[i].eid], [f"own-{i}"]) for i in bad}

    def write(i: int) -> Write:
        f = fences[i]
        fence = Fence(f.eid, f.owner, f.epoch + 1) if i in bad else f
        return Write(
            fence=fence,
            entries=[entry(f.eid, EntryKind.FRAME_COMPLETED, value=i)],
            messages=[NewMessage("shared", i, prov()), NewMessage(f"own-{i}", i, prov())],
            tasks=[task(task_id(TaskKind.RESUME, f.eid, "g"), eid=f.eid)],
            timers=[Timer(f.eid, "root/sleep#0", at(300 + i))],
        )

    outcomes = await asyncio.gather(*(store.write(write(i), at(1)) for i in range(50)), return_exceptions=True)

    for i, outcome in enumerate(outcomes):
        eid = fences[i].eid
        if i in bad:
            assert isinstance(outcome, LeaseLost), (i, outcome)
            assert await snapshot(store, [eid], [f"own-{i}"]) == before[i]
        else:
            assert not isinstance(outcome, BaseException), (i, outcome)
            assert outcome.entry_seqs == [2]
            assert [e.value for e in await store.read_journal(eid, after=1)] == [i]
            assert [m.payload for m in await store.read_messages(f"own-{i}")] == [i]
            assert [t.id for t in await store.read_tasks(eid=eid)] == [task_id(TaskKind.RESUME, eid, "g")]
            assert await store.read_timers(eid) == [Timer(eid, "root/sleep#0", at(300 + i))]
    shared = await store.read_messages("shared", limit=100)
    assert sorted(m.payload for m in shared) == sorted(set(range(50)) - bad)
    assert [m.seq for m in shared] == list(range(1, 51 - len(bad)))


async def test_an_unfenced_write_ignores_leases(store):
    eid, _ = await started(store, "w1")
    result = await store.write(Write(entries=[entry(eid, EntryKind.FRAME_COMPLETED, value="run-step")]), at(1))
    assert result.entry_seqs == [2]
    eid2 = await create(store)
    assert (await store.write(Write(entries=[entry(eid2)]), at(1))).entry_seqs == [2]
