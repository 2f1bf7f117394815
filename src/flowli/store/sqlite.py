"""The embedded SQLite store: one file, WAL mode, durable commits (``synchronous=FULL``).

Writes go through one writer thread that applies every write waiting in its queue in one
transaction, each inside a savepoint of its own (group commit): many concurrent executions
share one commit and one fsync, and a refused write (a lost fence) rolls back alone. Reads go
through a second connection on a reader thread, which WAL lets run beside the writer.
Several processes may share one file: ``BEGIN IMMEDIATE`` with a busy timeout serializes them.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import weakref
from datetime import datetime, timedelta
from importlib import resources
from typing import Any, Callable, Mapping, Sequence, TypeVar
from urllib.parse import unquote, urlparse

from flowli.domain import (
    Entry,
    ExecutionRecord,
    InvalidDatabaseURL,
    Message,
    Task,
    TaskKind,
)

from . import _codec as c
from . import _states_sql as states
from ._apply import apply_write, stale_hold
from ._protocol import Acquired, Renewal, StoredState, Write, WriteResult
from ._reads import EXECUTION, JOURNAL, TASK, R, SharedReads
from ._sqlite_file import Thread, connect_wal, drive
from ._sqlite_items import SQLiteItems
from ._sqlite_views import SQLiteViews

T = TypeVar("T")


def parse_url(url: str) -> str:
    """The path of a ``sqlite:///path`` URL, or ``:memory:`` for ``sqlite://:memory:``."""
    parsed = urlparse(url)
    if parsed.scheme != "sqlite":
        raise InvalidDatabaseURL(url, "a SQLite URL starts with sqlite:///")
    if parsed.netloc == ":memory:" or url in ("sqlite://", "sqlite:///:memory:"):
        return ":memory:"
    if parsed.netloc:
        raise InvalidDatabaseURL(
            url, f"unexpected host {parsed.netloc!r}; write sqlite:///relative.db or sqlite:////abs/path.db"
        )
    path = unquote(parsed.path[1:] if parsed.path.startswith("/") else parsed.path)
    if not path:
        raise InvalidDatabaseURL(url, "no file path; write sqlite:///flowli.db")
    return path


def _migrations() -> list[tuple[int, str]]:
    folder = resources.files("flowli.store") / "sql" / "sqlite"
    found = []
    for item in folder.iterdir():
        name = item.name
        if name.endswith(".sql"):
            found.append((int(name.split("_", 1)[0]), item.read_text()))
    return sorted(found)


def _statements(script: str) -> list[str]:
    """The statements of a migration, in order: split at each ``;`` that ends a line and ends a
    whole statement (a trigger's body holds several of its own)."""
    out, pending = [], ""
    for part in script.split(";\n"):
        pending += part + ";\n"
        if sqlite3.complete_statement(pending):
            if pending.strip(" ;\n"):
                out.append(pending.strip())
            pending = ""
    if pending.strip(" ;\n"):
        out.append(pending.strip())
    return out


def _connect(path: str) -> sqlite3.Connection:
    # FULL: a commit reported done survives a power cut, in WAL mode too.
    return connect_wal(path, synchronous="FULL")


def _journal(conn: sqlite3.Connection, eid: str, after: int = 0) -> list[Entry]:
    return [c.entry_record(r) for r in conn.execute(JOURNAL, (eid, after))]


def _execution(conn: sqlite3.Connection, eid: str) -> ExecutionRecord | None:
    row = conn.execute(EXECUTION, (eid,)).fetchone()
    return None if row is None else c.execution_record(row)


# acquire in one statement: the epoch increases by one, only if no live worker holds the lease
_ACQUIRE = (
    "UPDATE executions SET lease_owner = ?, lease_epoch = lease_epoch + 1, lease_expires_at = ?,"
    " status = 'running', updated_at = ? WHERE eid = ? AND status NOT IN ('completed', 'failed', 'cancelled')"
    " AND (lease_owner IS NULL OR lease_expires_at IS NULL OR lease_expires_at <= ?) RETURNING "
)


def _acquire(conn: sqlite3.Connection, eid: str, owner: str, ttl: timedelta, now: datetime, ack: str | None,
             after: int = 0) -> Acquired:
    """Ack ``ack``, then take the lease of ``eid`` if it is free: the record at its new epoch and
    the journal after seq ``after``, or Acquired(None, None, [])."""
    if ack is not None:
        conn.execute("UPDATE tasks SET state = 'acked', lease_owner = NULL WHERE id = ?", (ack,))
    row = conn.execute(_ACQUIRE + c.EXECUTION_COLUMNS,
                       (owner, (now + ttl).timestamp(), now.timestamp(), eid, now.timestamp())).fetchone()
    if row is None:
        return Acquired(None, None, [])
    record = c.execution_record(row)
    return Acquired(record, record.lease_epoch, _journal(conn, eid, after), after)


def _task(conn: sqlite3.Connection, task_id: str) -> Task | None:
    row = conn.execute(TASK, (task_id,)).fetchone()
    return None if row is None else c.task_record(row)


def _chain(source: asyncio.Future[T], target: asyncio.Future[T]) -> None:
    """Settle ``target`` as ``source`` settles (at once when it has)."""

    def settle(done: asyncio.Future[T]) -> None:
        if target.done():
            return
        if done.cancelled():
            target.cancel()
        elif done.exception() is not None:
            target.set_exception(done.exception())  # type: ignore[arg-type]
        else:
            target.set_result(done.result())

    if source.done():
        settle(source)
    else:
        source.add_done_callback(settle)


class SQLiteStore(SharedReads):
    """The Store protocol on one SQLite file."""

    notifies = False
    announces_in_write = True  # one writer: the control log's counter moves in commit order
    LABELLED = True

    def __init__(self, url: str):
        self.url = url
        self.path = parse_url(url)
        self._writer: Thread | None = None
        self._reader: Thread | None = None
        self._views = SQLiteViews(":memory:" if self.path == ":memory:" else f"{self.path}-projection")
        self._items = SQLiteItems(self._w, self._r, self._p)
        self._local = threading.local()
        self._inline: list[sqlite3.Connection] = []
        self._last_write: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Future[Any]] = \
            weakref.WeakKeyDictionary()
        """Each event loop's newest write: the writer answers a loop's writes in the order they came."""
        """The writes submitted and not answered yet (see ``_p``)."""

    async def open(self) -> None:
        try:
            writer_conn = await asyncio.to_thread(_connect, self.path)
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorname", "") != "SQLITE_CANTOPEN":
                raise
            raise InvalidDatabaseURL(self.url, f"cannot open the file {self.path!r}: {exc}") from None
        self._writer = Thread(writer_conn, "flowli-sqlite-writer", transactional=True)
        await self._writer.submit(self._migrate)
        if self.path == ":memory:":
            self._reader = self._writer  # one connection holds the database
        else:
            reader_conn = await asyncio.to_thread(_connect, self.path)
            self._reader = Thread(reader_conn, "flowli-sqlite-reader", transactional=False)

    @staticmethod
    def _migrate(conn: sqlite3.Connection) -> int:
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
        current = row[0] or 0
        for version, sql in _migrations():
            if version > current:
                for statement in _statements(sql):
                    conn.execute(statement)
                conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
                current = version
        return int(current)

    async def register_worker(
        self, worker_id: str, kind: str, queues: Sequence[str], now: datetime,
        workflows: dict[str, list[str]] | None = None,
    ) -> None:
        def run(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO workers (id, kind, queues, workflows, started_at, seen_at) VALUES (?,?,?,?,?,?)"
                         " ON CONFLICT (id) DO UPDATE SET seen_at = excluded.seen_at, queues = excluded.queues,"
                         " workflows = excluded.workflows",
                         (worker_id, kind, c.js(list(queues)), c.js(workflows), now.timestamp(), now.timestamp()))

        await self._w(run)

    def views(self) -> SQLiteViews:
        """The projection: a file beside the database (``{path}-projection``), derived state."""
        return self._views

    def items(self) -> SQLiteItems:
        """The items: a table of the database itself."""
        return self._items

    async def watch(self, eid: str, until: datetime) -> None:
        """SQLite has no notifications: a watcher in another process finds appends by its poll."""

    async def close(self) -> None:
        await self._views.close()
        for conn in self._inline:
            conn.close()
        self._inline.clear()
        self._local = threading.local()
        if self._reader is not None and self._reader is not self._writer:
            await asyncio.to_thread(self._reader.stop)
        if self._writer is not None:
            await asyncio.to_thread(self._writer.stop)
        self._reader = self._writer = None

    def _w(self, fn: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        if self._writer is None:
            raise RuntimeError(f"store {self.url} is not open")
        fut = self._writer.submit(fn)
        self._last_write[fut.get_loop()] = fut
        return fut

    async def _rows(self, sql: str, params: Sequence[Any], record: Callable[[Any], R], *,
                    point: bool = False) -> list[R]:
        def run(conn: sqlite3.Connection) -> list[R]:  # decoded where read: on the reader thread
            return [record(r) for r in conn.execute(sql, params)]

        return await (self._p(run) if point else self._r(run))

    async def _read_all(self, reading: states.Reading) -> tuple[list[StoredState], int]:
        # all of its statements in one job of the reader thread: a hop there and back costs more
        # than a page's statements, and the rows are decoded there too
        return await self._r(lambda conn: states.drive(reading, lambda sql, ps: conn.execute(sql, ps).fetchall()))

    def _r(self, fn: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        if self._reader is None:
            raise RuntimeError(f"store {self.url} is not open")
        return self._reader.submit(fn)

    def _p(self, fn: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        """A point read (one row by its key), run at once on the calling thread's own connection:
        it costs a few microseconds where a hop to the reader thread and back costs some 80 of
        CPU. A read that would wait for a lock (SQLITE_BUSY: a WAL reader seldom does) goes to the
        reader thread instead of holding up the event loop.

        A read made while writes of this event loop are out waits for them to be answered first:
        the inline connection sees a commit as soon as the writer thread made it, before its
        caller (the engine) has taken the answer and done what follows it (wake-ups, the
        control log, observers), and a caller that saw the commit would take those as done."""
        if self._reader is None:
            raise RuntimeError(f"store {self.url} is not open")
        if self.path == ":memory:":
            return self._r(fn)  # one connection holds an in-memory database
        loop = asyncio.get_running_loop()
        last = self._last_write.get(loop)
        if last is None or last.done():
            return self._inline_read(fn)
        # after the newest of them is answered: the writer answers a loop's writes in the order
        # they came, and a future's callbacks run in the order they were added, so every caller
        # of those writes resumes (and runs up to its next await) before this read is made
        fut: asyncio.Future[T] = loop.create_future()

        def read() -> None:
            if not fut.cancelled():
                _chain(self._inline_read(fn), fut)

        last.add_done_callback(lambda _: loop.call_soon(read))
        return fut

    def _inline_read(self, fn: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=0)
            conn.execute("PRAGMA query_only = 1")
            self._local.conn = conn
            self._inline.append(conn)
        fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        try:
            fut.set_result(fn(conn))
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorname", "") not in ("SQLITE_BUSY", "SQLITE_LOCKED"):
                fut.set_exception(exc)
            else:
                return self._r(fn)
        except Exception as exc:  # noqa: BLE001 - delivered to the caller, as the reader thread does
            fut.set_exception(exc)
        return fut

    async def write(self, write: Write, now: datetime) -> WriteResult:
        return await self._w(lambda conn: drive(conn, apply_write(write, now, in_write=True)))

    async def acquire(
        self, eid: str, owner: str, ttl: timedelta, now: datetime, ack: str | None = None
    ) -> Acquired:
        def run(conn: sqlite3.Connection) -> Acquired:
            acquired = _acquire(conn, eid, owner, ttl, now, ack)
            if acquired.epoch is None:  # terminal, unknown, or leased by a live worker
                return Acquired(_execution(conn, eid), None, [])
            return acquired

        return await self._w(run)

    async def acquire_many(
        self, wanted: Sequence[tuple[str, str]], owner: str, ttl: timedelta, now: datetime,
        after: Mapping[str, int] | None = None,
    ) -> list[Acquired]:
        after = after or {}
        return await self._w(lambda conn: [_acquire(conn, eid, owner, ttl, now, ack, after.get(eid, 0))
                                           for eid, ack in wanted])

    async def renew(
        self, owner: str, leases: Sequence[tuple[str, int]], ttl: timedelta, now: datetime
    ) -> Renewal:
        until = (now + ttl).timestamp()

        def run(conn: sqlite3.Connection) -> Renewal:
            lost, cancel = [], []
            for eid, epoch in leases:
                # an expired lease is not renewed: the sweeper may have handed it on already
                row = conn.execute(
                    "UPDATE executions SET lease_expires_at = ? WHERE eid = ? AND lease_owner = ? AND lease_epoch = ?"
                    " AND lease_expires_at > ? RETURNING cancel_requested IS NOT NULL",
                    (until, eid, owner, epoch, now.timestamp()),
                ).fetchone()
                if row is None:
                    lost.append(eid)
                elif row[0]:
                    cancel.append(eid)
            return Renewal(lost, cancel)

        return await self._w(run)

    async def dequeue(
        self,
        queues: Sequence[str],
        kinds: Sequence[TaskKind],
        owner: str,
        limit: int,
        ttl: timedelta,
        now: datetime,
    ) -> list[Task]:
        qs = ",".join("?" * len(queues))
        ks = ",".join("?" * len(kinds))
        t = now.timestamp()

        def run(conn: sqlite3.Connection) -> list[Task]:
            rows = conn.execute(
                f"UPDATE tasks SET lease_owner = ?, visible_at = ?, deliveries = deliveries + 1"
                f" WHERE id IN (SELECT id FROM tasks WHERE state = 'ready' AND queue IN ({qs})"
                f" AND kind IN ({ks}) AND visible_at <= ? AND (frame IS NULL OR lease_owner IS NULL)"
                f" ORDER BY visible_at LIMIT ?)"
                f" RETURNING {c.TASK_READ}",
                (owner, t + ttl.total_seconds(), *queues, *[k.value for k in kinds], t, limit),
            ).fetchall()
            return [c.task_record(r) for r in rows]

        return await self._w(run)

    async def nack(self, task_id: str, owner: str | None, delay: timedelta, now: datetime) -> bool:
        def run(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "UPDATE tasks SET lease_owner = NULL, visible_at = ? WHERE id = ? AND state = 'ready'"
                " AND (? IS NULL OR lease_owner = ?)",
                ((now + delay).timestamp(), task_id, owner, owner),
            )
            return cur.rowcount > 0

        return await self._w(run)

    async def renew_task(self, task_id: str, owner: str, ttl: timedelta, now: datetime) -> Task:
        def run(conn: sqlite3.Connection) -> Task:
            row = conn.execute(
                f"UPDATE tasks SET visible_at = ? WHERE id = ? AND state = 'ready' AND lease_owner = ? AND visible_at > ?"
                f" RETURNING {c.TASK_READ}", ((now + ttl).timestamp(), task_id, owner, now.timestamp()),
            ).fetchone()
            if row is None:
                raise stale_hold(task_id, owner, _task(conn, task_id), now)
            return c.task_record(row)

        return await self._w(run)

    async def read_states_of(self, eids: Sequence[str]) -> dict[str, tuple[int, Any]]:
        marks = ",".join("?" * len(eids))

        def run(conn: sqlite3.Connection) -> dict[str, tuple[int, Any]]:
            rows = conn.execute(f"SELECT eid, version, state FROM decider_states WHERE eid IN ({marks})", tuple(eids))
            return {r[0]: (int(r[1]), c.unjs(r[2])) for r in rows}

        return await self._r(run) if eids else {}

    async def read_executions(self, eids: Sequence[str]) -> list[ExecutionRecord]:
        marks = ",".join("?" * len(eids))

        def run(conn: sqlite3.Connection) -> list[ExecutionRecord]:
            rows = conn.execute(f"SELECT {c.EXECUTION_COLUMNS} FROM executions WHERE eid IN ({marks})", tuple(eids))
            return [c.execution_record(r) for r in rows]

        return await self._r(run) if eids else []

    async def read_messages(self, channel: str, after: int = 0, limit: int = 100) -> list[Message]:
        def run(conn: sqlite3.Connection) -> list[Message]:
            rows = conn.execute(
                f"SELECT {c.MESSAGE_COLUMNS} FROM messages WHERE channel = ? AND seq > ?"
                " ORDER BY seq LIMIT ?",
                (channel, after, limit),
            )
            return [c.message_record(r) for r in rows]

        return await self._r(run)

    @property
    def batch_sizes(self) -> dict[int, int]:
        return self._writer.batch_sizes if self._writer is not None else {}

    async def next_wake(self, now: datetime) -> datetime | None:
        def run(conn: sqlite3.Connection) -> datetime | None:
            row = conn.execute(
                "SELECT MIN(at) FROM (SELECT MIN(at) AS at FROM timers"
                " UNION ALL SELECT MIN(visible_at) FROM tasks WHERE state = 'ready' AND visible_at > ?)",
                (now.timestamp(),),
            ).fetchone()
            return c.dt(row[0]) if row and row[0] is not None else None

        return await self._r(run)

    def subscribe(self, callback: Callable[[str], None]) -> None:
        """SQLite has no notifications: other processes' work is found by polling."""

    async def claim(self, key: str, owner: str, now: datetime) -> bool:
        def run(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "INSERT OR IGNORE INTO claims (key, owner, at) VALUES (?,?,?)", (key, owner, now.timestamp())
            )
            return cur.rowcount > 0

        return await self._w(run)
