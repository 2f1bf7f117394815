"""The records that the stores hold."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ._provenance import Provenance
from ._status import EntryKind, Status, TaskKind


@dataclass(frozen=True)
class Entry:
    """One event in a journal (``seq`` per execution) or in the control log (``seq`` global)."""

    eid: str
    kind: EntryKind
    provenance: Provenance
    fid: str | None = None
    attempt: int | None = None
    digest: str | None = None
    value: Any = None
    error: dict[str, Any] | None = None
    seq: int | None = None
    journal_seq: int | None = None
    """On a control-log entry that announces a journal entry: the seq of that journal entry."""

    @property
    def at(self) -> datetime:
        return self.provenance.at


@dataclass(frozen=True)
class ExecutionRecord:
    """The record of one execution, with its lease state."""

    eid: str
    workflow: str
    version: str
    status: Status
    args: list[Any]
    queue: str
    created_at: datetime
    updated_at: datetime
    result: Any = None
    error: dict[str, Any] | None = None
    parent_eid: str | None = None
    parent_fid: str | None = None
    key: str | None = None
    lease_owner: str | None = None
    lease_epoch: int = 0
    lease_expires_at: datetime | None = None
    cancel_requested: dict[str, Any] | None = None
    blocked: dict[str, Any] | None = None
    """Why a suspended execution waits for an operator (a nondeterminism), else None."""
    application: str | None = None
    """The tenant: a principal of another application never sees this execution. None is
    single-tenant use."""

    @property
    def terminal(self) -> bool:
        return self.status.terminal


@dataclass(frozen=True)
class Task:
    """A unit of work on a queue."""

    id: str
    kind: TaskKind
    queue: str
    eid: str | None
    payload: Any
    provenance: Provenance
    visible_at: datetime
    deliveries: int = 0
    lease_owner: str | None = None
    application: str | None = None
    """The tenant of the task's execution."""
    attempt: int | None = None
    """The attempt of the frame that the task runs (a RUN_STEP, a DELEGATE), else None."""
    state: str = "ready"
    """ready (on its queue, perhaps leased), acked (done) or withdrawn."""
    frame: dict[str, Any] | None = None
    """For the task of a frame's attempt (``ctx.delegate``): the frame id, the attempt's number for
    the retry policy, the policy, the lease expiries so far and their bound. None for a task
    enqueued on its own (``ctx.enqueue``)."""


@dataclass(frozen=True)
class Message:
    """One item sent on a channel."""

    channel: str
    seq: int
    payload: Any
    provenance: Provenance
    application: str | None = None


@dataclass(frozen=True)
class Timer:
    """A future instant at which the sweeper resumes an execution."""

    eid: str
    fid: str
    at: datetime


@dataclass
class Journal:
    """The entries of one execution, in order."""

    eid: str
    entries: list[Entry] = field(default_factory=list)
