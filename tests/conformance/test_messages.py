"""Messages: per-channel sequence numbers from 1, read by ``after`` and ``limit``, and the memo
of a send (the seq fills the value of an entry of the same write)."""

from __future__ import annotations

import asyncio

import pytest

from flowli.domain import EntryKind
from flowli.store import NewMessage, Write

from .conftest import T0, at, create, entry, prov

pytestmark = pytest.mark.integration


async def send(store, channel, *payloads, now=T0):
    result = await store.write(Write(messages=[NewMessage(channel, p, prov(when=now)) for p in payloads]), now)
    return result.message_seqs


async def test_each_channel_numbers_its_messages_from_one(store):
    assert await send(store, "a", "a1", "a2") == [1, 2]
    assert await send(store, "b", "b1") == [1]
    assert await send(store, "a", "a3") == [3]
    both = await store.write(Write(messages=[NewMessage("a", 4, prov()), NewMessage("b", 2, prov())]), T0)
    assert both.message_seqs == [4, 2]
    assert [(m.channel, m.seq, m.payload) for m in await store.read_messages("a")] == [
        ("a", 1, "a1"),
        ("a", 2, "a2"),
        ("a", 3, "a3"),
        ("a", 4, 4),
    ]
    assert [(m.seq, m.payload) for m in await store.read_messages("b")] == [(1, "b1"), (2, 2)]


async def test_a_message_round_trips(store):
    p = prov("alice@example.com", kind="human", when=at(3), on_behalf_of="bob@example.com")
    payload = {"amount": 12.5, "lines": [1, 2], "note": None, "ok": True}
    await store.write(Write(messages=[NewMessage("pay", payload, p)]), at(3))
    (m,) = await store.read_messages("pay")
    assert (m.channel, m.seq, m.payload, m.provenance) == ("pay", 1, payload, p)


async def test_read_messages_after_a_seq_with_a_limit(store):
    await send(store, "ch", *range(10))
    assert [m.seq for m in await store.read_messages("ch", after=7)] == [8, 9, 10]
    assert [m.seq for m in await store.read_messages("ch", after=2, limit=3)] == [3, 4, 5]
    assert await store.read_messages("ch", after=10) == []
    assert await store.read_messages("other") == []


async def test_concurrent_sends_get_distinct_consecutive_seqs(store):
    seqs = await asyncio.gather(*(send(store, "busy", i) for i in range(40)))
    assert sorted(s for (s,) in seqs) == list(range(1, 41))
    assert [m.seq for m in await store.read_messages("busy", limit=100)] == list(range(1, 41))


async def test_the_memo_of_a_send_is_its_seq(store):
    eid = await create(store)
    await send(store, "ch", "earlier")
    result = await store.write(
        Write(
            entries=[
                entry(eid, EntryKind.FRAME_STARTED, "root/send#0"),
                entry(eid, EntryKind.FRAME_COMPLETED, "root/send#0", value="placeholder"),
            ],
            messages=[NewMessage("ch", "hello", prov(), memo=1)],
        ),
        at(1),
    )
    assert result.message_seqs == [2]
    assert result.entry_values == [None, 2]
    assert [(e.kind, e.value) for e in await store.read_journal(eid, after=1)] == [
        (EntryKind.FRAME_STARTED, None),
        (EntryKind.FRAME_COMPLETED, 2),
    ]


async def test_several_memos_in_one_write(store):
    eid = await create(store)
    result = await store.write(
        Write(
            entries=[entry(eid, EntryKind.FRAME_COMPLETED, f"root/send#{i}") for i in range(3)],
            messages=[
                NewMessage("x", "a", prov(), memo=2),
                NewMessage("y", "b", prov(), memo=0),
                NewMessage("x", "c", prov(), memo=1),
            ],
        ),
        T0,
    )
    assert result.message_seqs == [1, 1, 2]
    assert result.entry_values == [1, 2, 1]
    assert [e.value for e in await store.read_journal(eid, after=1)] == [1, 2, 1]
