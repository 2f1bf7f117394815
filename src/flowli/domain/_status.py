from __future__ import annotations

import enum


class Status(enum.StrEnum):
    """The six statuses of an execution. completed, failed and cancelled are terminal."""

    PENDING = "pending"
    RUNNING = "running"
    SUSPENDED = "suspended"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL

    def __str__(self) -> str:
        return self.value


TERMINAL = frozenset({Status.COMPLETED, Status.FAILED, Status.CANCELLED})


class Tone(enum.StrEnum):
    """How a status looks wherever a person sees it (a badge, a node of a graph). Each audience
    has its own status words (an execution's, a pipeline's, a stage's, a catalog run's); each
    word names its tone where the word is defined, and a view shows the tone, never the word's
    own style."""

    OK = "ok"
    BAD = "bad"
    BUSY = "busy"
    WAITING = "waiting"
    IDLE = "idle"


STATUS_TONES: dict[str, Tone] = {
    Status.PENDING: Tone.IDLE, Status.RUNNING: Tone.BUSY, Status.SUSPENDED: Tone.WAITING,
    Status.COMPLETED: Tone.OK, Status.FAILED: Tone.BAD, Status.CANCELLED: Tone.BAD,
}
"""The tone of each status of an execution."""


class TaskKind(enum.StrEnum):
    """The four kinds of task."""

    START = "START"
    RESUME = "RESUME"
    RUN_STEP = "RUN_STEP"
    DELEGATE = "DELEGATE"

    def __str__(self) -> str:
        return self.value


class FrameKind(enum.StrEnum):
    ROOT = "root"
    STEP = "step"
    CHILD = "child"
    RECEIVE = "receive"
    SLEEP = "sleep"
    DELEGATE = "delegate"

    def __str__(self) -> str:
        return self.value


class EntryKind(enum.StrEnum):
    """The kinds of journal and control-log entry."""

    EXECUTION_STARTED = "execution.started"
    EXECUTION_SUSPENDED = "execution.suspended"
    EXECUTION_RESUMED = "execution.resumed"
    EXECUTION_COMPLETED = "execution.completed"
    EXECUTION_FAILED = "execution.failed"
    EXECUTION_CANCELLED = "execution.cancelled"
    EXECUTION_MIGRATED = "execution.migrated"
    EXECUTION_RETRIED = "execution.retried"
    CANCEL_REQUESTED = "execution.cancel_requested"
    FRAME_STARTED = "frame.started"
    FRAME_COMPLETED = "frame.completed"
    FRAME_FAILED = "frame.failed"
    ANNOUNCED = "announced"
    EVENT = "event"
    """An event of a decider (its own word and data in the value): its history, folded into its state."""

    lifecycle: bool
    """Whether the control log holds entries of this kind (``execution.*``). An attribute of each
    member, set once: it is asked of every entry every write appends."""

    def __init__(self, value: str) -> None:
        self.lifecycle = value.startswith("execution.")

    def __str__(self) -> str:
        return self.value


ENTRY_STATUS: dict[EntryKind, Status] = {
    EntryKind.EXECUTION_STARTED: Status.PENDING,
    EntryKind.EXECUTION_SUSPENDED: Status.SUSPENDED,
    EntryKind.EXECUTION_RESUMED: Status.RUNNING,
    EntryKind.EXECUTION_COMPLETED: Status.COMPLETED,
    EntryKind.EXECUTION_FAILED: Status.FAILED,
    EntryKind.EXECUTION_CANCELLED: Status.CANCELLED,
    EntryKind.EXECUTION_RETRIED: Status.SUSPENDED,
}
"""The status that a lifecycle entry moves an execution to (the projection derives it)."""
