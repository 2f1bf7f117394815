"""Hand-offs: a DELEGATE task enqueued while a consumer of this process long-polls its queue is
written leased to that consumer and handed to its poll, which then returns it without a
dequeue (no second write, no wake-up and store read in between). The task is in the store as
any leased task: if the consumer goes away, its lease expires as after a dequeue."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from flowli.domain import Task
from flowli.store import Store

from ._clock import Clock

log = logging.getLogger("flowli.engine")


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

    def __init__(self, store: Store, clock: Clock) -> None:
        self._waiting: list[Poll] = []
        self._store = store
        self._clock = clock
        self.nacking: set[asyncio.Future[Any]] = set()
        """Hand-offs whose poll went away, being given back to the queue."""

    def nack(self, task: Task, owner: str) -> None:
        """Give a task handed to a poll that went away back to its queue, visible at once rather
        than when its lease runs out, in the background."""
        back = asyncio.ensure_future(self._store.nack(task.id, owner, timedelta(0), self._clock.now()))
        self.nacking.add(back)

        def done(fut: asyncio.Future[Any]) -> None:
            self.nacking.discard(fut)
            if not fut.cancelled() and fut.exception() is not None:  # its lease runs out instead
                log.warning("a task handed to a poll that went away was not given back: %s", fut.exception())

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
