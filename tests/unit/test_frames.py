"""Frame ids and the memo table as pure code on a list of entries (``FrameIds``, ``Memo``,
``divergence``, ``unvisited`` of ``flowli.engine``): no store, no event loop."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from flowli.domain import Actor, Code, DuplicateFrameError, Entry, EntryKind, FrameKind, Provenance, Site
from flowli.engine import FrameIds, Memo, divergence, unvisited

pytestmark = pytest.mark.unit

T = datetime(2030, 1, 1, tzinfo=UTC)


def entry(seq: int | None, kind: EntryKind, fid: str | None = None, *, attempt: int | None = None,
          digest: str | None = None, value: object = None, frame_kind: str = "step") -> Entry:
    return Entry(eid="e", kind=kind, fid=fid, attempt=attempt, digest=digest, value=value, seq=seq,
                 provenance=Provenance(Actor("worker", "w"), Site(), Code("wf", "1", frame_kind, "x"), T))


def started(seq: int = 1) -> Entry:
    return entry(seq, EntryKind.EXECUTION_STARTED, "root")


# ---- frame ids ------------------------------------------------------------------------------


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


def test_frame_ids_count_per_parent_and_visited_is_every_created_id():
    ids = FrameIds()
    assert ids.assign("a", None) == "root/a#0"
    assert ids.assign("a", None, parent="root/g#0") == "root/g#0/a#0"  # another parent: its own count
    assert ids.assign("a", None, parent="root/g#0") == "root/g#0/a#1"
    assert ids.assign("a", None) == "root/a#1"
    assert ids.assign("a", "k", parent="root/g#0") == "root/g#0/a:k"
    assert ids.assign("a", "k") == "root/a:k"  # the same key under another parent is another frame
    assert ids.visited == {"root/a#0", "root/g#0/a#0", "root/g#0/a#1", "root/a#1", "root/g#0/a:k", "root/a:k"}
    assert ids.created == ["root/a#0", "root/g#0/a#0", "root/g#0/a#1", "root/a#1", "root/g#0/a:k", "root/a:k"]


def test_a_key_is_its_text_and_the_refusals_name_the_frame():
    ids = FrameIds()
    assert ids.assign("fetch", 7) == "root/fetch:7"  # type: ignore[arg-type]
    with pytest.raises(DuplicateFrameError) as dup:
        ids.assign("fetch", "7")
    assert str(dup.value) == "frame root/fetch:7 already exists in this execution: give each frame a distinct key"
    assert dup.value.fid == "root/fetch:7"
    with pytest.raises(ValueError) as slash:
        ids.assign("load", "2030/01", parent="root/g#0")
    assert str(slash.value) == "frame key '2030/01' of root/g#0/load must not contain '/'"
    assert ids.created == ["root/fetch:7"]  # a refused id is not created


# ---- the memo -------------------------------------------------------------------------------


def test_the_memo_is_the_first_completion_and_failures_count_until_it():
    memo = Memo([
        started(),
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


def test_started_is_the_first_start_and_a_failure_after_the_outcome_counts_no_more():
    memo = Memo([
        started(),
        entry(2, EntryKind.FRAME_STARTED, "root/a#0", attempt=1, digest="first"),
        entry(3, EntryKind.FRAME_STARTED, "root/a#0", attempt=1, digest="again"),  # a rerun of attempt 1
        entry(4, EntryKind.FRAME_COMPLETED, "root/a#0", attempt=1, value=1),
        entry(5, EntryKind.FRAME_FAILED, "root/a#0", attempt=2, value={"final": True}),  # late: ignored
    ])
    assert memo.started["root/a#0"].digest == "first" and memo.order == ["root/a#0"]
    assert memo.outcome["root/a#0"].kind is EntryKind.FRAME_COMPLETED
    assert memo.failures["root/a#0"] == [] and memo.next_attempt("root/a#0") == 1
    assert memo.next_attempt("root/never#0") == 1 and memo.tries("root/never#0", 3) == 3


def test_a_final_failure_is_the_outcome_and_a_retry_of_the_execution_reopens_it():
    journal = [
        started(),
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


def test_a_retry_keeps_a_completion_and_ignores_a_retry_without_a_frame():
    journal = [
        started(),
        entry(2, EntryKind.FRAME_STARTED, "root/a#0", attempt=1, digest="d"),
        entry(3, EntryKind.FRAME_FAILED, "root/a#0", attempt=1, value={"final": False}),
        entry(4, EntryKind.FRAME_STARTED, "root/a#0", attempt=2, digest="d"),
        entry(5, EntryKind.FRAME_COMPLETED, "root/a#0", attempt=2, value="done"),
        entry(6, EntryKind.EXECUTION_RETRIED, "root", value={"fid": "root/a#0"}),
        entry(7, EntryKind.EXECUTION_RETRIED, "root", value={"fid": 3}),  # not a frame id: nothing reopens
        entry(8, EntryKind.EXECUTION_RETRIED, "root", value=None),
    ]
    memo = Memo(journal)
    assert memo.outcome["root/a#0"].value == "done"  # only a final failure is reopened
    assert memo.base == {"root/a#0": 1} and memo.tries("root/a#0", 3) == 2


def test_two_retries_of_the_execution_each_count_afresh_and_attempt_numbers_go_on():
    memo = Memo([
        started(),
        entry(2, EntryKind.FRAME_STARTED, "root/a#0", attempt=1, digest="d"),
        entry(3, EntryKind.FRAME_FAILED, "root/a#0", attempt=1, value={"final": True}),
        entry(4, EntryKind.EXECUTION_RETRIED, "root", value={"fid": "root/a#0"}),
        entry(5, EntryKind.FRAME_STARTED, "root/a#0", attempt=2, digest="d"),
        entry(6, EntryKind.FRAME_FAILED, "root/a#0", attempt=2, value={"final": False}),
        entry(7, EntryKind.FRAME_STARTED, "root/a#0", attempt=3, digest="d"),
        entry(8, EntryKind.FRAME_FAILED, "root/a#0", attempt=3, value={"final": True}),
        entry(9, EntryKind.EXECUTION_RETRIED, "root", value={"fid": "root/a#0"}),
    ])
    assert "root/a#0" not in memo.outcome
    assert [e.attempt for e in memo.failures["root/a#0"]] == [1, 2, 3]
    assert memo.next_attempt("root/a#0") == 4 and memo.base == {"root/a#0": 3} and memo.tries("root/a#0", 4) == 1


def test_cursors_keep_the_highest_seq_per_channel_and_only_receives_move_them():
    memo = Memo([
        started(),
        entry(2, EntryKind.FRAME_COMPLETED, "root/r#0", value={"channel": "a", "seq": 9, "payload": 0},
              frame_kind="receive"),
        entry(3, EntryKind.FRAME_COMPLETED, "root/r#1", value={"channel": "a", "seq": 5, "payload": 0},
              frame_kind="receive"),
        entry(4, EntryKind.FRAME_COMPLETED, "root/r#2", value={"channel": "b", "seq": 2, "payload": 0},
              frame_kind="receive"),
        entry(5, EntryKind.FRAME_COMPLETED, "root/s#0", value={"channel": "c", "seq": 40}),  # a step's value
        entry(6, EntryKind.FRAME_COMPLETED, "root/r#3", value="no message", frame_kind="receive"),  # a timeout
    ])
    assert memo.cursors == {"a": 9, "b": 2}


def test_seen_per_epoch_last_seq_and_whether_an_activation_ran_before():
    memo = Memo([
        started(),
        entry(2, EntryKind.EXECUTION_RESUMED, "root", value={"epoch": 1}),
        entry(3, EntryKind.FRAME_STARTED, "root/a#0", attempt=1, digest="d"),
        entry(4, EntryKind.EXECUTION_RESUMED, "root", value={"epoch": 2, "seen": 3}),
        entry(5, EntryKind.EXECUTION_RESUMED, "root", value={"other": True}),  # no epoch: not counted
        entry(None, EntryKind.FRAME_COMPLETED, "root/a#0", value=1),  # no seq yet
    ])
    assert memo.seen == {1: 1, 2: 3}  # without "seen": the seq before the resumption
    assert memo.last_seq == 5
    assert Memo([]).resumed is False and Memo([]).last_seq == 0
    assert Memo([started()]).resumed is False
    assert Memo([entry(1, EntryKind.EXECUTION_RESUMED, "root", value={"epoch": 1})]).resumed is True
    assert Memo([started(), entry(2, EntryKind.EXECUTION_SUSPENDED, "root")]).resumed is True


def test_a_suspension_arms_timers_and_waiters_for_the_next_activation():
    memo = Memo([started(),
                 entry(2, EntryKind.EXECUTION_SUSPENDED, "root", value={"waits": [
                     {"fid": "root/sleep#0", "kind": "timer", "until": T.isoformat()}]})])
    assert (memo.armed_timers, memo.armed_waiters) == (True, False)
    memo = Memo([started()])
    assert (memo.armed_timers, memo.armed_waiters, memo.resumed) == (False, False, False)


def test_only_the_last_suspension_arms():
    timer = {"fid": "root/sleep#0", "kind": "timer", "until": T.isoformat()}
    message = {"fid": "root/r#0", "kind": "message", "channel": "e.go", "after": 0}
    both = Memo([started(), entry(2, EntryKind.EXECUTION_SUSPENDED, "root", value={"waits": [timer, message]})])
    assert (both.armed_timers, both.armed_waiters) == (True, True)
    later = Memo([started(), entry(2, EntryKind.EXECUTION_SUSPENDED, "root", value={"waits": [timer]}),
                  entry(3, EntryKind.EXECUTION_RESUMED, "root", value={"epoch": 2}),
                  entry(4, EntryKind.EXECUTION_SUSPENDED, "root", value={"waits": [message]})])
    assert (later.armed_timers, later.armed_waiters) == (False, True)
    child = Memo([started(), entry(2, EntryKind.EXECUTION_SUSPENDED, "root", value={"waits": [
        {"fid": "root/c#0", "kind": "child", "child": "eid-2"}]})])
    assert (child.armed_timers, child.armed_waiters) == (False, False)
    bare = Memo([started(), entry(2, EntryKind.EXECUTION_SUSPENDED, "root", value=None)])
    assert (bare.armed_timers, bare.armed_waiters) == (False, False)


# ---- divergence -----------------------------------------------------------------------------


def test_divergence_names_a_changed_kind_or_digest_and_unvisited_frames():
    memo = Memo([started(),
                 entry(2, EntryKind.FRAME_STARTED, "root/a#0", attempt=1, digest="d1"),
                 entry(3, EntryKind.FRAME_STARTED, "root/b#0", attempt=1, digest="d2", frame_kind="sleep")])
    assert divergence(memo, "root/a#0", FrameKind.STEP, "d1") is None
    assert divergence(memo, "root/new#0", FrameKind.STEP, "x") is None
    assert divergence(memo, "root/a#0", FrameKind.STEP, "d9") == (
        "the arguments changed (digest d1 in the journal, d9 now)")
    assert divergence(memo, "root/b#0", FrameKind.STEP, "d2") == (
        "the journal holds a sleep frame here, the code a step frame")
    assert unvisited(memo, {"root/a#0"}) == ["root/b#0"]


def test_a_changed_kind_is_named_before_a_changed_digest_and_unvisited_is_sorted():
    memo = Memo([started(),
                 entry(2, EntryKind.FRAME_STARTED, "root/z#0", attempt=1, digest="d1", frame_kind="receive"),
                 entry(3, EntryKind.FRAME_STARTED, "root/b#0", attempt=1, digest="d2"),
                 entry(4, EntryKind.FRAME_STARTED, "root/m#0", attempt=1, digest="d3", frame_kind="child")])
    assert divergence(memo, "root/z#0", FrameKind.CHILD, "other") == (
        "the journal holds a receive frame here, the code a child frame")
    assert unvisited(memo, set()) == ["root/b#0", "root/m#0", "root/z#0"]
    assert unvisited(memo, {"root/b#0", "root/m#0", "root/z#0", "root/new#0"}) == []
