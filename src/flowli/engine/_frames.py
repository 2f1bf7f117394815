"""Frame ids and the memo table: pure code on a list of journal entries, no I/O.

A replay asks two questions of the journal: what it says of a frame (its first start, its
attempts, its memo or final failure, the cursor of each channel it received on) and whether the
code still creates the frames the journal holds. :class:`Memo` answers the first from the
entries; :class:`FrameIds` assigns frame ids at call time (``root/fetch#0``, ``root/fetch:orders``)
and :func:`divergence` compares a frame the code creates with the one the journal holds.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from flowli.domain import DuplicateFrameError, Entry, EntryKind, FrameKind

ROOT = "root"

WaitKind = Literal["timer", "message", "child", "step", "delegate"]


@dataclass(frozen=True)
class Wait:
    """What a waiting frame waits for. A wait with ``at`` and a channel (a receive with a
    timeout) ends at whichever comes first."""

    fid: str
    kind: WaitKind
    at: datetime | None = None
    channel: str | None = None
    after: int = 0
    child: str | None = None
    queue: str | None = None
    """The queue of a DELEGATE task the frame waits on."""

    def describe(self) -> dict[str, Any]:
        data: dict[str, Any] = {"fid": self.fid, "kind": self.kind}
        if self.at is not None:
            data["until"] = self.at.isoformat()
        if self.channel is not None:
            data["channel"] = self.channel
            data["after"] = self.after
        if self.child is not None:
            data["child"] = self.child
        if self.queue is not None:
            data["queue"] = self.queue
        return data


class Memo:
    """What a journal says of the frames of its execution.

    - ``started``: the first frame.started of each frame id (its kind and argument digest);
    - ``outcome``: the memo (the first frame.completed) or the final frame.failed of each frame;
    - ``failures``: the failed attempts of each frame, in order, until its outcome;
    - ``cursors``: the highest message seq that a receive consumed, per channel;
    - ``base``: per frame, the attempts that count no more (a retry of the execution reopened it).
    """

    def __init__(self, journal: list[Entry]):
        self.started: dict[str, Entry] = {}
        self.order: list[str] = []
        """Frame ids in the order of their first frame.started."""
        self.attempts_started: set[tuple[str, int]] = set()
        self.outcome: dict[str, Entry] = {}
        self.failures: dict[str, list[Entry]] = defaultdict(list)
        self.base: dict[str, int] = {}
        self.cursors: dict[str, int] = {}
        self.retries = 0
        """The execution's retries (execution.retried entries)."""
        self.seen: dict[int, int] = {}
        """Per epoch, the last seq of the journal its activation started from (execution.resumed)."""
        self.last_seq = 0
        self.resumed = len(journal) > 1 or any(e.kind is not EntryKind.EXECUTION_STARTED for e in journal)
        """Whether an activation ran before (the journal holds more than its execution.started)."""
        self.armed_timers = False
        """Whether the execution's last suspension set timers (its next write clears them)."""
        self.armed_waiters = False
        """Whether the execution's last suspension set waiters on channels."""
        for e in journal:
            self.add(e)

    def add(self, e: Entry) -> None:
        """What entry ``e``, the next of the journal, says of its frames."""
        self.last_seq = max(self.last_seq, e.seq or 0)
        if e.kind is EntryKind.EXECUTION_SUSPENDED:
            self.arm((e.value or {}).get("waits") if isinstance(e.value, dict) else None)
        elif e.kind is EntryKind.EXECUTION_RESUMED and isinstance(e.value, dict) and "epoch" in e.value:
            self.seen[e.value["epoch"]] = e.value.get("seen", (e.seq or 1) - 1)
        elif e.kind is EntryKind.EXECUTION_RETRIED:
            self.retries += 1
            self._reopen((e.value or {}).get("fid"))
        if e.fid is None:
            return
        if e.kind is EntryKind.FRAME_STARTED:
            if e.fid not in self.started:
                self.started[e.fid] = e
                self.order.append(e.fid)
            self.attempts_started.add((e.fid, e.attempt or 1))
        elif e.kind is EntryKind.FRAME_COMPLETED:
            self.outcome.setdefault(e.fid, e)
            if isinstance(e.value, dict) and e.provenance.code.frame_kind == FrameKind.RECEIVE.value:
                ch, seq = e.value["channel"], e.value["seq"]
                self.cursors[ch] = max(self.cursors.get(ch, 0), seq)
        elif e.kind is EntryKind.FRAME_FAILED:
            if e.fid in self.outcome:
                return
            self.failures[e.fid].append(e)
            if isinstance(e.value, dict) and e.value.get("final"):
                self.outcome[e.fid] = e

    def arm(self, waits: Any) -> None:
        """The waits of the execution's last suspension (their ``describe()``): its timers and
        waiters stay set until a write clears them."""
        self.armed_timers = bool(waits) and any("until" in w for w in waits)
        self.armed_waiters = bool(waits) and any("channel" in w for w in waits)

    def _reopen(self, fid: Any) -> None:
        """A retry of the execution: the final failure of ``fid`` counts no more, and its next
        attempts have a fresh count (their numbers go on, so that each attempt keeps its own)."""
        if not isinstance(fid, str):
            return
        outcome = self.outcome.get(fid)
        if outcome is not None and outcome.kind is EntryKind.FRAME_FAILED:
            del self.outcome[fid]
        self.base[fid] = len(self.failures.get(fid, ()))

    def next_attempt(self, fid: str) -> int:
        """The number of the next attempt of a frame: 1 + its failed attempts."""
        return len(self.failures.get(fid, ())) + 1

    def tries(self, fid: str, attempt: int) -> int:
        """How many attempts the retry policy has seen at ``attempt`` (since a retry reopened it)."""
        return attempt - self.base.get(fid, 0)


class FrameIds:
    """Frame ids, assigned when a Context method is called: ``root/{name}#{n}`` where n counts
    the frames of that name under the parent (keyed ones included), or ``root/{name}:{key}``."""

    def __init__(self) -> None:
        self.counters: dict[tuple[str, str], int] = defaultdict(int)
        self.visited: set[str] = set()
        self.created: list[str] = []
        """Every frame id, in the order the code created them."""

    def assign(self, name: str, key: str | None, parent: str = ROOT) -> str:
        n = self.counters[(parent, name)]
        self.counters[(parent, name)] = n + 1
        if key is None:
            fid = f"{parent}/{name}#{n}"
        else:
            key = str(key)
            if "/" in key:
                raise ValueError(f"frame key {key!r} of {parent}/{name} must not contain '/'")
            fid = f"{parent}/{name}:{key}"
        if fid in self.visited:
            raise DuplicateFrameError(fid)
        self.visited.add(fid)
        self.created.append(fid)
        return fid


def divergence(memo: Memo, fid: str, kind: FrameKind, dig: str) -> str | None:
    """Why the frame the code creates differs from the frame the journal holds at ``fid`` (its
    kind, its argument digest), or None when they match or the journal has no such frame."""
    started = memo.started.get(fid)
    if started is None:
        return None
    was = started.provenance.code.frame_kind
    if was != kind.value:
        return f"the journal holds a {was} frame here, the code a {kind.value} frame"
    if started.digest != dig:
        return f"the arguments changed (digest {started.digest} in the journal, {dig} now)"
    return None


def unvisited(memo: Memo, visited: set[str]) -> list[str]:
    """The frames of the journal that this replay never created, sorted."""
    return sorted(set(memo.started) - visited)
