"""Fenced writes of one execution issued together (one ``asyncio.gather``, so that a backend may
apply them in one batch): a suspension on timers (entries, status, release, its timers cleared
and set, a wake check on a due instant or a cancel request), an end that clears its timers or
waiters. PostgreSQL applies each in one statement, or with the plain appends of the batch; each
must still come out as if it ran alone, and a stale fence must change nothing."""

from __future__ import annotations

import asyncio
from datetime import datetime

import pytest

from flowli.domain import EntryKind, LeaseLost, Status, TaskKind, Timer, task_id
from flowli.store import Fence, NewMessage, Resume, StatusChange, WakeCheck, Write

from .conftest import TTL, at, create, entry, new_execution, prov, snapshot, started, task

pytestmark = pytest.mark.integration

NOW = at(20)


def wake_task(eid: str, epoch: int):
    return task(task_id(TaskKind.RESUME, eid, f"wake:{epoch}"), eid=eid, visible_at=NOW)


def suspension(fence: Fence, timers: list[Timer], *, due_by: datetime | None, clear: bool = True) -> Write:
    """A suspension on timers as the engine writes it."""
    eid = fence.eid
    return Write(
        fence=fence,
        entries=[entry(eid, EntryKind.EXECUTION_SUSPENDED, "root", when=NOW)],
        status=StatusChange(eid, Status.SUSPENDED),
        release=True,
        clear_timers=[eid] if clear else [],
        timers=timers,
        wake=WakeCheck(task=wake_task(eid, fence.epoch), due_by=due_by, cancel=True),
    )


def end(fence: Fence, result: object, *, timers: bool = False, waiters: bool = False) -> Write:
    eid = fence.eid
    return Write(
        fence=fence,
        entries=[entry(eid, EntryKind.EXECUTION_COMPLETED, "root", when=NOW, value=result)],
        status=StatusChange(eid, Status.COMPLETED, result=result),
        release=True,
        clear_timers=[eid] if timers else [],
        clear_waiters=[eid] if waiters else [],
    )


def frame(eid: str, i: int, value: object = None):
    return entry(eid, EntryKind.FRAME_COMPLETED, f"root/s#{i}", value=value)


async def stolen(store) -> tuple[str, Fence, Fence]:
    """An execution whose first lease expired and was acquired again (by the same owner): its
    eid, the stale fence and the holder's fence."""
    eid, old = await started(store, "w1", ttl=TTL / 3)
    again = await store.acquire(eid, "w1", TTL, at(10))
    assert again.epoch == old.epoch + 1
    return eid, old, Fence(eid, "w1", again.epoch)


def by_eid(timers: list[Timer]) -> dict[str, list[Timer]]:
    out: dict[str, list[Timer]] = {}
    for t in timers:
        out.setdefault(t.eid, []).append(t)
    return {eid: sorted(ts, key=lambda t: t.fid) for eid, ts in out.items()}


async def resumes(store, eid: str) -> list[str]:
    return [t.id for t in await store.read_tasks(eid=eid) if t.kind is TaskKind.RESUME]


# ---- suspensions on timers ----------------------------------------------------------------------


async def test_gathered_suspensions_on_timers_each_apply_and_wake_when_due_or_cancelled(store):
    past = [(await started(store))[1] for _ in range(4)]
    future = [(await started(store))[1] for _ in range(4)]
    cancelled = [(await started(store))[1] for _ in range(3)]
    stale_eid, stale, _ = await stolen(store)
    fences = past + future + cancelled
    for f in cancelled:
        await store.write(Write(cancel_request=(f.eid, {"by": "alice@example.com"})), at(1))
    # each had a timer of an earlier suspension, which the suspension clears
    await store.write(Write(timers=[Timer(eid, "root/old#0", at(500)) for eid in [*(f.eid for f in fences), stale_eid]]),
                      at(1))
    before_stale = await snapshot(store, [stale_eid])

    writes: list[Write] = []
    expected_timers: dict[str, list[Timer]] = {}
    for i, f in enumerate(fences):
        if f in past:
            timers = [Timer(f.eid, "root/sleep#0", at(15)), Timer(f.eid, "root/sleep#1", at(60 + i))]
        else:
            timers = [Timer(f.eid, "root/sleep#0", at(40 + i))]
        expected_timers[f.eid] = timers
        writes.append(suspension(f, timers, due_by=min(t.at for t in timers)))
        if i == 5:  # the stale write in the middle of the batch
            writes.append(suspension(stale, [Timer(stale_eid, "root/sleep#0", at(1))], due_by=at(1)))
    outcomes = await asyncio.gather(*(store.write(w, NOW) for w in writes), return_exceptions=True)

    results = iter(outcomes)
    for i, f in enumerate(fences):
        outcome = next(results)
        if i == 5:
            refused = next(results)
            assert isinstance(refused, LeaseLost), refused
        assert not isinstance(outcome, BaseException), (i, outcome)
        assert outcome.entry_seqs == [2]
        should_wake = f not in future
        assert outcome.woke is should_wake, (i, outcome.woke)
        record = await store.read_execution(f.eid)
        assert (record.status, record.lease_owner, record.lease_expires_at, record.lease_epoch) == (
            Status.SUSPENDED, None, None, f.epoch)
        assert sorted(await store.read_timers(f.eid), key=lambda t: t.fid) == expected_timers[f.eid], i
        assert [(e.seq, e.kind) for e in await store.read_journal(f.eid)] == [
            (1, EntryKind.EXECUTION_STARTED), (2, EntryKind.EXECUTION_SUSPENDED)]
        assert await resumes(store, f.eid) == ([wake_task(f.eid, f.epoch).id] if should_wake else []), i
    # the stale suspension changed nothing: no timer, no entry, no status, no wake task
    assert await snapshot(store, [stale_eid]) == before_stale
    # the woken ones are dequeued, each once
    ready = await store.dequeue(["default"], [TaskKind.RESUME], "w2", 100, TTL, NOW)
    assert sorted(t.id for t in ready) == sorted(wake_task(f.eid, f.epoch).id for f in past + cancelled)
    # a released lease: the next write under it is refused
    for f in fences:
        with pytest.raises(LeaseLost):
            await store.write(Write(fence=f, entries=[frame(f.eid, 0)]), at(21))


async def test_a_wake_task_that_exists_already_is_not_enqueued_again(store):
    eids_fences = [await started(store) for _ in range(3)]
    for eid, f in eids_fences:
        existing = task(wake_task(eid, f.epoch).id, eid=eid, payload="first")
        await store.write(Write(tasks=[existing]), at(1))
    writes = [suspension(f, [Timer(eid, "root/sleep#0", at(5))], due_by=at(5)) for eid, f in eids_fences]
    outcomes = await asyncio.gather(*(store.write(w, NOW) for w in writes), return_exceptions=True)
    for (eid, f), outcome in zip(eids_fences, outcomes):
        assert not isinstance(outcome, BaseException), outcome
        assert outcome.woke
        ready = [t for t in await store.read_tasks(eid=eid) if t.kind is TaskKind.RESUME]
        assert [(t.id, t.payload) for t in ready] == [(wake_task(eid, f.epoch).id, "first")]


async def test_a_stale_suspension_gathered_with_the_holders_writes_of_the_same_execution(store):
    """The holder appends, then suspends on its own timer; a stalled activation with the previous
    epoch suspends on other timers before, between and after: only the holder's writes land."""
    eid, old, new = await stolen(store)
    await store.write(Write(timers=[Timer(eid, "root/old#0", at(500))]), at(11))

    def stale_write(fid: str) -> Write:
        return suspension(old, [Timer(eid, fid, at(1))], due_by=at(1))

    holder_timer = Timer(eid, "root/sleep#0", at(90))
    writes = [
        stale_write("root/stale#0"),
        Write(fence=new, entries=[frame(eid, 0, "holder")]),
        stale_write("root/stale#1"),
        suspension(new, [holder_timer], due_by=holder_timer.at),
        stale_write("root/stale#2"),
    ]
    outcomes = await asyncio.gather(*(store.write(w, NOW) for w in writes), return_exceptions=True)

    for i in (0, 2, 4):
        assert isinstance(outcomes[i], LeaseLost), (i, outcomes[i])
    assert not isinstance(outcomes[1], BaseException), outcomes[1]
    assert not isinstance(outcomes[3], BaseException), outcomes[3]
    assert (outcomes[1].entry_seqs, outcomes[3].entry_seqs, outcomes[3].woke) == ([2], [3], False)
    assert await store.read_timers(eid) == [holder_timer]
    assert [(e.kind, e.value) for e in await store.read_journal(eid, after=1)] == [
        (EntryKind.FRAME_COMPLETED, "holder"), (EntryKind.EXECUTION_SUSPENDED, None)]
    assert await resumes(store, eid) == []  # a stale wake check enqueues nothing
    record = await store.read_execution(eid)
    assert (record.status, record.lease_owner, record.lease_epoch) == (Status.SUSPENDED, None, new.epoch)


# ---- ends that clear timers and waiters ----------------------------------------------------------


async def test_gathered_ends_clear_the_timers_and_waiters_of_their_executions_only(store):
    ending = [(await started(store))[1] for _ in range(6)]
    running = [(await started(store))[1] for _ in range(3)]
    idle = [await create(store) for _ in range(2)]  # pending, no lease at all
    everyone = [f.eid for f in ending + running] + idle
    await store.write(Write(timers=[Timer(eid, f"root/sleep#{k}", at(100 + k)) for eid in everyone for k in range(2)],
                            waiters=[(ch, eid) for eid in everyone for ch in ("news", f"{eid}.inbox")]), at(1))

    writes: list[Write] = []
    for i, f in enumerate(ending):
        writes.append(Write(fence=f, entries=[entry(f.eid, fid="root/s#0"), frame(f.eid, 0, i)]))
        writes.append(end(f, {"n": i}, timers=i % 3 != 1, waiters=i % 3 != 2))
        if i < len(running):
            g = running[i]
            writes.append(Write(fence=g, entries=[frame(g.eid, 0, "still running")]))
    outcomes = await asyncio.gather(*(store.write(w, NOW) for w in writes), return_exceptions=True)
    assert not any(isinstance(o, BaseException) for o in outcomes), outcomes

    timers = by_eid(await store.read_timers())
    for i, f in enumerate(ending):
        record = await store.read_execution(f.eid)
        assert (record.status, record.result, record.lease_owner) == (Status.COMPLETED, {"n": i}, None)
        assert [e.seq for e in await store.read_journal(f.eid)] == [1, 2, 3, 4]
        assert (f.eid in timers) is (i % 3 == 1), (i, timers.get(f.eid))
        waiting = f.eid in await store.waiters("news")
        assert waiting is (i % 3 == 2), i
        assert (await store.waiters(f"{f.eid}.inbox") == [f.eid]) is waiting
    for eid in [f.eid for f in running] + idle:
        assert [t.fid for t in timers[eid]] == ["root/sleep#0", "root/sleep#1"]
        assert eid in await store.waiters("news")
        assert await store.waiters(f"{eid}.inbox") == [eid]
    for f in running:
        record = await store.read_execution(f.eid)
        assert (record.status, record.lease_owner) == (Status.RUNNING, "w1")


@pytest.mark.parametrize("what", ["timers", "waiters"])
async def test_a_stale_end_gathered_with_the_holders_append_clears_nothing(store, what):
    """A stalled activation ends under the previous epoch while the holder appends: the stale end
    must not clear the timers or waiters the execution has (the holder's wait would be lost)."""
    eid, old, new = await stolen(store)
    other, other_fence = await started(store)
    await store.write(Write(timers=[Timer(eid, "root/sleep#0", at(100)), Timer(other, "root/sleep#0", at(100))],
                            waiters=[("news", eid), ("news", other)]), at(11))
    stale_end = end(old, "stale", timers=what == "timers", waiters=what == "waiters")
    writes = [
        Write(fence=new, entries=[frame(eid, 0, "holder")]),
        stale_end,
        Write(fence=other_fence, entries=[frame(other, 0, "other")]),
        Write(fence=new, entries=[frame(eid, 1, "holder-again")]),
    ]
    outcomes = await asyncio.gather(*(store.write(w, NOW) for w in writes), return_exceptions=True)

    assert isinstance(outcomes[1], LeaseLost), outcomes[1]
    for i in (0, 2, 3):
        assert not isinstance(outcomes[i], BaseException), (i, outcomes[i])
    assert [e.value for e in await store.read_journal(eid, after=1)] == ["holder", "holder-again"]
    record = await store.read_execution(eid)
    assert (record.status, record.result, record.lease_owner, record.lease_epoch) == (
        Status.RUNNING, None, "w1", new.epoch)
    assert await store.read_timers(eid) == [Timer(eid, "root/sleep#0", at(100))], "the stale end cleared the timers"
    assert sorted(await store.waiters("news")) == sorted([eid, other]), "the stale end cleared the waiters"


async def test_a_stale_end_alone_clears_nothing(store):
    eid, old, new = await stolen(store)
    await store.write(Write(timers=[Timer(eid, "root/sleep#0", at(100))], waiters=[("news", eid)]), at(11))
    before = await snapshot(store, [eid], ["news"])
    with pytest.raises(LeaseLost):
        await store.write(end(old, "stale", timers=True, waiters=True), NOW)
    assert await snapshot(store, [eid], ["news"]) == before


# ---- timers set and cleared in one write ------------------------------------------------------


@pytest.mark.parametrize("entries", [True, False], ids=["with-entries", "timers-only"])
@pytest.mark.parametrize("gathered", [False, True], ids=["alone", "gathered"])
async def test_clear_and_set_timers_in_one_fenced_write_keeps_exactly_the_new_ones(store, entries, gathered):
    """The execution had timers A and C; a write clears its timers and sets A (at a new instant)
    and B: afterwards exactly A (new instant) and B."""
    eids_fences = [await started(store) for _ in range(3 if gathered else 1)]
    for eid, _ in eids_fences:
        await store.write(Write(timers=[Timer(eid, "A", at(50)), Timer(eid, "C", at(60))]), at(1))

    def write(eid: str, f: Fence) -> Write:
        timers = [Timer(eid, "A", at(70)), Timer(eid, "B", at(80))]
        if entries:
            return suspension(f, timers, due_by=at(70))
        return Write(fence=f, clear_timers=[eid], timers=timers)

    outcomes = await asyncio.gather(*(store.write(write(eid, f), NOW) for eid, f in eids_fences),
                                    return_exceptions=True)
    for (eid, _), outcome in zip(eids_fences, outcomes):
        assert not isinstance(outcome, BaseException), outcome
        assert outcome.entry_seqs == ([2] if entries else [])
        assert sorted(await store.read_timers(eid), key=lambda t: t.fid) == [
            Timer(eid, "A", at(70)), Timer(eid, "B", at(80))]


async def test_setting_timers_without_clear_keeps_the_others(store):
    eids_fences = [await started(store) for _ in range(3)]
    for eid, _ in eids_fences:
        await store.write(Write(timers=[Timer(eid, "A", at(50)), Timer(eid, "C", at(60))]), at(1))
    writes = [suspension(f, [Timer(eid, "A", at(70)), Timer(eid, "B", at(80))], due_by=at(70), clear=False)
              for eid, f in eids_fences]
    outcomes = await asyncio.gather(*(store.write(w, NOW) for w in writes), return_exceptions=True)
    for (eid, _), outcome in zip(eids_fences, outcomes):
        assert not isinstance(outcome, BaseException), outcome
        assert sorted(await store.read_timers(eid), key=lambda t: t.fid) == [
            Timer(eid, "A", at(70)), Timer(eid, "B", at(80)), Timer(eid, "C", at(60))]


# ---- one-statement writes inside a batch ------------------------------------------------------


async def test_fenced_writes_gathered_with_starts_fired_timers_and_signals(store):
    """Every kind of write that has a one-statement form, in one gather with plain appends: each
    applies as if alone."""
    suspending = [(await started(store))[1] for _ in range(3)]
    ending = [(await started(store))[1] for _ in range(3)]
    fired_eid = await create(store)
    signalled = await create(store)
    due = Timer(fired_eid, "root/sleep#0", at(5))
    await store.write(Write(timers=[due] + [Timer(f.eid, "root/old#0", at(300)) for f in ending]), at(1))
    news = [new_execution(now=NOW) for _ in range(3)]

    writes: list[Write] = []
    for i in range(3):
        s, e = suspending[i], ending[i]
        writes.append(Write(fence=e, entries=[frame(e.eid, 0, i)]))
        writes.append(suspension(s, [Timer(s.eid, "root/sleep#0", at(40))], due_by=at(40)))
        writes.append(Write(executions=[news[i]]))
        writes.append(end(e, i, timers=True))
    writes.append(Write(fired=[due], resumes=[Resume(task_id(TaskKind.RESUME, fired_eid, "timer"), fired_eid, None,
                                                     prov(), NOW)]))
    writes.append(Write(expect=(signalled, frozenset({Status.PENDING, Status.RUNNING, Status.SUSPENDED})),
                        messages=[NewMessage(f"{signalled}.go", {"x": 1}, prov())],
                        resumes=[Resume(task_id(TaskKind.RESUME, signalled, "sig"), signalled, None, prov(), NOW)]))
    outcomes = await asyncio.gather(*(store.write(w, NOW) for w in writes), return_exceptions=True)
    assert not any(isinstance(o, BaseException) for o in outcomes), outcomes

    for i in range(3):
        s, e = suspending[i], ending[i]
        record = await store.read_execution(s.eid)
        assert (record.status, record.lease_owner) == (Status.SUSPENDED, None)
        assert await store.read_timers(s.eid) == [Timer(s.eid, "root/sleep#0", at(40))]
        assert await resumes(store, s.eid) == []
        record = await store.read_execution(e.eid)
        assert (record.status, record.result) == (Status.COMPLETED, i)
        assert [x.value for x in await store.read_journal(e.eid, after=1)] == [i, i]
        assert await store.read_timers(e.eid) == []
        assert (await store.read_execution(news[i].record.eid)) == news[i].record
    assert await store.read_timers(fired_eid) == []
    assert await resumes(store, fired_eid) == [task_id(TaskKind.RESUME, fired_eid, "timer")]
    assert [m.payload for m in await store.read_messages(f"{signalled}.go")] == [{"x": 1}]
    assert await resumes(store, signalled) == [task_id(TaskKind.RESUME, signalled, "sig")]
