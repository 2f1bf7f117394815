"""Every row of a flowli database, for "nothing changed" checks: a SQLite file (and its
projection, when there is one) or a PostgreSQL schema."""

from __future__ import annotations

import sqlite3
from typing import Any
from urllib.parse import unquote, urlparse


async def dump(url: str, *, control_log_seqs: bool = True) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, sorted, per table. Without ``control_log_seqs``, the control log
    is compared without its seqs (gathered writes take them in commit order). A worker's
    heartbeat (``workers.seen_at``, the last column) is left out: a live process moves it on its
    own clock, whatever else happens."""
    if url.startswith("sqlite"):
        rows = _sqlite(unquote(urlparse(url).path[1:]))
    else:
        rows = await _postgres(url)
    if "workers" in rows:
        rows["workers"] = sorted((row[:-1] for row in rows["workers"]), key=repr)
    if not control_log_seqs and "control_log" in rows:
        rows["control_log"] = sorted((row[1:] for row in rows["control_log"]), key=repr)
    return rows


def _sqlite(path: str) -> dict[str, list[tuple[Any, ...]]]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return {t: sorted(conn.execute(f'SELECT * FROM "{t}"').fetchall(), key=repr) for t in tables}
    finally:
        conn.close()


async def _postgres(url: str) -> dict[str, list[tuple[Any, ...]]]:
    import asyncpg

    base, _, schema = url.partition("?schema=")
    conn = await asyncpg.connect(base)
    try:
        tables = [r[0] for r in await conn.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY table_name", schema)]
        return {t: sorted((tuple(r) for r in await conn.fetch(f'SELECT * FROM "{schema}"."{t}"')), key=repr)
                for t in tables}
    finally:
        await conn.close()
