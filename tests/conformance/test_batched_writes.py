"""Writes issued together (one ``asyncio.gather``), which a backend may apply in one group commit
(PostgreSQL: one statement for a run of fenced appends, ends included, one for a run of
control-log appends, one for a plain start). Each write must still come out as if it ran alone,
in the order it was issued."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from flowli.domain import Entry, EntryKind, LeaseLost, Status, TaskKind, task_id
from flowli.store import Announcement, Fence, NewExecution, StatusChange, Write

from .conftest import T0, TTL, at, entry, made_known, new_execution, snapshot, started

pytestmark = pytest.mark.integration


def announcement_of(e: Entry) -> Announcement:
    """The control-log entry that announces journal entry ``e`` (as the engine builds it)."""
    return Announcement(dataclasses.replace(e, journal_seq=e.seq, seq=None))


def frame(eid: str, i: int, value: object = None) -> Entry:
    return entry(eid, EntryKind.FRAME_COMPLETED, f"root/s#{i}", value=value)


def end(fence: Fence, result: object, when=T0) -> Write:
    """The last write of an execution: execution.completed, the status with its result, the release."""
    return Write(
        fence=fence,
        entries=[entry(fence.eid, EntryKind.EXECUTION_COMPLETED, "root", when=when, value=result)],
        status=StatusChange(fence.eid, Status.COMPLETED, result=result),
        release=True,
    )


def stale(fence: Fence) -> Fence:
    return Fence(fence.eid, fence.owner, fence.epoch - 1)


async def lifecycle_unannounced(store, kind: EntryKind) -> list[tuple[str, int]]:
    return sorted((e.eid, e.seq) for e in await store.unannounced(at(1000), 1000) if e.kind is kind)


# ---- (1) plain appends -----------------------------------------------------------------------


async def test_gathered_appends_of_many_executions_fail_only_the_stale_one(store):
    fences = [(await started(store, "w1"))[1] for _ in range(20)]
    # a second lease of one execution: its first fence is stale now
    victim = fences[7].eid
    acquired = await store.acquire(victim, "w1", TTL, at(TTL.total_seconds() + 1))
    assert acquired.epoch == fences[7].epoch + 1
    before = await snapshot(store, [victim])

    def write(i: int, f: Fence) -> Write:
        return Write(fence=f, entries=[entry(f.eid, fid=f"root/s#{i}"), frame(f.eid, i, value=i)])

    outcomes = await asyncio.gather(*(store.write(write(i, f), at(40)) for i, f in enumerate(fences)),
                                    return_exceptions=True)

    for i, (f, outcome) in enumerate(zip(fences, outcomes)):
        if f.eid == victim:
            assert isinstance(outcome, LeaseLost), outcome
            assert await snapshot(store, [victim]) == before
            continue
        assert not isinstance(outcome, BaseException), (i, outcome)
        assert outcome.entry_seqs == [2, 3]
        assert outcome.entry_values == [None, i]
        journal = await store.read_journal(f.eid)
        assert [e.seq for e in journal] == [1, 2, 3]
        assert [(e.kind, e.fid, e.value) for e in journal[1:]] == [
            (EntryKind.FRAME_STARTED, f"root/s#{i}", None), (EntryKind.FRAME_COMPLETED, f"root/s#{i}", i),
        ]
        record = await store.read_execution(f.eid)
        assert (record.status, record.lease_owner, record.lease_epoch) == (Status.RUNNING, "w1", f.epoch)


async def test_gathered_appends_of_one_execution_take_consecutive_seqs_in_order(store):
    eid, fence = await started(store)
    outcomes = await asyncio.gather(*(store.write(Write(fence=fence, entries=[frame(eid, i, i)]), at(1))
                                      for i in range(10)))
    assert [o.entry_seqs for o in outcomes] == [[i + 2] for i in range(10)]
    assert [e.value for e in await store.read_journal(eid, after=1)] == list(range(10))


async def test_a_stale_write_gathered_with_the_holders_writes_of_the_same_execution_applies_nothing(store):
    """The holder of the current lease and a worker with the previous epoch write to one execution
    at once (a stalled activation of this process, say): only the holder's entries land."""
    eid, old = await started(store, "w1")
    new = Fence(eid, "w1", (await store.acquire(eid, "w1", TTL, at(TTL.total_seconds() + 1))).epoch)
    assert new.epoch == old.epoch + 1

    writes = [
        Write(fence=old, entries=[frame(eid, 0, "stale-before")]),
        Write(fence=new, entries=[frame(eid, 1, "holder")]),
        Write(fence=old, entries=[frame(eid, 2, "stale-after")],
              status=StatusChange(eid, Status.FAILED, error={"type": "stale"}), release=True),
        Write(fence=new, entries=[frame(eid, 3, "holder-again")]),
    ]
    outcomes = await asyncio.gather(*(store.write(w, at(40)) for w in writes), return_exceptions=True)

    assert isinstance(outcomes[0], LeaseLost), outcomes[0]
    assert isinstance(outcomes[2], LeaseLost), outcomes[2]
    assert not isinstance(outcomes[1], BaseException), outcomes[1]
    assert not isinstance(outcomes[3], BaseException), outcomes[3]
    assert (outcomes[1].entry_seqs, outcomes[3].entry_seqs) == ([2], [3])
    assert [e.value for e in await store.read_journal(eid, after=1)] == ["holder", "holder-again"]
    record = await store.read_execution(eid)
    assert (record.status, record.error, record.lease_owner, record.lease_epoch) == (
        Status.RUNNING, None, "w1", new.epoch)
    # the journal goes on from where the holder left it
    assert (await store.write(Write(fence=new, entries=[frame(eid, 4)]), at(41))).entry_seqs == [4]


async def test_an_append_gathered_after_the_release_of_its_lease_is_refused(store):
    """Writes apply in the order they were issued: once a write released the lease, a later write
    under the same fence no longer holds it."""
    eid, fence = await started(store)
    release = Write(fence=fence, entries=[entry(eid, EntryKind.EXECUTION_SUSPENDED, "root")],
                    status=StatusChange(eid, Status.SUSPENDED), release=True)
    late = Write(fence=fence, entries=[frame(eid, 0, "late")])
    outcomes = await asyncio.gather(store.write(release, at(1)), store.write(late, at(1)), return_exceptions=True)

    assert not isinstance(outcomes[0], BaseException), outcomes[0]
    assert outcomes[0].entry_seqs == [2]
    assert isinstance(outcomes[1], LeaseLost), outcomes[1]
    assert [e.kind for e in await store.read_journal(eid)] == [EntryKind.EXECUTION_STARTED, EntryKind.EXECUTION_SUSPENDED]
    record = await store.read_execution(eid)
    assert (record.status, record.lease_owner) == (Status.SUSPENDED, None)


# ---- (2) appends with an end -------------------------------------------------------------------


async def test_gathered_frames_and_ends_of_many_executions(store):
    fences = [(await started(store, "w1"))[1] for _ in range(8)]
    writes = []
    for i, f in enumerate(fences):
        writes.append(Write(fence=f, entries=[entry(f.eid, fid="root/s#0"), frame(f.eid, 0, i)]))
        writes.append(end(f, {"n": i}, when=at(2)))
    outcomes = await asyncio.gather(*(store.write(w, at(2)) for w in writes), return_exceptions=True)
    assert not any(isinstance(o, BaseException) for o in outcomes), outcomes

    for i, f in enumerate(fences):
        assert outcomes[2 * i].entry_seqs == [2, 3]
        assert outcomes[2 * i + 1].entry_seqs == [4]
        record = await store.read_execution(f.eid)
        assert (record.status, record.result, record.error) == (Status.COMPLETED, {"n": i}, None)
        assert (record.lease_owner, record.lease_expires_at, record.lease_epoch) == (None, None, f.epoch)
        journal = await store.read_journal(f.eid)
        assert [(e.seq, e.kind) for e in journal] == [
            (1, EntryKind.EXECUTION_STARTED), (2, EntryKind.FRAME_STARTED), (3, EntryKind.FRAME_COMPLETED),
            (4, EntryKind.EXECUTION_COMPLETED),
        ]
        assert journal[3].value == {"n": i}

    if store.announces_in_write:
        # each end went to the control log in its own write; the frames never do
        log = await store.read_control_log(limit=1000)
        assert sorted((e.eid, e.journal_seq) for e in log if e.kind is EntryKind.EXECUTION_COMPLETED) == \
            sorted((f.eid, 4) for f in fences)
        assert not [e for e in log if e.kind.value.startswith("frame.")]
        assert await store.unannounced(at(1000), 1000) == []
    else:
        await ends_wait_for_their_announcement(store, fences)

    # an ended lease holds no more: a further append under it is refused
    for f in fences:
        with pytest.raises(LeaseLost):
            await store.write(Write(fence=f, entries=[frame(f.eid, 9)]), at(4))


async def ends_wait_for_their_announcement(store, fences: list[Fence]) -> None:
    """On a store with the second append: the ends wait for their announcement (``unannounced``),
    the frames never do; an announcement takes an end off the list."""
    ends = await lifecycle_unannounced(store, EntryKind.EXECUTION_COMPLETED)
    assert ends == sorted((f.eid, 4) for f in fences)
    assert not [e for e in await store.unannounced(at(1000), 1000) if e.kind.value.startswith("frame.")]
    (missing,) = [e for e in await store.unannounced(at(1000), 1000)
                  if e.eid == fences[0].eid and e.kind is EntryKind.EXECUTION_COMPLETED]
    assert dataclasses.replace(missing, journal_seq=None) == (await store.read_journal(fences[0].eid))[3]
    # an unannounced entry waits until `before` passes the instant of its write
    assert [e for e in await store.unannounced(at(1), 1000) if e.kind is EntryKind.EXECUTION_COMPLETED] == []

    for f in fences[:3]:
        (done,) = await store.read_journal(f.eid, after=3)
        await store.write(Write(announcements=[announcement_of(done)]), at(3))
    assert await lifecycle_unannounced(store, EntryKind.EXECUTION_COMPLETED) == sorted((f.eid, 4) for f in fences[3:])


async def test_two_gathered_status_changes_of_one_execution_both_apply_and_the_last_wins(store):
    eid, fence = await started(store)
    first = Write(fence=fence, entries=[entry(eid, EntryKind.EXECUTION_SUSPENDED, "root")],
                  status=StatusChange(eid, Status.SUSPENDED, blocked={"why": "first"}, version="2"))
    second = Write(fence=fence, entries=[frame(eid, 0, "after")])
    last = end(fence, "done")
    outcomes = await asyncio.gather(*(store.write(w, at(1)) for w in (first, second, last)), return_exceptions=True)

    assert not any(isinstance(o, BaseException) for o in outcomes), outcomes
    assert [o.entry_seqs for o in outcomes] == [[2], [3], [4]]
    record = await store.read_execution(eid)
    assert (record.status, record.result, record.blocked, record.version) == (Status.COMPLETED, "done", None, "2")
    assert record.lease_owner is None
    assert [e.kind for e in await store.read_journal(eid)] == [
        EntryKind.EXECUTION_STARTED, EntryKind.EXECUTION_SUSPENDED, EntryKind.FRAME_COMPLETED,
        EntryKind.EXECUTION_COMPLETED,
    ]
    if store.announces_in_write:  # each write put its lifecycle entry on the control log
        assert [(e.kind, e.journal_seq) for e in await store.read_control_log() if e.eid == eid] == [
            (EntryKind.EXECUTION_STARTED, 1), (EntryKind.EXECUTION_SUSPENDED, 2), (EntryKind.EXECUTION_COMPLETED, 4)]
    else:
        assert await lifecycle_unannounced(store, EntryKind.EXECUTION_SUSPENDED) == [(eid, 2)]
        assert await lifecycle_unannounced(store, EntryKind.EXECUTION_COMPLETED) == [(eid, 4)]


async def test_gathered_status_changes_of_one_execution_in_the_order_issued(store):
    """Three status changes, none releasing: each applies in turn; the record ends at the last."""
    eid, fence = await started(store)
    changes = [
        (EntryKind.EXECUTION_SUSPENDED, StatusChange(eid, Status.SUSPENDED, blocked={"n": 1})),
        (EntryKind.EXECUTION_RESUMED, StatusChange(eid, Status.RUNNING)),
        (EntryKind.EXECUTION_SUSPENDED, StatusChange(eid, Status.SUSPENDED, blocked={"n": 3})),
    ]
    writes = [Write(fence=fence, entries=[entry(eid, kind, "root")], status=st) for kind, st in changes]
    outcomes = await asyncio.gather(*(store.write(w, at(1)) for w in writes), return_exceptions=True)
    assert not any(isinstance(o, BaseException) for o in outcomes), outcomes
    assert [o.entry_seqs for o in outcomes] == [[2], [3], [4]]
    record = await store.read_execution(eid)
    assert (record.status, record.blocked, record.lease_owner) == (Status.SUSPENDED, {"n": 3}, "w1")


# ---- (3) control-log appends -------------------------------------------------------------------


async def ended(store, n: int) -> tuple[list[Fence], dict[str, list[Entry]], list[Entry]]:
    """``n`` executions run to their end: their fences, journals, and lifecycle entries (each
    execution's execution.started and execution.completed, in journal order)."""
    fences = [(await started(store, "w1"))[1] for _ in range(n)]
    for i, f in enumerate(fences):
        await store.write(end(f, i), at(1))
    journals = {f.eid: await store.read_journal(f.eid) for f in fences}
    lifecycle = [e for f in fences for e in journals[f.eid] if e.kind.lifecycle]
    assert len(lifecycle) == 2 * n
    return fences, journals, lifecycle


async def test_gathered_announcements_append_each_entry_once_in_increasing_seqs(store):
    fences, journals, lifecycle = await ended(store, 12)

    # one announcement per write, and writes announcing both entries of an execution
    writes = [Write(announcements=[announcement_of(e)]) for e in lifecycle[:12]]
    writes += [Write(announcements=[announcement_of(a), announcement_of(b)]) for a, b in zip(lifecycle[12::2], lifecycle[13::2])]
    outcomes = await asyncio.gather(*(store.write(w, at(2)) for w in writes), return_exceptions=True)
    assert not any(isinstance(o, BaseException) for o in outcomes), outcomes

    log = await store.read_control_log(limit=1000)
    assert sorted((e.eid, e.journal_seq) for e in log) == sorted((e.eid, e.seq) for e in lifecycle)
    seqs = [e.seq for e in log]
    assert all(a < b for a, b in zip(seqs, seqs[1:])), seqs
    assert all(s > 0 for s in seqs)
    for got in log:
        (source,) = [e for e in journals[got.eid] if e.seq == got.journal_seq]
        assert dataclasses.replace(got, seq=None, journal_seq=None) == dataclasses.replace(source, seq=None)
    # the announcements of one execution keep the order of its journal
    for f in fences:
        assert [e.journal_seq for e in log if e.eid == f.eid] == [1, 2]
    assert await store.unannounced(at(1000), 1000) == []

    again = await asyncio.gather(*(store.write(w, at(3)) for w in writes), return_exceptions=True)
    assert not any(isinstance(o, BaseException) for o in again), again
    assert await store.read_control_log(limit=1000) == log

    # the control log goes on after them
    await store.write(Write(announcements=[Announcement(entry(fences[0].eid, EntryKind.ANNOUNCED, value=1))]), at(4))
    after = await store.read_control_log(after=seqs[-1])
    assert len(after) == 1 and after[0].seq > seqs[-1]


async def test_an_announcement_repeated_in_one_gather_takes_the_place_of_its_first_write(store):
    """The second announcement of an entry adds nothing, also when issued together with the first: the
    entry is on the control log where the first put it, before the later entries of its execution.
    (The sweeper's repair and a worker's own announcement can send the same entry at once.)"""
    fences, journals, lifecycle = await ended(store, 12)
    writes = [Write(announcements=[announcement_of(e)]) for e in lifecycle]
    # execution.started of each, again, behind every execution.completed
    writes += [Write(announcements=[announcement_of(e)]) for e in lifecycle if e.kind is EntryKind.EXECUTION_STARTED]
    outcomes = await asyncio.gather(*(store.write(w, at(2)) for w in writes), return_exceptions=True)
    assert not any(isinstance(o, BaseException) for o in outcomes), outcomes

    log = await store.read_control_log(limit=1000)
    assert sorted((e.eid, e.journal_seq) for e in log) == sorted((e.eid, e.seq) for e in lifecycle)
    for f in fences:
        got = [(e.seq, e.journal_seq) for e in log if e.eid == f.eid]
        assert [js for _, js in got] == [1, 2], f"{f.eid}: control log (seq, journal_seq) {got}"
    assert await store.unannounced(at(1000), 1000) == []


async def test_an_announcement_gathered_with_the_write_that_appends_its_entry(store):
    """The engine announces an entry once its write returned; issued together with that write, the
    announcement still comes after the append."""
    eid, fence = await started(store)
    (first,) = await store.read_journal(eid)
    ending = end(fence, "r")
    completed = dataclasses.replace(ending.entries[0], seq=2)  # the seq it will get
    outcomes = await asyncio.gather(
        store.write(ending, at(1)),
        store.write(Write(announcements=[announcement_of(first)]), at(1)),
        store.write(Write(announcements=[announcement_of(completed)]), at(1)),
        return_exceptions=True,
    )
    assert not any(isinstance(o, BaseException) for o in outcomes), outcomes
    log = await store.read_control_log()
    assert [(e.journal_seq, e.kind) for e in log] == [(1, EntryKind.EXECUTION_STARTED), (2, EntryKind.EXECUTION_COMPLETED)]
    assert await store.unannounced(at(1000), 1000) == []


# ---- (4) starts ----------------------------------------------------------------------------------


def leased(new: NewExecution, owner: str = "w1") -> NewExecution:
    """A direct start: the record is created with its first lease, and there is no START task."""
    record = dataclasses.replace(new.record, status=Status.RUNNING, lease_owner=owner, lease_epoch=1,
                                 lease_expires_at=new.record.created_at + TTL)
    return NewExecution(record=record, entry=new.entry, task=None)


async def test_a_start_created_leased_has_no_task(store):
    new = leased(new_execution())
    eid = new.record.eid
    result = await store.write(Write(executions=[new]), T0)
    assert result.created == [True]

    assert await store.read_execution(eid) == new.record
    assert await store.read_journal(eid) == [dataclasses.replace(new.entry, seq=1)]
    assert await store.read_tasks(eid=eid, include_acked=True) == []
    assert await store.dequeue(["default"], list(TaskKind), "w2", 10, TTL, at(100)) == []
    assert [(e.eid, e.seq) for e in await made_known(store, at(1), 10)] == [(eid, 1)]

    # the holder writes under epoch 1 at once; no one else acquires it before the lease expires
    fence = Fence(eid, "w1", 1)
    assert (await store.write(Write(fence=fence, entries=[frame(eid, 0)]), at(1))).entry_seqs == [2]
    assert (await store.acquire(eid, "w2", TTL, at(1))).epoch is None
    # and once it expired, another worker takes it over at epoch 2
    taken = await store.acquire(eid, "w2", TTL, at(TTL.total_seconds() + 1))
    assert taken.epoch == 2 and [e.seq for e in taken.journal] == [1, 2]
    with pytest.raises(LeaseLost):
        await store.write(Write(fence=fence, entries=[frame(eid, 1)]), at(31))


async def test_a_start_with_a_task_enqueues_it(store):
    new = new_execution()
    eid = new.record.eid
    assert (await store.write(Write(executions=[new]), T0)).created == [True]
    assert await store.read_execution(eid) == new.record
    assert await store.read_journal(eid) == [dataclasses.replace(new.entry, seq=1)]
    assert [t.id for t in await store.read_tasks(eid=eid)] == [task_id(TaskKind.START, eid)]
    (got,) = await store.dequeue(["default"], [TaskKind.START], "w2", 10, TTL, T0)
    assert (got.id, got.eid) == (task_id(TaskKind.START, eid), eid)


async def test_a_start_of_an_existing_eid_changes_nothing(store):
    queued, direct = new_execution(), leased(new_execution())
    for new in (queued, direct):
        assert (await store.write(Write(executions=[new]), T0)).created == [True]
    eids = [queued.record.eid, direct.record.eid]
    before = await snapshot(store, eids)
    known = await made_known(store, at(1000), 100)

    # again, each in the other's form: leased over queued, queued over leased
    again = [
        leased(new_execution(queued.record.eid, now=at(5)), owner="w9"),
        new_execution(direct.record.eid, queue="other", now=at(5)),
    ]
    for new in again:
        assert (await store.write(Write(executions=[new]), at(5))).created == [False]
    assert await snapshot(store, eids) == before
    assert await made_known(store, at(1000), 100) == known


async def test_gathered_starts_each_apply(store):
    news = [leased(new_execution()) if i % 2 else new_execution() for i in range(10)]
    existing = news[3]
    assert (await store.write(Write(executions=[existing]), T0)).created == [True]
    outcomes = await asyncio.gather(*(store.write(Write(executions=[n]), T0) for n in news), return_exceptions=True)
    assert [o.created for o in outcomes] == [[i != 3] for i in range(10)]
    for i, new in enumerate(news):
        eid = new.record.eid
        assert await store.read_execution(eid) == new.record
        assert await store.read_journal(eid) == [dataclasses.replace(new.entry, seq=1)]
        expected = [] if new.task is None else [new.task.id]
        assert [t.id for t in await store.read_tasks(eid=eid, include_acked=True)] == expected, i
    assert sorted(e.eid for e in await made_known(store, at(1), 100)) == sorted(n.record.eid for n in news)



async def test_an_ended_execution_is_retained_only_once_its_lifecycle_is_on_the_control_log(store):
    """Retention deletes the unannounced marks with the live state: an execution whose second append
    is still pending is not offered for retention until it is done (where a store announces in
    its writes, an execution is offered as soon as it ends)."""
    eid, fence = await started(store)
    (first,) = await store.read_journal(eid)
    await store.write(end(fence, "r"), at(1))
    journal = await store.read_journal(eid)
    if store.announces_in_write:  # its end is on the control log with it: nothing pending
        assert await store.finished_before(at(100), 10) == [eid]
        return
    assert await store.finished_before(at(100), 10) == []  # execution.started and .completed pending
    await store.write(Write(announcements=[announcement_of(first)]), at(2))
    assert await store.finished_before(at(100), 10) == []  # .completed still pending
    await store.write(Write(announcements=[announcement_of(journal[-1])]), at(3))
    assert await store.finished_before(at(100), 10) == [eid]
