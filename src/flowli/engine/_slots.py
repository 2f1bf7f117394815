"""The free slots of this process's workers: where an execution started, answered or resumed in
this process runs at once, without going through its queue.

The Engine owns its workers and enters each here while it runs; a start (``engine.start``), an
answer to a DELEGATE (``_consumer``) and a child started by a decider's command (``_deciding``)
ask for a slot, write the execution leased to this process, and hand it to the worker that
reserved the slot (or give the slot back when the write was not made).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from flowli.domain import Entry, ExecutionRecord


class Slot(Protocol):
    """A worker as a place to run an execution (``flowli.engine.Worker``)."""

    @property
    def queues(self) -> Sequence[str]:
        """The queues it serves."""

    def reserve(self, queue: str | None) -> bool:
        """Promise a slot to an execution on ``queue`` (None: one of this worker's queues)."""

    def unreserve(self) -> None:
        """Give back a slot promised to an execution whose write was not made."""

    def adopt(self, record: ExecutionRecord, journal: list[Entry], key: str | None = None, after: int = 0) -> None:
        """Run the execution, leased to this process, in the slot promised to it (``journal``: its
        entries after seq ``after``, see ``Acquired.after``)."""


class Slots:
    """The running workers of this process, as slots to run an execution in."""

    def __init__(self) -> None:
        self._workers: list[Slot] = []

    def enter(self, worker: Slot) -> None:
        self._workers.append(worker)

    def leave(self, worker: Slot) -> None:
        self._workers.remove(worker)

    def __bool__(self) -> bool:
        return bool(self._workers)

    def reserve(self, queue: str | None) -> Slot | None:
        """A worker on ``queue`` (None: any, the store checks the queue as it takes the lease) with
        a free slot, which it reserves; None when every slot is taken."""
        for worker in self._workers:
            if worker.reserve(queue):
                return worker
        return None
