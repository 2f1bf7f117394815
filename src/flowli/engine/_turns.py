"""The commands of this process for each decider execution: they take turns, and each starts from
what the last one wrote.

Several children of one decider ending at once would otherwise race on the state's version and be
decided again; other processes are fenced by the version's compare-and-set. A command starts from
the record and state that this process's last write of the execution left, instead of reading
them: the stored version is read alone, and the state is decoded again only when another process
advanced it (the compare-and-set refuses a write made on a stale record).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from flowli.domain import ExecutionRecord

REMEMBERED = 10_000
"""Decider executions whose last state this process keeps at most (forgotten all at once past it)."""


class Turns:
    """Per decider execution: the lock its commands take in turn, and what the last one wrote."""

    def __init__(self) -> None:
        self._turns: dict[str, list[Any]] = {}
        """Per execution with commands being decided here: [lock, commands waiting or deciding]."""
        self._last: dict[str, tuple[ExecutionRecord, int, Any]] = {}

    def busy(self, eid: str) -> bool:
        """Whether a command of ``eid`` is being decided here now (the next one waits for it)."""
        turn = self._turns.get(eid)
        return turn is not None and turn[0].locked()

    @contextlib.asynccontextmanager
    async def turn(self, eid: str) -> AsyncIterator[None]:
        """Decide one command of ``eid`` after those before it."""
        turn = self._turns.get(eid)
        if turn is None:
            turn = self._turns[eid] = [asyncio.Lock(), 0]
        turn[1] += 1
        try:
            async with turn[0]:
                yield
        finally:
            turn[1] -= 1
            if turn[1] == 0:
                self._turns.pop(eid, None)

    def last(self, eid: str) -> tuple[ExecutionRecord, int, Any] | None:
        """The record, the state's version and the state that this process's last write of
        ``eid`` left, if it is known."""
        return self._last.get(eid)

    def remember(self, record: ExecutionRecord, version: int, state: Any) -> None:
        if len(self._last) >= REMEMBERED:
            self._last.clear()
        self._last[record.eid] = (record, version, state)

    def forget(self, eid: str) -> None:
        self._last.pop(eid, None)
