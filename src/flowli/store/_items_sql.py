"""The items table's statements (see Item), in the dialect both backends accept: ``?``
placeholders (PostgreSQL's store rewrites them), ``ON CONFLICT``."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from ._protocol import Item

COLUMNS = "id, kind, application, key, body, at"
PUT = "INSERT INTO items (kind, application, key, body, at) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
FIND_IN = f"SELECT {COLUMNS} FROM items WHERE kind = ? AND application = ? AND key = ?"
FIND_ANY = f"SELECT {COLUMNS} FROM items WHERE kind = ? AND key = ? ORDER BY id LIMIT 1"
GET = f"SELECT {COLUMNS} FROM items WHERE kind = ? AND id = ?"
UPDATE = "UPDATE items SET body = ?, at = ? WHERE kind = ? AND id = ?"
UPDATE_IF = UPDATE + " AND body = ?"
DELETE = "DELETE FROM items WHERE kind = ? AND id = ?"


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
    return Item(id=int(row[0]), kind=row[1], application=row[2], key=row[3], body=json.loads(row[4]),
                at=datetime.fromtimestamp(float(row[5]), timezone.utc))
