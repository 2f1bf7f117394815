"""Frame ids and the memo table as pure code on a list of entries (``flowli.engine._frames``): no
store, no event loop."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from flowli.domain import Actor, Code, DuplicateFrameError, Entry, EntryKind, FrameKind, Provenance, Site
from flowli.engine._frames import FrameIds, Memo, divergence, unvisited

pytestmark = pytest.mark.unit

T = datetime(2030, 1, 1, tzinfo=UTC)


def entry(seq: int, kind: EntryKind, fid: str | None = None, *, attempt: int | None = None, digest: str | None = None,
          value: object = None, frame_kind: str = "step") -> Entry:
    return Entry(eid="e", kind=kind, fid=fid, attempt=attempt, digest=digest, value=value, seq=seq,
                 provenance=Provenance(Actor("worker", "w"), Site(), Code("wf", "1", frame_kind, "x"), T))


def test_frame_ids_count_by_name_keyed_ones_included_and_refuse_a_repeated_key():
    ids = FrameIds()
    assert [ids.assign("fetch", None), ids.assign("fetch", None), ids.assign("fetch", "orders"),
            ids.assign("fetch", None), ids.assign("send", None)] == [
        "root/fetch#0", "root/fetch#1", "root/fetch:orders", "root/fetch#3", "root/send#0"]
    with pytest.raises(DuplicateFrameError, match="root/fetch:orders"):
        ids.assign("fetch", "orders")
    with pytest.raises(ValueError, match="must not contain '/'"):
        ids.assign("fetch", "a/b")
    assert ids.created == ["root/fetch#0", "root/fetch#1", "root/fetch:orders", "root/fetch#3", "root/send#0"]


def test_the_memo_is_the_first_completion_and_failures_count_until_it():
    memo = Memo([
        entry(1, EntryKind.EXECUTION_STARTED, "root"),
        entry(2, EntryKind.FRAME_STARTED, "root/a#0", attempt=1, digest="d1"),
        entry(3, EntryKind.FRAME_FAILED, "root/a#0", attempt=1, value={"final": False, "retry_at": T.isoformat()}),
        entry(4, EntryKind.FRAME_STARTED, "root/a#0", attempt=2, digest="d1"),
        entry(5, EntryKind.FRAME_COMPLETED, "root/a#0", attempt=2, value="first"),
        entry(6, EntryKind.FRAME_COMPLETED, "root/a#0", attempt=2, value="second"),  # a late duplicate: ignored
        entry(7, EntryKind.FRAME_STARTED, "root/r#0", digest="dr", frame_kind="receive"),
        entry(8, EntryKind.FRAME_COMPLETED, "root/r#0", value={"channel": "e.go", "seq": 4, "payload": 1},
              frame_kind="receive"),
    ])
    assert memo.outcome["root/a#0"].value == "first"
    assert len(memo.failures["root/a#0"]) == 1 and memo.next_attempt("root/a#0") == 2
    assert memo.attempts_started == {("root/a#0", 1), ("root/a#0", 2), ("root/r#0", 1)}
    assert memo.cursors == {"e.go": 4} and memo.last_seq == 8 and memo.resumed
    assert memo.order == ["root/a#0", "root/r#0"]


def test_a_final_failure_is_the_outcome_and_a_retry_of_the_execution_reopens_it():
    journal = [
        entry(1, EntryKind.EXECUTION_STARTED, "root"),
        entry(2, EntryKind.FRAME_STARTED, "root/a#0", attempt=1, digest="d"),
        entry(3, EntryKind.FRAME_FAILED, "root/a#0", attempt=1, value={"final": True}),
        entry(4, EntryKind.EXECUTION_FAILED, "root"),
    ]
    failed = Memo(journal)
    assert failed.outcome["root/a#0"].kind is EntryKind.FRAME_FAILED
    reopened = Memo([*journal, entry(5, EntryKind.EXECUTION_RETRIED, "root", value={"fid": "root/a#0"})])
    assert "root/a#0" not in reopened.outcome
    assert reopened.next_attempt("root/a#0") == 2  # numbers go on
    assert reopened.tries("root/a#0", 2) == 1  # the policy counts afresh


def test_divergence_names_a_changed_kind_or_digest_and_unvisited_frames():
    memo = Memo([entry(1, EntryKind.EXECUTION_STARTED, "root"),
                 entry(2, EntryKind.FRAME_STARTED, "root/a#0", attempt=1, digest="d1"),
                 entry(3, EntryKind.FRAME_STARTED, "root/b#0", attempt=1, digest="d2", frame_kind="sleep")])
    assert divergence(memo, "root/a#0", FrameKind.STEP, "d1") is None
    assert divergence(memo, "root/new#0", FrameKind.STEP, "x") is None
    assert "digest d1 in the journal, d9 now" in (divergence(memo, "root/a#0", FrameKind.STEP, "d9") or "")
    assert "holds a sleep frame here, the code a step frame" in (divergence(memo, "root/b#0", FrameKind.STEP, "d2") or "")
    assert unvisited(memo, {"root/a#0"}) == ["root/b#0"]


def test_a_suspension_arms_timers_and_waiters_for_the_next_activation():
    memo = Memo([entry(1, EntryKind.EXECUTION_STARTED, "root"),
                 entry(2, EntryKind.EXECUTION_SUSPENDED, "root", value={"waits": [
                     {"fid": "root/sleep#0", "kind": "timer", "until": T.isoformat()}]})])
    assert (memo.armed_timers, memo.armed_waiters) == (True, False)
    memo = Memo([entry(1, EntryKind.EXECUTION_STARTED, "root")])
    assert (memo.armed_timers, memo.armed_waiters, memo.resumed) == (False, False, False)
