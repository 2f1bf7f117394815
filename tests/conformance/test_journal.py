"""The journal: appends get seqs that increase by one per execution, pages by ``after``, and
every field of an entry round-trips."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from flowli.domain import Actor, Code, Entry, EntryKind, Provenance, Site, UnknownExecutionError
from flowli.store import JournalFilter, Write

from .conftest import T0, at, create, entry, snapshot

pytestmark = pytest.mark.integration


async def test_seqs_increase_by_one_per_execution(store):
    a, b = await create(store), await create(store)
    r1 = await store.write(Write(entries=[entry(a), entry(a, EntryKind.FRAME_COMPLETED, value=1)]), at(1))
    r2 = await store.write(Write(entries=[entry(b), entry(a, fid="root/fetch#1")]), at(2))
    r3 = await store.write(Write(entries=[entry(b, EntryKind.FRAME_COMPLETED, value=2)]), at(3))
    assert r1.entry_seqs == [2, 3]
    assert r2.entry_seqs == [2, 4]
    assert r3.entry_seqs == [3]
    assert [e.seq for e in await store.read_journal(a)] == [1, 2, 3, 4]
    assert [e.seq for e in await store.read_journal(b)] == [1, 2, 3]


async def test_read_journal_pages_after_a_seq(store):
    eid = await create(store)
    for i in range(5):
        await store.write(Write(entries=[entry(eid, EntryKind.FRAME_COMPLETED, f"root/s#{i}", value=i)]), at(i))
    assert [e.seq for e in await store.read_journal(eid, after=0)] == [1, 2, 3, 4, 5, 6]
    assert [e.seq for e in await store.read_journal(eid, after=3)] == [4, 5, 6]
    assert [e.value for e in await store.read_journal(eid, after=4)] == [3, 4]
    assert await store.read_journal(eid, after=6) == []


async def test_a_journal_page_is_the_newest_entries_a_filter_matches_with_their_count(store):
    eid = await create(store)  # seq 1: execution.started
    for i in range(6):  # seqs 2..13: frame i started then completed, attempt 1 or 2
        attempt = 1 + i % 2
        await store.write(Write(entries=[entry(eid, EntryKind.FRAME_STARTED, f"root/s#{i}", attempt=attempt),
                                         entry(eid, EntryKind.FRAME_COMPLETED, f"root/s#{i}", attempt=attempt,
                                               value=i)]), at(i))
    other = await create(store)
    await store.write(Write(entries=[entry(other, EntryKind.FRAME_STARTED, "root/s#0", attempt=1)]), at(9))
    page, count = await store.read_journal_page(eid, JournalFilter(), None, 5)
    assert [e.seq for e in page] == [13, 12, 11, 10, 9] and count == 13
    page, count = await store.read_journal_page(eid, JournalFilter(), 9, 5)
    assert [e.seq for e in page] == [8, 7, 6, 5, 4] and count == 13
    page, count = await store.read_journal_page(eid, JournalFilter(kind="frame.completed"), None, 2)
    assert [e.value for e in page] == [5, 4] and count == 6
    page, count = await store.read_journal_page(eid, JournalFilter(fid="root/s#0"), None, 10)
    assert [(e.seq, e.kind) for e in page] == [(3, EntryKind.FRAME_COMPLETED), (2, EntryKind.FRAME_STARTED)]
    assert count == 2
    page, count = await store.read_journal_page(eid, JournalFilter(kind="frame.started", attempt=2), 8, 10)
    assert [(e.fid, e.attempt) for e in page] == [("root/s#1", 2)] and count == 3
    assert await store.read_journal_page(eid, JournalFilter(fid="root/none"), None, 10) == ([], 0)


async def test_every_field_of_an_entry_round_trips(store):
    eid = await create(store)
    when = datetime(2030, 1, 1, 12, 0, 1, 123456, tzinfo=UTC)
    provenance = Provenance(
        actor=Actor("human", "alice@example.com"),
        site=Site(host="h-1", pid=77, worker="w-9", instance="i-3", region="eu-west", epoch=4),
        code=Code(workflow="invoice", version="3", frame_kind="step", frame_name="charge", ref="app.pay:charge"),
        at=when,
        attempt=2,
        on_behalf_of="bob@example.com",
    )
    full = Entry(
        eid=eid,
        kind=EntryKind.FRAME_FAILED,
        provenance=provenance,
        fid="root/charge:order-7",
        attempt=2,
        digest="sha256:abc",
        value={"retry_at": "2030-01-01T12:00:03+00:00", "final": False},
        error={"type": "TimeoutError", "message": "slow \u00e9\u00e8 \U0001f600", "traceback": ["a", "b"]},
    )
    bare = Entry(eid=eid, kind=EntryKind.FRAME_STARTED, provenance=provenance)
    result = await store.write(Write(entries=[full, bare]), at(1))
    assert result.entry_values == [full.value, None]
    journal = await store.read_journal(eid, after=1)
    assert journal == [dataclasses.replace(full, seq=2), dataclasses.replace(bare, seq=3)]
    got = journal[0].provenance
    assert got.at == when and got.at.utcoffset() is not None
    assert (got.actor, got.site.epoch, got.on_behalf_of, got.attempt) == (provenance.actor, 4, "bob@example.com", 2)


@pytest.mark.parametrize("value", [0, -3, 1.5, "", "text", True, False, [], {}, [1, [2, {"a": None}]]])
async def test_json_values_round_trip(store, value):
    eid = await create(store)
    await store.write(Write(entries=[entry(eid, EntryKind.FRAME_COMPLETED, value=value)]), T0)
    (got,) = await store.read_journal(eid, after=1)
    assert got.value == value and type(got.value) is type(value)


async def test_an_append_to_an_unknown_execution_is_refused_and_applies_nothing(store):
    eid = await create(store)
    before = await snapshot(store, [eid, "unknown"])
    with pytest.raises(UnknownExecutionError):
        await store.write(Write(entries=[entry(eid), entry("unknown")]), at(1))
    assert await snapshot(store, [eid, "unknown"]) == before
