"""PostgreSQL helpers shared by the store's modules: the dialect of ``_apply``'s plans, the
driver of a plan on an asyncpg connection, and the payload of a notification."""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable, Sequence
from typing import Any

import asyncpg

from flowli.domain import EntryKind

from ._protocol import Announcement, Plan

CHANNEL = "flowli."
"""The prefix of the channels of flowli's notifications. Each schema has a channel of its own,
``flowli.`` and the MD5 digest of the schema's name (a channel name fits in 63 bytes; a schema's
name may not), so that stores in other schemas of one database never wake each other."""
CHANNEL_SQL = f"('{CHANNEL}' || md5(current_schema()))"
"""The channel of the schema a statement runs in (the first of the search path: the store's)."""


def channel(schema: str) -> str:
    """The channel of the stores of ``schema``, as :data:`CHANNEL_SQL` makes it in the database."""
    return CHANNEL + hashlib.md5(schema.encode()).hexdigest()

_ENDS = frozenset({EntryKind.EXECUTION_COMPLETED, EntryKind.EXECUTION_FAILED, EntryKind.EXECUTION_CANCELLED})
_PER_NOTE = 100  # eids in one "end:" note: a payload stays well under PostgreSQL's 8000 bytes


@functools.lru_cache(maxsize=512)
def dialect(sql: str) -> str:
    """``?`` placeholders to ``$n``; ``{lock}`` to ``FOR UPDATE``."""
    count = 0

    def number(_: re.Match[str]) -> str:
        nonlocal count
        count += 1
        return f"${count}"

    return re.sub(r"\?", number, sql.replace("{lock}", " FOR UPDATE"))


def rowcount(status: str) -> int:
    try:
        return int(status.rsplit(" ", 1)[-1])
    except ValueError:
        return 0


async def drive(conn: asyncpg.Connection, plan: Plan) -> Any:
    """Run a plan of ``_apply`` on this connection."""
    try:
        query = next(plan)
        while True:
            mode, sql, params = query
            sql = dialect(sql)
            if mode == "one":
                row = await conn.fetchrow(sql, *params)
                result: Any = None if row is None else tuple(row)
            elif mode == "all":
                result = [tuple(r) for r in await conn.fetch(sql, *params)]
            else:
                result = rowcount(await conn.execute(sql, *params))
            query = plan.send(result)
    except StopIteration as stop:
        return stop.value


def payload(origin: str, timers: bool) -> str:
    """A notification's payload: the writing store's origin, and ``:timer`` when the write set
    timers or enqueued a task visible later (which poke other processes' sweepers: they plan
    their wake again); a task visible now only wakes their workers."""
    return f"{origin}:timer" if timers else origin


async def notify(conn: asyncpg.Connection, origin: str, notes: Sequence[str]) -> None:
    """Send ``{origin}:{note}`` for each note (inside a transaction: at its commit)."""
    if notes:
        await conn.execute(f"SELECT pg_notify({CHANNEL_SQL}, $1 || ':' || x) FROM unnest($2::text[]) x", origin,
                           list(notes))


def log_notes(announcements: Sequence[Announcement]) -> list[str]:
    """The notes of control-log appends: "log", and "end:{eids}" for the ends among them."""
    if not announcements:
        return []
    ends = sorted({a.entry.eid for a in announcements if a.entry.kind in _ENDS})
    return ["log", *("end:" + ",".join(ends[i:i + _PER_NOTE]) for i in range(0, len(ends), _PER_NOTE))]


def journal_notes(watched: Iterable[tuple[str, float | None]], now: float) -> list[str]:
    """The notes of appends to the journals of executions watched until after ``now``."""
    return sorted({f"journal:{eid}" for eid, until in watched if until is not None and until > now})
