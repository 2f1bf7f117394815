"""Helpers for tests: a controllable clock, and the seams of tests that look under the engine.

    clock = Clock()
    engine = await flowli.connect("sqlite://:memory:", registry, clock=clock)
    ...
    await clock.advance(timedelta(days=3))   # the sweeper fires the timer at once

A test of a workflow needs the clock and the Engine's own reads (``status``, ``journal``,
``tasks``, ``timers``, ``control_log``, ...). A test of the engine or of a store may need more:

- :func:`open_store`: a bare store by URL, not opened (the Store protocol's conformance suite,
  a database read or written with no engine);
- :func:`store_of`: the store an engine writes through, for a test that plays another process
  (a worker that acquires a lease and dies, a write that lands late, a crash between two
  writes), or that counts, delays or fails the engine's store calls;
- :func:`drain`: wait until an engine's pending control-log appends are committed, before a
  test compares what the database holds.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flowli.engine import Engine
    from flowli.store import Store


class Clock:
    """A clock that moves only when told. Sleepers wake when it is advanced past their instant."""

    def __init__(self, start: datetime | None = None):
        self._now = start or datetime(2026, 1, 1, tzinfo=timezone.utc)
        if self._now.tzinfo is None:
            raise ValueError("Clock start must be an aware datetime")
        self._sleepers: list[tuple[datetime, asyncio.Future[None]]] = []

    def now(self) -> datetime:
        return self._now

    async def sleep_until(self, instant: datetime) -> None:
        if instant <= self._now:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((instant, fut))
        try:
            await fut
        finally:
            self._sleepers = [(t, f) for t, f in self._sleepers if f is not fut]

    async def advance(self, delta: timedelta) -> datetime:
        """Move the clock forward and wake every sleeper whose instant has come."""
        return await self.set(self._now + delta)

    async def set(self, instant: datetime) -> datetime:
        if instant < self._now:
            raise ValueError(f"the clock does not go back: {instant} is before {self._now}")
        self._now = instant
        for at, fut in list(self._sleepers):
            if at <= instant and not fut.done():
                fut.set_result(None)
        await asyncio.sleep(0)
        return self._now


def open_store(url: str) -> Store:
    """The store of a database URL (``sqlite:///path``, ``sqlite://:memory:``,
    ``postgresql://…``), not opened: ``await store.open()`` creates or upgrades its schema. For
    tests of a store itself; an application opens an engine with ``flowli.connect``."""
    from flowli._connect import open_store as by_url

    return by_url(url)


def store_of(engine: Engine) -> Store:
    """The store that ``engine`` (its workers, its sweeper, its reads) goes through. A test may
    write to it as another process would (acquire a lease as a worker that then dies, append an
    entry late, leave out the control-log append of a crashed worker), read what no Engine method
    shows (the waiters of a channel, the lifecycle entries not announced yet), or wrap one of its
    methods on the instance to count, delay or fail the engine's calls (and put it back)."""
    return engine._store


async def drain(engine: Engine) -> None:
    """Wait until the control-log appends of ``engine`` (the second append of what it committed,
    sent in bunches a moment later) are committed: then the database holds all it wrote."""
    await engine._rt.announcer.drain()
