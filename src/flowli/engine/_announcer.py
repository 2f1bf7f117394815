"""The second append of an engine's process: the lifecycle entries of its journals go onto the
control log after their own write, off the caller's path (a crash between the two is what the
sweeper repairs; a repeat is ignored, the control log being keyed by journal seq)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from flowli.domain import Entry
from flowli.store import Announcement, Intent, Store, Write

from ._clock import Clock
from ._wakeups import LOG, Hub

log = logging.getLogger("flowli.engine")

ANNOUNCE_DELAY = 0.05
"""Seconds that lifecycle entries wait to go to the control log together (the second append)."""


class Announcer:
    """The control-log appends of one process (``soon``, ``drain``, ``announce``)."""

    def __init__(self, store: Store, clock: Clock, hub: Hub):
        self.store, self.clock, self.hub = store, clock, hub
        self.announcing: set[asyncio.Future[None]] = set()
        self._unsent: list[Entry] = []
        self._flush: asyncio.TimerHandle | None = None

    def soon(self, entries: Iterable[Entry]) -> None:
        """The second append, off the caller's path: the entries of the next ANNOUNCE_DELAY seconds
        go to the control log together, in one write queued after theirs (a store applies the
        writes of one execution in order), and the caller does not wait for its commit. A crash
        before it commits is what the sweeper repairs. ``drain`` flushes and waits."""
        entries = [e for e in entries if e.kind.lifecycle]
        if not entries:
            return
        self._unsent.extend(entries)
        if self._flush is None:
            self._flush = asyncio.get_running_loop().call_later(ANNOUNCE_DELAY, self._send_announcements)

    def _send_announcements(self) -> None:
        self._flush = None
        entries, self._unsent = self._unsent, []
        if entries:
            task = asyncio.ensure_future(self.announce(entries))
            self.announcing.add(task)
            task.add_done_callback(self._announced)

    def _announced(self, task: asyncio.Future[None]) -> None:
        self.announcing.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("control-log append failed (the sweeper repairs it): %s", task.exception())

    async def drain(self) -> None:
        """Wait until the control-log appends of this process are done."""
        if self._flush is not None:
            self._flush.cancel()
            self._send_announcements()
        while self.announcing:
            await asyncio.wait(list(self.announcing))

    async def announce(self, entries: Iterable[Entry]) -> None:
        """The second append: lifecycle journal entries onto the control log. A crash before it
        is repaired by the sweeper; a repeat is ignored (the control log is keyed by journal seq)."""
        announcements = [
            Announcement(Entry(**{**e.__dict__, "journal_seq": e.seq, "seq": None}))
            for e in entries
            if e.kind.lifecycle and e.seq is not None
        ]
        if announcements:
            await self.store.write(Write(intent=Intent.ANNOUNCE, announcements=announcements), self.clock.now())
            self.hub.touch(LOG)
