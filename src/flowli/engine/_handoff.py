"""Hand-offs: a DELEGATE task enqueued while a consumer of this process long-polls its queue is
written leased to that consumer and handed to its poll, which then returns it without a
dequeue (no second write, no wake-up and store read in between). The task is in the store as
any leased task: if the consumer goes away, its lease expires as after a dequeue.

A hand-off whose write raised is given back to its queue too (``Polls.nack``) unless the error says
that nothing was written (a refusal): a write cancelled or broken while it committed may have
stored the task leased to a poll that now waits on without it."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from flowli.domain import (
    ExecutionStateError,
    ExecutionTerminalError,
    LeaseLost,
    StaleAnswer,
    StaleState,
    Task,
    UnknownExecutionError,
)
from flowli.store import Store

from ._clock import Clock
from ._wakeups import Hub

log = logging.getLogger("flowli.engine")


REFUSALS = (StaleState, LeaseLost, ExecutionStateError, UnknownExecutionError, ExecutionTerminalError, StaleAnswer)
"""The errors of a write that say it wrote nothing (a fence or a status refused it): a hand-off
in it is void. After any other error (a cancel, a broken connection, a middleware that raised
after the write) the task may be stored leased to its poll."""


def written_maybe(error: BaseException) -> bool:
    """Whether a write that raised ``error`` may have been stored all the same."""
    return not isinstance(error, REFUSALS)


@dataclass(eq=False)
class Poll:
    """One waiting ``Consumer.dequeue``: its queues, tenant, name (the lease owner) and lease."""

    queues: tuple[str, ...]
    application: str | None
    owner: str
    lease: timedelta
    handed: asyncio.Future[Task | None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    matched: bool = False
    """A writer took this poll: ``handed`` resolves with its task (None when its write failed)."""


class Polls:
    """The long polls of this process that wait for a DELEGATE task, oldest first, and the tasks
    handed to a poll that went away, being given back to their queue."""

    def __init__(self, store: Store, clock: Clock, hub: Hub) -> None:
        self._waiting: list[Poll] = []
        self._store = store
        self._clock = clock
        self._hub = hub
        self.nacking: set[asyncio.Future[Any]] = set()
        """Hand-offs whose poll went away, being given back to the queue."""

    def nack(self, task: Task, owner: str) -> None:
        """Give a task handed to a poll that went away (or whose write's outcome is not known) back
        to its queue, visible at once rather than when its lease runs out, in the background; the
        long polls of its queue are woken when it is back (a task that was never stored is not)."""
        back = asyncio.ensure_future(self._store.nack(task.id, owner, timedelta(0), self._clock.now()))
        self.nacking.add(back)

        def done(fut: asyncio.Future[Any]) -> None:
            self.nacking.discard(fut)
            if fut.cancelled():
                return
            if fut.exception() is not None:  # its lease runs out instead
                log.warning("task %s was not given back to its queue (its lease runs out instead): %s", task.id, fut.exception())
            elif fut.result():
                self._hub.touch_some(("queue", task.queue), 1)

        back.add_done_callback(done)

    @property
    def waiting(self) -> bool:
        """Whether any poll waits."""
        return bool(self._waiting)

    def wait(self, poll: Poll) -> None:
        self._waiting.append(poll)

    def leave(self, poll: Poll) -> None:
        if poll in self._waiting:
            self._waiting.remove(poll)

    def match(self, task: Task, now: datetime) -> tuple[Poll, Task] | None:
        """The oldest poll that may take ``task`` (its queue, its tenant), taken off the list,
        and the task leased to it; None when no poll waits for it."""
        for poll in self._waiting:
            if task.queue in poll.queues and (poll.application is None or poll.application == task.application) \
                    and not poll.handed.done():
                self._waiting.remove(poll)
                poll.matched = True
                return poll, replace(task, lease_owner=poll.owner, visible_at=now + poll.lease,
                                     deliveries=task.deliveries + 1)
        return None
