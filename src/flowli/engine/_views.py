"""The view of a run: its frames as a tree, with their kind, status, attempts, timing and waits,
built from the journal alone (pure: no I/O). ``flowli show`` prints it; the dashboard, the
catalog's three-state view and the MCP server read it.

Frame statuses: ``completed`` (its memo), ``failed`` (its final failure), ``retrying`` (an attempt
failed; the next one waits for its delay), ``waiting`` (it waits for a message, an instant, a
child, an answer, as the last suspension of its execution said), ``running`` (an attempt is
under way). The root frame has the execution's status.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from flowli.domain import Entry, EntryKind, ExecutionRecord, FrameKind, Tone

from ._frames import ROOT

_ENDS = {EntryKind.EXECUTION_COMPLETED, EntryKind.EXECUTION_FAILED, EntryKind.EXECUTION_CANCELLED}
FRAME_TONES: dict[str, Tone] = {"completed": Tone.OK, "failed": Tone.BAD, "retrying": Tone.WAITING,
                                "waiting": Tone.WAITING, "running": Tone.BUSY}
"""The tone of each status of a frame."""


def describe_wait(eid: str, wait: dict[str, Any]) -> str:
    """What a frame of execution ``eid`` waits for, in a phrase (a timer's instant in UTC with its
    date, a channel of the run by its own name)."""
    kind, fid = wait.get("kind"), wait.get("fid", "?")
    if kind == "timer":
        until = wait.get("until")
        return f"timer {fid} until {_utc(until)}" if isinstance(until, str) else f"timer {fid}"
    if kind == "message":
        channel = str(wait.get("channel", "?"))
        until = f" until {_utc(wait['until'])}" if isinstance(wait.get("until"), str) else ""
        return f"message on {channel.removeprefix(f'{eid}.')!r}{until} ({fid})"
    if kind == "child":
        return f"child {wait.get('child')} ({fid})"
    if kind == "step":
        return f"step {fid} on another worker"
    if kind == "delegate":
        return f"an answer from queue {wait.get('queue', '?')!r} ({fid})"
    return f"{kind or 'something'} ({fid})"


def _utc(instant: str) -> str:
    return datetime.fromisoformat(instant).astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


@dataclass(frozen=True)
class AttemptView:
    """One attempt of a frame: when it started and ended, how, and who gave its outcome."""

    number: int
    started_at: datetime | None = None
    ended_at: datetime | None = None
    outcome: str = "running"
    """running, completed, failed, expired (its lease ran out) or timed out."""
    error: dict[str, Any] | None = None
    by: str | None = None
    """The actor of the outcome (``human:carol@example.com`` for an answer a person gave)."""


@dataclass(frozen=True)
class FrameView:
    fid: str
    kind: str
    name: str
    status: str
    attempts: tuple[AttemptView, ...] = ()
    started_at: datetime | None = None
    ended_at: datetime | None = None
    value: Any = None
    """The memo of a completed frame."""
    error: dict[str, Any] | None = None
    """The error of a failed frame (its final attempt's)."""
    wait: dict[str, Any] | None = None
    """What a waiting frame waits for (its timer, channel, child or queue)."""
    child: str | None = None
    """The eid of a child frame's execution."""
    queue: str | None = None
    """The queue of a delegate frame, or of a step run on another queue."""
    group: str | None = None
    """The label of the pattern (``ctx.group``) whose frame this is, if any."""
    frames: tuple[FrameView, ...] = ()


@dataclass(frozen=True)
class RunView:
    eid: str
    workflow: str
    version: str
    status: str
    created_at: datetime
    updated_at: datetime
    root: FrameView
    application: str | None = None
    waits: tuple[dict[str, Any], ...] = ()
    """What the run waits on, as its last suspension said (a suspended run)."""
    lease: dict[str, Any] | None = None
    """The holder of the lease (``owner``, ``epoch``, ``expires_at``) while one holds it."""
    blocked: dict[str, Any] | None = None

    @property
    def frames(self) -> tuple[FrameView, ...]:
        return self.root.frames

    @classmethod
    def of(cls, record: ExecutionRecord, journal: list[Entry]) -> RunView:
        """The view of a run whose record and journal the caller read already (no I/O)."""
        return run_view(record, journal)

    def frame(self, fid: str) -> FrameView:
        for f in self.root.frames:
            if f.fid == fid:
                return f
        raise KeyError(fid)


@dataclass
class _Frame:
    fid: str
    kind: str
    name: str
    attempts: dict[int, AttemptView] = field(default_factory=dict)
    started_at: datetime | None = None
    ended_at: datetime | None = None
    outcome: Entry | None = None
    last_failure: Entry | None = None
    child: str | None = None
    queue: str | None = None
    group: str | None = None


def _attempt_outcome(e: Entry) -> str:
    if e.kind is EntryKind.FRAME_COMPLETED:
        return "completed"
    if (e.error or {}).get("timeout"):
        return "timed out"
    if isinstance(e.value, dict) and e.value.get("expired"):
        return "expired"
    return "failed"


def run_view(record: ExecutionRecord, journal: list[Entry]) -> RunView:
    frames: dict[str, _Frame] = {}
    waits: list[dict[str, Any]] = []
    ended_at: datetime | None = None
    for e in journal:
        if e.kind is EntryKind.EXECUTION_SUSPENDED:
            v = e.value if isinstance(e.value, dict) else {}
            waits = list(v.get("waits") or [])
        elif e.kind is EntryKind.EXECUTION_RESUMED:
            waits = []
        elif e.kind in _ENDS:
            ended_at, waits = e.at, []
        elif e.kind is EntryKind.EXECUTION_RETRIED:
            ended_at = None
            reopened = frames.get((e.value or {}).get("fid", ""))
            if reopened is not None:
                reopened.outcome, reopened.ended_at = None, None
        if e.fid is None or e.fid == ROOT or not e.kind.value.startswith("frame."):
            continue
        f = frames.get(e.fid)
        if f is None:
            code = e.provenance.code
            f = frames[e.fid] = _Frame(e.fid, code.frame_kind or FrameKind.STEP.value,
                                       code.frame_name or e.fid.rsplit("/", 1)[-1])
        n = e.attempt or 1
        if e.kind is EntryKind.FRAME_STARTED:
            f.started_at = f.started_at or e.at
            f.attempts.setdefault(n, AttemptView(n, started_at=e.at))
            value = e.value if isinstance(e.value, dict) else {}
            f.child = f.child or value.get("child")
            f.queue = f.queue or value.get("queue")
            f.group = f.group or value.get("group")
            continue
        attempt = f.attempts.get(n, AttemptView(n))
        if attempt.outcome == "running":  # the first outcome of an attempt wins
            by = str(e.provenance.actor)
            if f.kind == FrameKind.RECEIVE.value and isinstance(e.value, dict) and e.value.get("by"):
                by = e.value["by"]  # who sent the message it received
            f.attempts[n] = replace(attempt, ended_at=e.at, outcome=_attempt_outcome(e), error=e.error, by=by)
        if f.outcome is not None:
            continue
        if e.kind is EntryKind.FRAME_COMPLETED:
            f.outcome, f.ended_at = e, e.at
        else:
            f.last_failure = e
            if isinstance(e.value, dict) and e.value.get("final"):
                f.outcome, f.ended_at = e, e.at
    waiting = {w.get("fid"): w for w in waits}
    views = tuple(_view(f, waiting.get(f.fid)) for f in frames.values())
    status = record.status.value
    root = FrameView(ROOT, FrameKind.ROOT.value, record.workflow, status, started_at=record.created_at,
                     ended_at=ended_at if record.terminal else None, value=record.result, error=record.error,
                     frames=views)
    lease = None
    if record.lease_owner is not None:
        lease = {"owner": record.lease_owner, "epoch": record.lease_epoch, "expires_at": record.lease_expires_at}
    return RunView(record.eid, record.workflow, record.version, status, record.created_at, record.updated_at, root,
                   application=record.application, waits=tuple(waits) if record.status.value == "suspended" else (),
                   lease=lease, blocked=record.blocked)


def _view(f: _Frame, wait: dict[str, Any] | None) -> FrameView:
    if f.outcome is not None:
        status = "completed" if f.outcome.kind is EntryKind.FRAME_COMPLETED else "failed"
    elif wait is not None:
        status = "retrying" if f.last_failure is not None and wait.get("kind") == "timer" else "waiting"
    elif f.attempts and all(a.outcome != "running" for a in f.attempts.values()):
        status = "retrying"  # the last attempt failed; the next one is not under way yet
    else:
        status = "running"
    out = f.outcome
    return FrameView(
        f.fid, f.kind, f.name, status, attempts=tuple(f.attempts[n] for n in sorted(f.attempts)),
        started_at=f.started_at, ended_at=f.ended_at,
        value=out.value if out is not None and out.kind is EntryKind.FRAME_COMPLETED else None,
        error=out.error if out is not None and out.kind is EntryKind.FRAME_FAILED else None,
        wait=wait if out is None else None, child=f.child, queue=f.queue, group=f.group,
    )
