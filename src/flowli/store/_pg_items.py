"""The items (see Item) on PostgreSQL: in the store's database and schema, shared by every process."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import asyncpg

from . import _items_sql as q
from ._pg_sql import dialect
from ._protocol import Item

_PUT = dialect(q.PUT)
_FIND_IN = dialect(q.FIND_IN)
_FIND_ANY = dialect(q.FIND_ANY)
_GET = dialect(q.GET)
_UPDATE = dialect(q.UPDATE)
_UPDATE_IF = dialect(q.UPDATE_IF)
_DELETE = dialect(q.DELETE)


def _count(status: str) -> int:
    return int(status.rsplit(" ", 1)[-1])


class PostgresItems:
    def __init__(self, pool: Callable[[], asyncpg.Pool]):
        self._pool = pool
        self._blocks = q.Blocks(self._take)

    async def put(self, kind: str, application: str, key: str, body: Any, now: datetime) -> tuple[Item, bool]:
        async with self._pool().acquire() as conn:
            created = _count(await conn.execute(_PUT, kind, application, key, q.body_text(body), now.timestamp())) > 0
            return q.item(await conn.fetchrow(_FIND_IN, kind, application, key)), created

    async def put_many(self, items: Sequence[tuple[str, str, str, Any]], now: datetime) -> list[tuple[Item, bool]]:
        out = []
        async with self._pool().acquire() as conn, conn.transaction():
            for kind, application, key, body in items:
                created = _count(await conn.execute(_PUT, kind, application, key, q.body_text(body), now.timestamp())) > 0
                out.append((q.item(await conn.fetchrow(_FIND_IN, kind, application, key)), created))
        return out

    async def reserve(self, n: int) -> list[int]:
        return await self._blocks.reserve(n)

    async def _take(self, n: int) -> list[int]:
        if n < 1:
            return []
        rows = await self._pool().fetch("SELECT nextval(pg_get_serial_sequence('items', 'id'))"
                                        " FROM generate_series(1, $1::int)", n)
        return sorted(int(r[0]) for r in rows)

    async def get(self, kind: str, id: int) -> Item | None:
        row = await self._pool().fetchrow(_GET, kind, int(id))
        return None if row is None else q.item(row)

    async def find(self, kind: str, key: str, application: str | None = None) -> Item | None:
        if application is None:
            row = await self._pool().fetchrow(_FIND_ANY, kind, key)
        else:
            row = await self._pool().fetchrow(_FIND_IN, kind, application, key)
        return None if row is None else q.item(row)

    async def list(self, kind: str, application: str | None, *, prefix: str | None = None,
                   newest_first: bool = False, limit: int | None = None, offset: int = 0) -> list[Item]:
        sql, params = q.listing(kind, application, prefix, newest_first, limit, offset)
        return [q.item(r) for r in await self._pool().fetch(dialect(sql), *params)]

    async def count(self, kind: str, application: str | None, *, prefix: str | None = None) -> int:
        sql, params = q.counting(kind, application, prefix)
        return int(await self._pool().fetchval(dialect(sql), *params))

    async def update(self, kind: str, id: int, body: Any, now: datetime, *, expect: Any = None) -> bool:
        if expect is not None:
            return _count(await self._pool().execute(_UPDATE_IF, q.body_text(body), now.timestamp(), kind, int(id),
                                                     q.body_text(expect))) > 0
        return _count(await self._pool().execute(_UPDATE, q.body_text(body), now.timestamp(), kind, int(id))) > 0

    async def delete(self, kind: str, id: int) -> bool:
        return _count(await self._pool().execute(_DELETE, kind, int(id))) > 0
