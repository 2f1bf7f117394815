"""The projection's tables on SQLite: a file of their own beside the database (``{db}-projection``),
or an in-memory database beside an in-memory store. Derived state, so no fsync per apply
(``synchronous=OFF``): a lost tail is applied again from the control log, and the file may be
deleted at any time. Several processes may share it: ``BEGIN IMMEDIATE`` serializes their
catch-ups, and each skips the entries another one applied already."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from flowli.domain import Entry

from ._protocol import Plan
from ._sqlite_file import Thread, connect_wal, drive

_CURSORS = "CREATE TABLE IF NOT EXISTS view_cursors (name TEXT PRIMARY KEY, seq BIGINT NOT NULL, version BIGINT NOT NULL)"


class SQLiteViews:
    def __init__(self, path: str):
        self.path = path
        self._thread: Thread | None = None
        self._opening = asyncio.Lock()

    async def _run(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        if self._thread is None:
            async with self._opening:
                if self._thread is None:
                    conn = await asyncio.to_thread(connect_wal, self.path, synchronous="OFF")
                    conn.execute(_CURSORS)
                    self._thread = Thread(conn, "flowli-sqlite-views", transactional=False)
        return await self._thread.submit(fn)

    async def close(self) -> None:
        if self._thread is not None:
            await asyncio.to_thread(self._thread.stop)
            self._thread = None

    async def install(self, name: str, version: int, tables: Sequence[str], schema: Sequence[str]) -> None:
        def run(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute("SELECT version FROM view_cursors WHERE name = ?", (name,)).fetchone()
                if row is not None and row[0] != version:
                    for table in tables:
                        conn.execute(f'DROP TABLE IF EXISTS "{table}"')
                    conn.execute("DELETE FROM view_cursors WHERE name = ?", (name,))
                for statement in schema:
                    conn.execute(statement)
                conn.execute("INSERT INTO view_cursors (name, seq, version) VALUES (?, 0, ?) ON CONFLICT DO NOTHING",
                             (name, version))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

        await self._run(run)

    async def cursor(self, name: str) -> int:
        def run(conn: sqlite3.Connection) -> int:
            row = conn.execute("SELECT seq FROM view_cursors WHERE name = ?", (name,)).fetchone()
            return int(row[0]) if row else 0

        return int(await self._run(run))

    async def advance(self, name: str, entries: Sequence[Entry], plan: Callable[[list[Entry]], Plan]) -> int:
        def run(conn: sqlite3.Connection) -> int:
            conn.execute("BEGIN IMMEDIATE")
            try:
                (cursor,) = conn.execute("SELECT seq FROM view_cursors WHERE name = ?", (name,)).fetchone()
                fresh = [e for e in entries if (e.seq or 0) > cursor]  # another process applied the rest
                if fresh:
                    drive(conn, plan(fresh))
                    conn.execute("UPDATE view_cursors SET seq = ? WHERE name = ?", (fresh[-1].seq, name))
                conn.execute("COMMIT")
                return len(fresh)
            except BaseException:
                conn.execute("ROLLBACK")
                raise

        return int(await self._run(run))

    async def read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return await self._run(lambda conn: [tuple(r) for r in conn.execute(sql, tuple(params)).fetchall()])  # type: ignore[no-any-return]
