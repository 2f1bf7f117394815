"""Helpers for tests of workflows: a controllable clock.

    clock = Clock()
    engine = await flowli.connect("sqlite://:memory:", registry, clock=clock)
    ...
    await clock.advance(timedelta(days=3))   # the sweeper fires the timer at once
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone


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
