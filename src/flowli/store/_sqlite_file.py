"""SQLite files: opening one that other processes may open at the same moment, the thread that
owns a connection, and the driver of a plan (``_apply``) on a connection."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
import time
from typing import Any, Callable, TypeVar

from ._apply import settle
from ._protocol import Plan

T = TypeVar("T")
_BATCH = 512  # writes per transaction at most
_STOP = object()


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


class Thread:
    """A thread that owns one connection and runs the functions given to it, in batches."""

    def __init__(self, conn: sqlite3.Connection, name: str, transactional: bool):
        self.conn = conn
        self.transactional = transactional
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.batch_sizes: dict[int, int] = {}
        """How many batches of each size this thread ran (of a writer: its group commits)."""
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def submit(self, fn: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        self.queue.put((fn, fut, loop))
        return fut

    def stop(self) -> None:
        self.queue.put(_STOP)
        self.thread.join()
        self.conn.close()

    def _run(self) -> None:
        while self._wake(*self._serve(self.queue.get())):
            pass

    def _serve(self, item: Any) -> tuple[dict[Any, list[Any]], bool]:
        """Apply ``item`` with what else is queued now, as one batch: the outcomes by event loop,
        and whether the thread was told to stop. A method of its own so that nothing of the batch
        outlives it: its callers are woken only once this frame is gone (a caller that resumed
        while the thread still held its write would find it alive, and a quiet store would hold
        its last writes until the next one came)."""
        if item is _STOP:
            return {}, True
        batch = [item]
        stop = False
        while len(batch) < _BATCH:
            try:
                nxt = self.queue.get_nowait()
            except queue.Empty:
                break
            if nxt is _STOP:
                stop = True
                break
            batch.append(nxt)
        self.batch_sizes[len(batch)] = self.batch_sizes.get(len(batch), 0) + 1
        try:
            outcomes = self._run_batch(batch)
        except BaseException as exc:  # never let the thread die: its callers would wait forever
            with contextlib.suppress(BaseException):
                self.conn.rollback()
            outcomes = [(None, exc)] * len(batch)
        by_loop: dict[Any, list[tuple[Any, Any, BaseException | None]]] = {}
        for (_, fut, loop), (result, exc) in zip(batch, outcomes):
            by_loop.setdefault(loop, []).append((fut, result, exc))
        return by_loop, stop

    @staticmethod
    def _wake(by_loop: dict[Any, list[Any]], stop: bool) -> bool:
        """Settle the futures of a batch: one wake-up of each event loop, not one per write.
        False once the thread is to stop."""
        for loop, settled in by_loop.items():
            with contextlib.suppress(RuntimeError):  # the caller's loop is closed
                loop.call_soon_threadsafe(_settle_all, settled)
        return not stop

    def _run_batch(self, batch: list[Any]) -> list[tuple[Any, BaseException | None]]:
        conn = self.conn
        if not self.transactional:
            out: list[tuple[Any, BaseException | None]] = []
            for fn, _, _ in batch:
                try:
                    out.append((fn(conn), None))
                except BaseException as exc:  # delivered to the caller
                    out.append((None, exc))
            return out
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            return [(None, exc)] * len(batch)
        # Optimistic: no savepoints, since a write is refused (a lost fence, a state it does not
        # expect) before it changes anything. If one raises all the same, roll the batch back
        # and run it again with a savepoint per write, so that each fails alone.
        out = []
        for fn, _, _ in batch:
            try:
                out.append((fn(conn), None))
            except BaseException:
                conn.execute("ROLLBACK")
                conn.execute("BEGIN IMMEDIATE")
                out = self._run_isolated(batch)
                break
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            conn.execute("ROLLBACK")
            return [(None, exc)] * len(batch)
        return out

    def _run_isolated(self, batch: list[Any]) -> list[tuple[Any, BaseException | None]]:
        conn = self.conn
        out: list[tuple[Any, BaseException | None]] = []
        for fn, _, _ in batch:
            conn.execute("SAVEPOINT w")
            try:
                result = fn(conn)
            except BaseException as exc:  # rolled back alone, delivered to the caller
                conn.execute("ROLLBACK TO w")
                conn.execute("RELEASE w")
                out.append((None, exc))
            else:
                conn.execute("RELEASE w")
                out.append((result, None))
        return out


def _settle_all(settled: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
    for fut, result, exc in settled:
        settle(fut, result, exc)


def drive(conn: sqlite3.Connection, plan: Plan) -> Any:
    """Run a plan of ``_apply`` on this connection (SQLite serializes write transactions, so
    ``{lock}`` needs no SQL)."""
    try:
        query = next(plan)
        while True:
            mode, sql, params = query
            cur = conn.execute(sql.replace("{lock}", ""), params)
            result = cur.fetchone() if mode == "one" else cur.fetchall() if mode == "all" else cur.rowcount
            query = plan.send(result)
    except StopIteration as stop:
        return stop.value
