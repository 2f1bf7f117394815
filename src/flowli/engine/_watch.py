"""Waiting for change without polling: ``engine.watch`` (the control log, or one execution's
journal, entry by entry) and ``engine.result`` (an execution's end).

Both wait on the engine's own wake-ups: in this process the hub, which every commit touches; from
other processes the store's notifications (PostgreSQL: NOTIFY "log" for control-log appends,
"end:{eids}" for ends, "journal:{eid}" for appends to an execution being watched, which
``Store.watch`` asks for). A store that cannot notify (SQLite) leaves the other processes'
changes to a slow poll, ``Options.poll_interval``, as the workers do.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

from flowli.domain import TERMINAL, Entry, EntryKind, ExecutionRecord, belongs

from ._archive import Archive, entry_from
from ._operations import read_record
from ._runtime import LOG, Runtime

WATCH_LEASE = timedelta(seconds=60)
"""How long a watch asks other processes to notify appends to a journal; it is renewed at half."""
_PAGE = 1000


async def _wake(event: asyncio.Event, seconds: float | None) -> None:
    """Wait for ``event``, or ``seconds`` at most (None: no bound)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()


def _fallback(rt: Runtime) -> float | None:
    """The bound of a wait for another process's change: none when the store notifies."""
    return None if rt.store.notifies else rt.options.poll_interval


async def watch(
    rt: Runtime, archive: Archive, eid: str | None, after: int | None, application: str | None
) -> AsyncIterator[Entry]:
    after = after or 0
    if eid is not None:
        await read_record(rt, archive, eid, application)  # an unknown eid says so
        async for entry in _journal(rt, archive, eid, after):
            yield entry
        return
    apps: dict[str, str | None] = {}
    with rt.wakeups.hub.subscribe(LOG) as event:
        while True:
            event.clear()
            entries = await rt.store.read_control_log(after, _PAGE)
            for e in entries:
                after = e.seq or after
                if application is None or belongs(await _application_of(rt, archive, e, apps), application):
                    yield e
            if len(entries) < _PAGE:
                await _wake(event, _fallback(rt))


async def read_log(
    rt: Runtime, archive: Archive, after: int, limit: int, application: str | None
) -> list[Entry]:
    """The first ``limit`` entries of the control log past seq ``after`` (of ``application``
    only, when given: the pages are read on until ``limit`` of its entries or the log's end)."""
    if application is None:
        return await rt.store.read_control_log(after, limit)
    found: list[Entry] = []
    apps: dict[str, str | None] = {}
    while True:
        entries = await rt.store.read_control_log(after, _PAGE)
        for e in entries:
            after = e.seq or after
            if belongs(await _application_of(rt, archive, e, apps), application):
                found.append(e)
                if len(found) == limit:
                    return found
        if len(entries) < _PAGE:
            return found


async def _application_of(rt: Runtime, archive: Archive, e: Entry, known: dict[str, str | None]) -> str | None:
    if e.eid not in known:
        if e.kind is EntryKind.EXECUTION_STARTED and isinstance(e.value, dict):
            known[e.eid] = e.value.get("application")
        else:
            try:
                known[e.eid] = (await read_record(rt, archive, e.eid, None)).application
            except Exception:  # folded and gone: it is no one's to see
                known[e.eid] = "\0"
    return known[e.eid]


async def _journal(rt: Runtime, archive: Archive, eid: str, after: int) -> AsyncIterator[Entry]:
    loop = asyncio.get_running_loop()
    renew_at = 0.0
    with rt.wakeups.hub.subscribe(("journal", eid)) as event:
        while True:
            if loop.time() >= renew_at:  # other processes notify this journal's appends meanwhile
                await rt.store.watch(eid, rt.clock.now() + WATCH_LEASE)
                renew_at = loop.time() + WATCH_LEASE.total_seconds() / 2
            event.clear()
            entries = await rt.store.read_journal(eid, after)
            if not entries and after == 0 and await rt.store.read_execution(eid) is None:
                archived = await asyncio.to_thread(archive.read, eid)  # folded: its journal is all there is
                entries = [] if archived is None else [e for e in _entries(archived) if (e.seq or 0) > after]
            for e in entries:
                after = e.seq or after
                yield e
            half = WATCH_LEASE.total_seconds() / 2  # the renewal of the watch comes then at the latest
            bound = _fallback(rt)
            await _wake(event, half if bound is None else min(bound, half))


def _entries(archived: dict[str, Any]) -> list[Entry]:
    return [entry_from(e) for e in archived["journal"]]


async def await_end(
    rt: Runtime, archive: Archive, eid: str, timeout: float | None, application: str | None,
    held: Callable[[str], bool],
) -> ExecutionRecord:
    """Wait until ``eid`` is terminal. While an activation of this process holds it, its end
    touches the hub: no read until then. Else each wake-up (its end in another process, told by
    the store's notification; or the slow poll of a store that cannot tell) reads its status, and
    its record once it ended."""
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    poll = 0.01  # a store that cannot notify: polled from 10 ms, doubling up to poll_interval
    with rt.wakeups.hub.subscribe(("end", eid)) as ended:
        record = await read_record(rt, archive, eid, application)  # an unknown eid says so
        while not record.terminal:
            bound, poll = _bound(rt, poll, deadline, timeout, record)
            await _wake(ended, bound)
            touched = ended.is_set()
            if touched or not held(eid):
                ended.clear()
                # its status alone until it ends (a poll decodes no arguments, no result)
                status = await rt.store.read_status(eid)
                if status is None or status in TERMINAL:  # ended, or folded into the archive meanwhile
                    record = await read_record(rt, archive, eid, application)
                elif status is not record.status:
                    record = dataclasses.replace(record, status=status)  # what a timeout names
        return record


def _bound(
    rt: Runtime, poll: float, deadline: float | None, timeout: float | None, record: ExecutionRecord
) -> tuple[float | None, float]:
    """How long to wait for the next wake-up (None: only a wake-up ends it) and the next poll
    period: a store that cannot notify is polled from 10 ms, doubling up to poll_interval; past the
    deadline, TimeoutError naming the execution and its status."""
    bound = _fallback(rt)
    if bound is not None:
        bound, poll = min(poll, bound), min(poll * 2, bound)
    if deadline is not None:
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0:
            raise TimeoutError(f"execution {record.eid} is still {record.status.value} after {timeout} s")
        bound = left if bound is None else min(bound, left)
    return bound, poll


async def await_suspended(
    rt: Runtime, archive: Archive, eid: str, timeout: float | None, application: str | None,
    held: Callable[[str], bool],
) -> ExecutionRecord:
    """Wait until ``eid`` is suspended (its waits, timers included, are set) or terminal; woken as
    ``await_end`` is, by every append to its journal too."""
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    poll = 0.01
    with rt.wakeups.hub.subscribe(("journal", eid), ("end", eid)) as changed:
        while True:
            changed.clear()
            record = await read_record(rt, archive, eid, application)
            if record.terminal or (record.status.value == "suspended" and not held(eid)):
                return record
            bound, poll = _bound(rt, poll, deadline, timeout, record)
            await _wake(changed, bound if bound is not None else 1.0)
