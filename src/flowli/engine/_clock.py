"""Time, injected: the engine reads the clock only through this protocol."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current instant, an aware UTC datetime."""

    async def sleep_until(self, instant: datetime) -> None:
        """Return at ``instant`` or soon after."""


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(timezone.utc)

    async def sleep_until(self, instant: datetime) -> None:
        delay = (instant - self.now()).total_seconds()
        if delay > 0:
            await asyncio.sleep(delay)
