"""The wake-ups of one engine's process: who waits for a change (a worker for work, the sweeper
for a timer, ``engine.result`` and ``engine.watch`` for an execution or the control log) is woken
by what committed the change here, or by another process's notification (PostgreSQL). No
polling, no store read to learn that nothing changed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from datetime import datetime

WORK = ("work",)
"""The hub's key of "a task may be visible now" from elsewhere (another process, a delayed task
whose instant came); ``("queue", name)`` is a task enqueued on one queue by this process."""
LOG = ("log",)
"""The hub's key of the control log; ``("journal", eid)`` and ``("end", eid)`` are an execution's."""


class Hub:
    """In-process wake-ups: who waits for a change subscribes an event under a key; whatever
    commits the change touches the key. No polling, no store read to learn that nothing changed."""

    def __init__(self) -> None:
        self._events: dict[tuple[str, ...], set[asyncio.Event]] = {}

    @contextlib.contextmanager
    def subscribe(self, *keys: tuple[str, ...]) -> Iterator[asyncio.Event]:
        event = asyncio.Event()
        for key in keys:
            self._events.setdefault(key, set()).add(event)
        try:
            yield event
        finally:
            for key in keys:
                waiting = self._events.get(key)
                if waiting is not None:
                    waiting.discard(event)
                    if not waiting:
                        del self._events[key]

    @property
    def active(self) -> bool:
        """Whether anyone waits (the hot path skips its touches otherwise)."""
        return bool(self._events)

    def touch(self, key: tuple[str, ...]) -> None:
        for event in self._events.get(key, ()):
            event.set()

    def touch_some(self, key: tuple[str, ...], n: int) -> None:
        """Wake up to ``n`` of those who wait under ``key`` (n tasks were enqueued: one consumer
        each, not a herd that all race for them)."""
        for event in self._events.get(key, ()):
            if n <= 0:
                return
            if not event.is_set():
                event.set()
                n -= 1

    def touch_all(self) -> None:
        for waiting in self._events.values():
            for event in waiting:
                event.set()


class Wakeups:
    """The events of one process: ``work`` (a task may be visible now), ``timers`` (the sweeper
    plans its wake again), ``planned_wake`` (when it wakes next) and the ``hub`` of every other
    key; ``notified`` is the store's notification callback."""

    def __init__(self) -> None:
        self.work = asyncio.Event()
        """Set when a task may be visible now: this process enqueued one, another one notified
        (PostgreSQL), or the sweeper's planned instant came (a delayed task)."""
        self.timers = asyncio.Event()
        """Set when this process set a timer or a delayed task due before the sweeper's next wake,
        or another process notified a timer: the sweeper plans its wake again."""
        self.planned_wake: datetime | None = None
        """When the sweeper of this process wakes next; None while it sweeps."""
        self.hub = Hub()
        """The in-process wake-ups of those who wait for a change (``engine.result``, ``engine.watch``)."""

    def notified(self, what: str) -> None:
        """Another process enqueued a task ("work"), set a timer ("timer"), appended to the control
        log ("log"), ended executions ("end:{eid},{eid}..."), or appended to the journal of a watched
        execution ("journal:{eid}"). "timer" is also what a backend says when it may have missed
        notifications: then everyone looks again."""
        if what == "work" or what == "timer":
            self.work.set()
            self.hub.touch(WORK)
            if what == "timer":
                self.timers.set()
                self.hub.touch_all()
        elif what == "log":
            self.hub.touch(LOG)
        elif what.startswith("end:"):
            for eid in what[4:].split(","):
                self.hub.touch(("end", eid))
        elif what.startswith("journal:"):
            self.hub.touch(("journal", what[8:]))

    def timer_set(self, at: datetime) -> None:
        """A timer was set for ``at``, or a task enqueued that becomes visible then: poke the sweeper if it
        would wake later than that."""
        if self.planned_wake is None or at < self.planned_wake:
            self.timers.set()

    def ended(self, eid: str) -> None:
        self.hub.touch(("end", eid))
