"""The projection: a local SQLite view fed from the control log. Derived state only: it can be
deleted at any time and is rebuilt from the control log."""

from __future__ import annotations

import asyncio
import builtins
import json
import sqlite3
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from flowli.domain import ENTRY_STATUS, EntryKind, Status
from flowli.store import Store, connect_wal

_VERSION = 2
"""The layout of the projection's tables; a file of another layout is rebuilt."""
_SCHEMA = """
CREATE TABLE IF NOT EXISTS cursor (id INTEGER PRIMARY KEY CHECK (id = 1), seq INTEGER NOT NULL);
INSERT OR IGNORE INTO cursor (id, seq) VALUES (1, 0);
CREATE TABLE IF NOT EXISTS executions (
    eid TEXT PRIMARY KEY, workflow TEXT, version TEXT, status TEXT, parent_eid TEXT,
    created_at REAL, updated_at REAL, last_seq INTEGER
);
CREATE INDEX IF NOT EXISTS executions_status ON executions (status, created_at);
CREATE INDEX IF NOT EXISTS executions_workflow ON executions (workflow, created_at);
CREATE TABLE IF NOT EXISTS announcements (
    seq INTEGER PRIMARY KEY, eid TEXT, kind TEXT, data TEXT, at REAL
);
CREATE TABLE IF NOT EXISTS reviews (
    eid TEXT, frame TEXT, subject TEXT, data TEXT, queue TEXT, opened_at REAL,
    closed_at REAL, answer TEXT, PRIMARY KEY (eid, frame)
);
CREATE INDEX IF NOT EXISTS reviews_open ON reviews (opened_at) WHERE closed_at IS NULL;
"""


@dataclass(frozen=True)
class ExecutionSummary:
    """One row of :meth:`Engine.list`."""

    eid: str
    workflow: str
    version: str
    status: Status
    created_at: datetime
    updated_at: datetime
    parent_eid: str | None = None


@dataclass(frozen=True)
class Review:
    """One row of the review inbox."""

    eid: str
    frame: str
    """The frame id of the review's delegate frame in its execution."""
    subject: str
    data: Any
    queue: str
    opened_at: datetime
    closed_at: datetime | None = None
    answer: Any = None


class Projection:
    def __init__(self, path: str, store: Store):
        self.path = path
        self.store = store
        self._lock = asyncio.Lock()
        self._db_lock = threading.Lock()
        # derived state: a lost tail is rebuilt from the control log, so no fsync per apply
        self._conn = connect_wal(path, synchronous="OFF")
        if self._conn.execute("PRAGMA user_version").fetchone()[0] != _VERSION:
            # a projection of an earlier layout: derived state, rebuilt from the control log
            for (table,) in self._conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
                self._conn.execute(f'DROP TABLE IF EXISTS "{table}"')
            self._conn.execute(f"PRAGMA user_version = {_VERSION}")
        self._conn.executescript(_SCHEMA)

    def close(self) -> None:
        self._conn.close()

    async def catch_up(self) -> int:
        """Apply the control-log entries past the cursor; returns how many."""
        applied = 0
        async with self._lock:
            while True:
                cursor = await asyncio.to_thread(self._cursor)
                entries = await self.store.read_control_log(cursor, 1000)
                if not entries:
                    return applied
                await asyncio.to_thread(self._apply, entries)
                applied += len(entries)

    def _cursor(self) -> int:
        with self._db_lock:
            return int(self._conn.execute("SELECT seq FROM cursor").fetchone()[0])

    def _apply(self, entries: list[Any]) -> None:
        with self._db_lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                start = conn.execute("SELECT seq FROM cursor").fetchone()[0]
                for e in entries:
                    if e.seq <= start:
                        continue  # another process applied it
                    at = e.provenance.at.timestamp()
                    if e.kind is EntryKind.EXECUTION_STARTED:
                        v = e.value or {}
                        conn.execute(
                            "INSERT OR IGNORE INTO executions VALUES (?,?,?,?,?,?,?,?)",
                            (e.eid, v.get("workflow"), v.get("version"), Status.PENDING.value, v.get("parent_eid"), at, at, e.journal_seq or 0),
                        )
                    elif e.kind in ENTRY_STATUS:
                        conn.execute(
                            "UPDATE executions SET status = ?, updated_at = ?, last_seq = ? WHERE eid = ? AND last_seq < ?",
                            (ENTRY_STATUS[e.kind].value, at, e.journal_seq or 0, e.eid, e.journal_seq or 0),
                        )
                    elif e.kind is EntryKind.EXECUTION_MIGRATED:
                        conn.execute("UPDATE executions SET version = ? WHERE eid = ?", ((e.value or {}).get("to"), e.eid))
                    elif e.kind is EntryKind.ANNOUNCED:
                        v = e.value or {}
                        conn.execute(
                            "INSERT OR IGNORE INTO announcements VALUES (?,?,?,?,?)",
                            (e.seq, e.eid, v.get("kind"), json.dumps(v.get("data")), at),
                        )
                        self._apply_review(conn, e.eid, v.get("kind"), v.get("data") or {}, at)
                    if e.kind in (EntryKind.EXECUTION_COMPLETED, EntryKind.EXECUTION_FAILED, EntryKind.EXECUTION_CANCELLED):
                        conn.execute(
                            "UPDATE reviews SET closed_at = ? WHERE eid = ? AND closed_at IS NULL", (at, e.eid)
                        )
                conn.execute("UPDATE cursor SET seq = MAX(seq, ?)", (entries[-1].seq,))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    @staticmethod
    def _apply_review(conn: sqlite3.Connection, eid: str, kind: Any, data: dict[str, Any], at: float) -> None:
        """The review inbox, from the announcements of ``flowli.patterns.review``."""
        if kind == "review.opened":
            conn.execute(
                "INSERT OR IGNORE INTO reviews (eid, frame, subject, data, queue, opened_at) VALUES (?,?,?,?,?,?)",
                (eid, data.get("frame"), data.get("subject"), json.dumps(data.get("data")), data.get("queue"), at),
            )
        elif kind == "review.closed":
            conn.execute(
                "UPDATE reviews SET closed_at = ?, answer = ? WHERE eid = ? AND frame = ?",
                (at, json.dumps(data.get("answer")), eid, data.get("frame")),
            )

    async def reviews(self, open_only: bool = True, limit: int = 100) -> builtins.list[Review]:
        await self.catch_up()

        def run() -> builtins.list[Review]:
            with self._db_lock:
                rows = self._conn.execute(
                    "SELECT eid, frame, subject, data, queue, opened_at, closed_at, answer FROM reviews"
                    " WHERE (? = 0 OR closed_at IS NULL) ORDER BY opened_at LIMIT ?",
                    (1 if open_only else 0, limit),
                ).fetchall()
            return [
                Review(
                    eid=r[0], frame=r[1], subject=r[2], data=json.loads(r[3]) if r[3] else None, queue=r[4],
                    opened_at=datetime.fromtimestamp(r[5], timezone.utc),
                    closed_at=datetime.fromtimestamp(r[6], timezone.utc) if r[6] is not None else None,
                    answer=json.loads(r[7]) if r[7] else None,
                )
                for r in rows
            ]

        return await asyncio.to_thread(run)

    async def list(
        self, status: Status | str | None = None, workflow: str | None = None, limit: int = 100
    ) -> list[ExecutionSummary]:
        await self.catch_up()
        st = Status(status).value if status is not None else None

        def run() -> list[ExecutionSummary]:
            with self._db_lock:
                rows = self._conn.execute(
                    "SELECT eid, workflow, version, status, created_at, updated_at, parent_eid FROM executions"
                    " WHERE (? IS NULL OR status = ?) AND (? IS NULL OR workflow = ?)"
                    " ORDER BY created_at DESC, eid DESC LIMIT ?",
                    (st, st, workflow, workflow, limit),
                ).fetchall()
            return [
                ExecutionSummary(
                    eid=r[0], workflow=r[1], version=r[2], status=Status(r[3]),
                    created_at=datetime.fromtimestamp(r[4], timezone.utc),
                    updated_at=datetime.fromtimestamp(r[5], timezone.utc), parent_eid=r[6],
                )
                for r in rows
            ]

        return await asyncio.to_thread(run)
