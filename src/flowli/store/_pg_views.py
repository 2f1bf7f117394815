"""The projection's tables on PostgreSQL: in the store's database and schema, persistent and shared
by every process. A process that starts finds the projectors' cursors where the last catch-up of
any process left them: it applies only the control-log entries past them.

Catch-ups of several processes serialize on the projector's cursor row (``FOR UPDATE``); each
applies the entries past the cursor it finds once it holds the lock."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import asyncpg

from flowli.domain import Entry

from ._pg_sql import dialect, drive
from ._protocol import Plan

_LOCK_KEY = 0x666C6F776C6976  # "flowliv": the advisory lock of the projectors' schema changes
_CURSORS = "CREATE TABLE IF NOT EXISTS view_cursors (name TEXT PRIMARY KEY, seq BIGINT NOT NULL, version BIGINT NOT NULL)"


class PostgresViews:
    def __init__(self, pool: Callable[[], asyncpg.Pool]):
        self._pool = pool

    async def install(self, name: str, version: int, tables: Sequence[str], schema: Sequence[str]) -> None:
        async with self._pool().acquire() as conn, conn.transaction():
            # one process changes the schema at a time (CREATE TABLE IF NOT EXISTS races otherwise)
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_KEY)
            await conn.execute(_CURSORS)
            stored = await conn.fetchval("SELECT version FROM view_cursors WHERE name = $1", name)
            if stored is not None and stored != version:
                for table in tables:
                    await conn.execute(f'DROP TABLE IF EXISTS "{table}"')
                await conn.execute("DELETE FROM view_cursors WHERE name = $1", name)
            for statement in schema:
                await conn.execute(statement)
            await conn.execute("INSERT INTO view_cursors (name, seq, version) VALUES ($1, 0, $2) ON CONFLICT DO NOTHING",
                               name, version)

    async def cursor(self, name: str) -> int:
        seq = await self._pool().fetchval("SELECT seq FROM view_cursors WHERE name = $1", name)
        return int(seq or 0)

    async def advance(self, name: str, entries: Sequence[Entry], plan: Callable[[list[Entry]], Plan]) -> int:
        async with self._pool().acquire() as conn, conn.transaction():
            cursor = await conn.fetchval("SELECT seq FROM view_cursors WHERE name = $1 FOR UPDATE", name)
            fresh = [e for e in entries if (e.seq or 0) > (cursor or 0)]  # another process applied the rest
            if fresh:
                await drive(conn, plan(fresh))
                await conn.execute("UPDATE view_cursors SET seq = $1 WHERE name = $2", fresh[-1].seq, name)
            return len(fresh)

    async def read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in await self._pool().fetch(dialect(sql), *params)]
