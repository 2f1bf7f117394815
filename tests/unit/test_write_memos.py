"""``Write.put_first``: entries put before a write's own (an activation's pending
``execution.resumed``) move every memo with the entry it names, whatever kind of effect holds it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from flowli.domain import Actor, Code, Entry, EntryKind, Provenance, Site
from flowli.store import Announcement, Claim, NewMessage, Withdrawal, Write

pytestmark = pytest.mark.unit

PROV = Provenance(Actor("worker", "w"), Site(), Code(), datetime(2026, 1, 1, tzinfo=UTC))


def entry(fid: str) -> Entry:
    return Entry(eid="e", kind=EntryKind.FRAME_COMPLETED, fid=fid, provenance=PROV)


def test_entries_put_first_move_every_memo_with_its_entry() -> None:
    own = [entry("send"), entry("withdraw"), entry("claim")]
    write = Write(entries=list(own), messages=[NewMessage("c", 1, PROV, memo=0)],
                  withdrawals=[Withdrawal("t", memo=1)], claims=[Claim("k", "w", memo=2), Claim("k2", "w")],
                  announcements=[Announcement(own[0], memo=0)])
    pending = [entry("resumed"), entry("other")]
    write.put_first(pending)
    assert write.entries == [*pending, *own]
    assert [write.entries[m.memo].fid for m in write.messages if m.memo is not None] == ["send"]
    assert [write.entries[w.memo].fid for w in write.withdrawals if w.memo is not None] == ["withdraw"]
    assert [c.memo for c in write.claims] == [4, None]
    assert write.entries[write.announcements[0].memo or 0].fid == "send"
    before = (list(write.entries), list(write.messages))
    write.put_first([])
    assert (write.entries, write.messages) == before
