"""Opening a SQLite file that other processes may open at the same moment."""

from __future__ import annotations

import sqlite3
import time


def connect_wal(path: str, *, synchronous: str) -> sqlite3.Connection:
    """A connection to ``path`` in WAL mode, with a 30 s busy timeout and ``synchronous`` set.

    Switching a new file to WAL takes an exclusive lock, and SQLite answers SQLITE_BUSY at once
    to a second process doing the same (its busy timeout does not cover that switch): two
    processes that open one new file together, a worker and a CLI command for instance, would see
    "database is locked". So the mode is read first (a file in WAL mode already needs no switch)
    and the switch retried."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
    conn.execute("PRAGMA busy_timeout = 30000")
    if path != ":memory:":
        for attempt in range(100):
            try:
                if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    conn.execute("PRAGMA journal_mode = WAL")
                break
            except sqlite3.OperationalError as exc:
                if getattr(exc, "sqlite_errorname", "") != "SQLITE_BUSY" or attempt == 99:
                    raise
                time.sleep(0.05)
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    return conn
