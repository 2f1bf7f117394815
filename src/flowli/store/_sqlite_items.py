"""The items (see Item) on SQLite: the store's own database, written by its writer thread."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from . import _items_sql as q
from ._protocol import Item

T = TypeVar("T")


class SQLiteItems:
    def __init__(self, write: Callable[[Callable[[sqlite3.Connection], Any]], Any],
                 read: Callable[[Callable[[sqlite3.Connection], Any]], Any],
                 point: Callable[[Callable[[sqlite3.Connection], Any]], Any]):
        self._w = write
        self._r = read
        self._p = point
        """A read of one row by its key (see ``SQLiteStore._p``)."""
        self._blocks = q.Blocks(self._take)

    async def put(self, kind: str, application: str, key: str, body: Any, now: datetime) -> tuple[Item, bool]:
        def run(conn: sqlite3.Connection) -> tuple[Item, bool]:
            created = conn.execute(q.PUT, (kind, application, key, q.body_text(body), now.timestamp())).rowcount > 0
            return q.item(conn.execute(q.FIND_IN, (kind, application, key)).fetchone()), created

        result: tuple[Item, bool] = await self._w(run)
        return result

    async def put_many(self, items: Sequence[tuple[str, str, str, Any]], now: datetime) -> list[tuple[Item, bool]]:
        def run(conn: sqlite3.Connection) -> list[tuple[Item, bool]]:
            out = []
            for kind, application, key, body in items:
                created = conn.execute(q.PUT, (kind, application, key, q.body_text(body), now.timestamp())).rowcount > 0
                out.append((q.item(conn.execute(q.FIND_IN, (kind, application, key)).fetchone()), created))
            return out

        result: list[tuple[Item, bool]] = await self._w(run)
        return result

    async def reserve(self, n: int) -> list[int]:
        return await self._blocks.reserve(n)

    async def _take(self, n: int) -> list[int]:
        def run(conn: sqlite3.Connection) -> list[int]:
            # the table's AUTOINCREMENT counter (never below the highest id ever used): moved on by n
            row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'items'").fetchone()
            if row is None:
                last = int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM items").fetchone()[0])
                conn.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('items', ?)", (last + n,))
            else:
                last = int(row[0])
                conn.execute("UPDATE sqlite_sequence SET seq = ? WHERE name = 'items'", (last + n,))
            return list(range(last + 1, last + n + 1))

        if n < 1:
            return []
        result: list[int] = await self._w(run)
        return result

    async def get(self, kind: str, id: int) -> Item | None:
        def run(conn: sqlite3.Connection) -> Item | None:
            row = conn.execute(q.GET, (kind, int(id))).fetchone()
            return None if row is None else q.item(row)

        result: Item | None = await self._p(run)
        return result

    async def find(self, kind: str, key: str, application: str | None = None) -> Item | None:
        def run(conn: sqlite3.Connection) -> Item | None:
            if application is None:
                row = conn.execute(q.FIND_ANY, (kind, key)).fetchone()
            else:
                row = conn.execute(q.FIND_IN, (kind, application, key)).fetchone()
            return None if row is None else q.item(row)

        result: Item | None = await self._p(run)
        return result

    async def list(self, kind: str, application: str | None, *, prefix: str | None = None,
                   newest_first: bool = False, limit: int | None = None, offset: int = 0) -> list[Item]:
        sql, params = q.listing(kind, application, prefix, newest_first, limit, offset)
        result: list[Item] = await self._r(lambda conn: [q.item(r) for r in conn.execute(sql, params).fetchall()])
        return result

    async def count(self, kind: str, application: str | None, *, prefix: str | None = None) -> int:
        sql, params = q.counting(kind, application, prefix)
        result: int = await self._r(lambda conn: int(conn.execute(sql, params).fetchone()[0]))
        return result

    async def update(self, kind: str, id: int, body: Any, now: datetime, *, expect: Any = None) -> bool:
        def run(conn: sqlite3.Connection) -> bool:
            if expect is not None:
                return conn.execute(q.UPDATE_IF, (q.body_text(body), now.timestamp(), kind, int(id),
                                                  q.body_text(expect))).rowcount > 0
            return conn.execute(q.UPDATE, (q.body_text(body), now.timestamp(), kind, int(id))).rowcount > 0

        result: bool = await self._w(run)
        return result

    async def delete(self, kind: str, id: int) -> bool:
        result: bool = await self._w(lambda conn: conn.execute(q.DELETE, (kind, int(id))).rowcount > 0)
        return result
