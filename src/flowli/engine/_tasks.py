"""Stopping side tasks without swallowing our own cancellation."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any


async def cancel_and_wait(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Cancel ``tasks`` and wait until they end, retrieving their exceptions.

    Not ``with suppress(BaseException): await t``: that also swallows a cancellation of the
    task that waits, which then runs on as if never cancelled. ``asyncio.wait`` never raises
    the children's errors, and raises CancelledError when the waiting task itself is cancelled.
    """
    pending = [t for t in tasks if not t.done()]
    for t in pending:
        t.cancel()
    if pending:
        await asyncio.wait(pending)
    for t in tasks:
        if t.done() and not t.cancelled():
            t.exception()
