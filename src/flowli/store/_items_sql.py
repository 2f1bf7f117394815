"""The items table's statements (see Item), in the dialect both backends accept: ``?``
placeholders (PostgreSQL's store rewrites them), ``ON CONFLICT``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from typing import Any

from flowli.domain import loads

from ._protocol import Item

COLUMNS = "id, kind, application, key, body, at"
PUT = "INSERT INTO items (kind, application, key, body, at) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
FIND_IN = f"SELECT {COLUMNS} FROM items WHERE kind = ? AND application = ? AND key = ?"
FIND_ANY = f"SELECT {COLUMNS} FROM items WHERE kind = ? AND key = ? ORDER BY id LIMIT 1"
GET = f"SELECT {COLUMNS} FROM items WHERE kind = ? AND id = ?"
UPDATE = "UPDATE items SET body = ?, at = ? WHERE kind = ? AND id = ?"
UPDATE_IF = UPDATE + " AND body = ?"
DELETE = "DELETE FROM items WHERE kind = ? AND id = ?"


BLOCK = 64
"""Ids a process takes from the items' sequence at a time (see ``Blocks``)."""


class Blocks:
    """``Items.reserve`` in blocks: the ids of the items' sequence taken ``BLOCK`` at a time by
    one store write and handed out from memory, so that a pipeline's creation costs no write of
    its own for its numbers. What a process took and did not hand out when it ends is a gap in the
    numbering, as with a sequence's cache; ids handed out by one process rise."""

    def __init__(self, take: Callable[[int], Awaitable[list[int]]]):
        self._take = take
        self._free: list[int] = []
        self._lock = asyncio.Lock()

    async def reserve(self, n: int) -> list[int]:
        if n < 1:
            return []
        async with self._lock:
            if len(self._free) < n:
                self._free += await self._take(max(BLOCK, n - len(self._free)))
            out, self._free = self._free[:n], self._free[n:]
        return out


def where(kind: str, application: str | None, prefix: str | None) -> tuple[str, list[Any]]:
    sql, params = "kind = ?", [kind]
    if application is not None:
        sql += " AND application = ?"
        params.append(application)
    if prefix is not None:
        sql += " AND key >= ? AND key < ?"
        params += [prefix, prefix + "\U0010ffff"]
    return sql, params


def listing(kind: str, application: str | None, prefix: str | None, newest_first: bool, limit: int | None,
            offset: int) -> tuple[str, list[Any]]:
    cond, params = where(kind, application, prefix)
    sql = f"SELECT {COLUMNS} FROM items WHERE {cond} ORDER BY id {'DESC' if newest_first else 'ASC'}"
    if limit is not None or offset:
        sql += " LIMIT ? OFFSET ?"
        params += [int(limit if limit is not None else 1 << 62), int(offset)]
    return sql, params


def counting(kind: str, application: str | None, prefix: str | None) -> tuple[str, list[Any]]:
    cond, params = where(kind, application, prefix)
    return f"SELECT COUNT(*) FROM items WHERE {cond}", params


def body_text(body: Any) -> str:
    return json.dumps(body, separators=(",", ":"), sort_keys=True)


def item(row: Any) -> Item:
    return Item(id=int(row[0]), kind=row[1], application=row[2], key=row[3], body=loads(row[4]),
                at=datetime.fromtimestamp(float(row[5]), timezone.utc))
