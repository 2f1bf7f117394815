"""The control log: announcements append with a global increasing seq; an announcement of a journal
entry is idempotent. A store that announces in its writes (SQLite) puts each lifecycle entry on the
control log in the write that appends it, in commit order; on the others (PostgreSQL) it waits
for the second append, and ``unannounced`` finds the lifecycle entries that were never announced."""

from __future__ import annotations

import dataclasses

import pytest

from flowli.domain import EntryKind, LeaseLost, Status
from flowli.store import Announcement, Fence, StatusChange, Write

from .conftest import BACKENDS, T0, at, create, entry, started

pytestmark = pytest.mark.integration


def announcement_of(e):
    """The control-log entry that announces journal entry ``e`` (as the engine builds it)."""
    return Announcement(dataclasses.replace(e, journal_seq=e.seq, seq=None))


async def announce(store, *entries, now=T0):
    await store.write(Write(announcements=[Announcement(e) for e in entries]), now)


async def announced(store, after=0):
    """The control log's ``announced`` entries (a store that announces in its writes has put the
    lifecycle entries of the executions a test made there too)."""
    return [e for e in await store.read_control_log(after=after) if e.kind is EntryKind.ANNOUNCED]


async def test_announcements_append_with_a_global_increasing_seq(store):
    a, b = await create(store), await create(store)
    await announce(store, entry(a, EntryKind.ANNOUNCED, value={"kind": "x", "data": 1}))
    await announce(store, entry(b, EntryKind.ANNOUNCED, value={"kind": "y"}), entry(a, EntryKind.ANNOUNCED, value=3))
    log = await announced(store)
    assert [(e.eid, e.value) for e in log] == [(a, {"kind": "x", "data": 1}), (b, {"kind": "y"}), (a, 3)]
    seqs = [e.seq for e in log]
    assert seqs == sorted(seqs) and len(set(seqs)) == 3 and all(s > 0 for s in seqs)
    every = [e.seq for e in await store.read_control_log()]
    assert every == sorted(every) and len(set(every)) == len(every)
    assert [e.seq for e in await announced(store, after=seqs[0])] == seqs[1:]
    assert [e.seq for e in await store.read_control_log(after=0, limit=2)] == every[:2]
    assert await store.read_control_log(after=every[-1]) == []


def test_the_backends_say_which_announce_in_their_writes():
    assert {b.name for b in BACKENDS if b.announces} == {"sqlite-file", "sqlite-memory"}


async def test_a_store_says_whether_it_announces_in_its_writes(store, backend):
    assert store.announces_in_write is backend.announces


async def test_a_control_log_entry_round_trips(store):
    eid = await create(store)
    e = entry(
        eid,
        EntryKind.ANNOUNCED,
        "root/announce#0",
        attempt=1,
        digest="d",
        value={"kind": "review.opened", "data": {"inbox": "ops"}},
        error={"type": "none"},
    )
    await announce(store, e)
    (got,) = await announced(store)
    assert got == dataclasses.replace(e, seq=got.seq)
    assert got.journal_seq is None


async def test_the_memo_of_an_announcement_is_its_control_log_seq(store):
    eid = await create(store)
    await announce(store, entry(eid, EntryKind.ANNOUNCED))
    result = await store.write(
        Write(
            entries=[
                entry(eid, EntryKind.FRAME_STARTED, "root/announce#0"),
                entry(eid, EntryKind.FRAME_COMPLETED, "root/announce#0"),
            ],
            announcements=[Announcement(entry(eid, EntryKind.ANNOUNCED, value={"kind": "k"}), memo=1)],
        ),
        at(1),
    )
    log = await announced(store)
    assert len(log) == 2
    assert result.entry_values == [None, log[1].seq]
    assert (await store.read_journal(eid, after=2))[0].value == log[1].seq


async def test_a_announcement_of_a_journal_entry_is_appended_once(store):
    eid = await create(store)
    (started_entry,) = await store.read_journal(eid)
    await store.write(Write(announcements=[announcement_of(started_entry)]), at(1))
    await store.write(Write(announcements=[announcement_of(started_entry)]), at(2))
    await store.write(Write(announcements=[announcement_of(started_entry), announcement_of(started_entry)]), at(3))
    log = await store.read_control_log()
    assert len(log) == 1
    assert (log[0].eid, log[0].kind, log[0].journal_seq) == (eid, EntryKind.EXECUTION_STARTED, 1)
    assert log[0].provenance == started_entry.provenance
    other = await create(store)  # the same journal seq of another execution is another entry
    (other_started,) = await store.read_journal(other)
    await store.write(Write(announcements=[announcement_of(other_started)]), at(4))
    assert [e.eid for e in await store.read_control_log()] == [eid, other]


async def test_unannounced_lists_the_lifecycle_entries_not_yet_announced(second_append_store):
    store = second_append_store
    eid, fence = await started(store)
    await store.write(Write(fence=fence, entries=[entry(eid), entry(eid, EntryKind.FRAME_COMPLETED, value=1)]), at(1))
    suspended = await store.write(
        Write(
            fence=fence,
            entries=[entry(eid, EntryKind.EXECUTION_SUSPENDED, "root", when=at(2))],
            release=True,
            status=StatusChange(eid, Status.SUSPENDED),
        ),
        at(2),
    )
    assert suspended.entry_seqs == [4]

    missing = await store.unannounced(at(10), 100)
    assert [(e.eid, e.seq, e.kind) for e in missing] == [
        (eid, 1, EntryKind.EXECUTION_STARTED),
        (eid, 4, EntryKind.EXECUTION_SUSPENDED),
    ]
    journal = await store.read_journal(eid)
    assert [dataclasses.replace(e, journal_seq=None) for e in missing] == [journal[0], journal[3]]

    await store.write(Write(announcements=[announcement_of(journal[0])]), at(11))
    assert [e.seq for e in await store.unannounced(at(12), 100)] == [4]
    await store.write(Write(announcements=[announcement_of(journal[3])]), at(12))
    assert await store.unannounced(at(13), 100) == []


async def test_unannounced_waits_until_the_execution_is_older_than_before(second_append_store):
    store = second_append_store
    eid = await create(store, now=at(5))
    assert await store.unannounced(at(4), 100) == []  # changed after `before`: a worker may still announce it
    assert [e.eid for e in await store.unannounced(at(6), 100)] == [eid]


async def test_unannounced_respects_the_limit(second_append_store):
    store = second_append_store
    for _ in range(3):
        await create(store)
    assert len(await store.unannounced(at(1), 2)) == 2
    assert len(await store.unannounced(at(1), 100)) == 3


async def test_unannounced_lists_an_entry_that_a_later_announcement_skipped(second_append_store):
    """A worker appends execution.suspended and crashes before it announces it; the next worker
    appends and announces execution.resumed. The suspension is still not on the control log."""
    store = second_append_store
    eid = await create(store)
    (first,) = await store.read_journal(eid)
    await store.write(Write(announcements=[announcement_of(first)]), at(1))
    await store.write(Write(entries=[entry(eid, EntryKind.EXECUTION_SUSPENDED, "root")]), at(2))  # never announced
    await store.write(Write(entries=[entry(eid, EntryKind.EXECUTION_RESUMED, "root")]), at(3))
    resumed = (await store.read_journal(eid, after=2))[0]
    await store.write(Write(announcements=[announcement_of(resumed)]), at(3))

    assert [e.journal_seq for e in await store.read_control_log()] == [1, 3]
    missing = await store.unannounced(at(10), 100)
    assert [(e.seq, e.kind) for e in missing] == [(2, EntryKind.EXECUTION_SUSPENDED)]


async def test_a_write_puts_its_lifecycle_entries_on_the_control_log_itself(in_write_store):
    """The complement of ``unannounced`` where a store announces in its writes: the lifecycle
    entries a write appends are on the control log once it commits, with their journal seqs,
    and nothing is left for a repair; announcing them again adds nothing."""
    store = in_write_store
    eid, fence = await started(store)
    await store.write(Write(fence=fence, entries=[entry(eid), entry(eid, EntryKind.FRAME_COMPLETED, value=1)]), at(1))
    suspended = await store.write(
        Write(fence=fence, entries=[entry(eid, EntryKind.EXECUTION_SUSPENDED, "root", when=at(2))], release=True,
              status=StatusChange(eid, Status.SUSPENDED)),
        at(2),
    )
    assert suspended.entry_seqs == [4]
    journal = await store.read_journal(eid)
    log = await store.read_control_log()
    assert [(e.eid, e.kind, e.journal_seq) for e in log] == [
        (eid, EntryKind.EXECUTION_STARTED, 1), (eid, EntryKind.EXECUTION_SUSPENDED, 4)]
    assert [dataclasses.replace(e, seq=j.seq, journal_seq=None) for e, j in zip(log, (journal[0], journal[3]))] \
        == [journal[0], journal[3]]
    assert await store.unannounced(at(10), 100) == []
    await store.write(Write(announcements=[announcement_of(journal[0]), announcement_of(journal[3])]), at(11))
    assert await store.read_control_log() == log


async def test_the_control_log_follows_the_order_the_writes_commit_in(in_write_store):
    store = in_write_store
    a = await create(store)
    b = await create(store)
    await announce(store, entry(b, EntryKind.ANNOUNCED, value="between"))
    await store.write(Write(entries=[entry(a, EntryKind.EXECUTION_SUSPENDED, "root"),
                                     entry(a, EntryKind.EXECUTION_RESUMED, "root")]), at(1))
    log = await store.read_control_log()
    assert [(e.eid, e.kind, e.journal_seq) for e in log] == [
        (a, EntryKind.EXECUTION_STARTED, 1), (b, EntryKind.EXECUTION_STARTED, 1), (b, EntryKind.ANNOUNCED, None),
        (a, EntryKind.EXECUTION_SUSPENDED, 2), (a, EntryKind.EXECUTION_RESUMED, 3)]
    seqs = [e.seq for e in log]
    assert seqs == list(range(seqs[0], seqs[0] + 5))  # one after another: no gap, no repeat


async def test_a_refused_write_puts_nothing_on_the_control_log(in_write_store):
    store = in_write_store
    eid, fence = await started(store)
    before = await store.read_control_log()
    with pytest.raises(LeaseLost):
        await store.write(Write(fence=Fence(eid, fence.owner, fence.epoch + 1),
                                entries=[entry(eid, EntryKind.EXECUTION_SUSPENDED, "root")]), at(1))
    assert await store.read_control_log() == before
    await store.write(Write(fence=fence, entries=[entry(eid, EntryKind.EXECUTION_SUSPENDED, "root")]), at(2))
    log = await store.read_control_log()
    assert [e.kind for e in log] == [EntryKind.EXECUTION_STARTED, EntryKind.EXECUTION_SUSPENDED]
    assert log[1].seq == log[0].seq + 1  # the refused write's move of the counter went with it
