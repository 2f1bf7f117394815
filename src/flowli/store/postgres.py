"""The PostgreSQL store: many worker processes on many hosts share one database.

- Writes: a group-commit writer applies every write waiting in its queue in one transaction,
  each in a savepoint of its own, through the same plans as SQLite (``_apply``). Rows that a
  write checks are locked (``FOR UPDATE``), so the fence holds until commit.
- Dequeue: ``FOR UPDATE SKIP LOCKED``; a commit that enqueued a visible task or set a timer
  sends ``NOTIFY``, and every store LISTENs, so workers wake without polling.
- Schema: versioned migrations under an advisory lock, so many processes starting at once
  upgrade it once.
- Driver: asyncpg (see the README, "PostgreSQL", for the measurement that chose it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse, urlunparse

import asyncpg

from flowli.domain import (
    DatabaseUnavailable,
    Entry,
    ExecutionRecord,
    ExecutionStateError,
    InvalidDatabaseURL,
    LeaseLost,
    Message,
    Task,
    TaskKind,
    Timer,
    UnknownExecutionError,
)

from . import _codec as c
from ._apply import apply_write, settle, stale_hold
from ._pg_forms import (
    _ANNOUNCEMENTS,
    _FIRE,
    _MANY_APPENDS,
    _SIGNAL,
    _SINGLE,
    _START_LEASED,
    _START_QUEUED,
    _announce_only,
    _append_runs,
    _fenced,
    _fire,
    _many_announcements,
    _many_appends,
    _plain_append,
    _signal,
    _start,
)
from ._pg_sql import CHANNEL, drive, journal_notes, log_notes, payload, rowcount
from ._pg_sql import notify as notify_notes
from ._pg_views import PostgresViews
from ._protocol import Acquired, Intent, Renewal, Write, WriteResult

log = logging.getLogger("flowli.store.postgres")
_BATCH = 256
_CHANNEL = CHANNEL
_LOCK_KEY = 0x666C6F776C69  # "flowli": the advisory lock of schema migrations
_RETRYABLE = ("40001", "40P01")  # serialization failure, deadlock


def redacted(url: str) -> str:
    """A URL without its password."""
    parsed = urlparse(url)
    if parsed.password is None:
        return url
    netloc = parsed.netloc.replace(f":{parsed.password}@", ":***@")
    return urlunparse(parsed._replace(netloc=netloc))


def unavailable(url: str, dsn: str, schema: str, exc: BaseException) -> DatabaseUnavailable:
    """A failed connection, with the server's answer and what the URL said."""
    p = urlparse(dsn)
    parsed = (f"host {p.hostname or 'the local socket'}, port {p.port or 5432}, database {p.path.lstrip('/') or '(default)'}"
              f", user {p.username or '(default)'}, schema {schema}")
    answer = str(exc) or type(exc).__name__
    if isinstance(exc, OSError) and not isinstance(exc, asyncpg.PostgresError):
        answer = f"no server answered ({answer})"
    return DatabaseUnavailable(redacted(url), answer, parsed)


def parse_url(url: str) -> tuple[str, str]:
    """The libpq URL without flowli's own ``schema`` parameter, and that schema."""
    parsed = urlparse(url)
    if parsed.scheme not in ("postgresql", "postgres"):
        raise InvalidDatabaseURL(url, "a PostgreSQL URL starts with postgresql://")
    query = parse_qs(parsed.query)
    schema = query.pop("schema", ["public"])[0]
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,62}", schema):
        raise InvalidDatabaseURL(url, f"schema {schema!r} is not a plain identifier")
    rest = urlunparse(parsed._replace(scheme="postgresql", query=urlencode(query, doseq=True)))
    return rest, schema


def _migrations() -> list[tuple[int, str]]:
    folder = resources.files("flowli.store") / "sql" / "postgres"
    found = [(int(item.name.split("_", 1)[0]), item.read_text()) for item in folder.iterdir() if item.name.endswith(".sql")]
    return sorted(found)


class _Connection(asyncpg.Connection):  # type: ignore[misc]
    """A pooled connection released without asyncpg's reset round trip: flowli holds no
    session state on them (no LISTEN, no session advisory lock, no SET)."""

    def get_reset_query(self) -> str:
        return ""


_LEASE = (
    "WITH x AS (UPDATE executions SET lease_owner = $1, lease_epoch = lease_epoch + 1, lease_expires_at = $2,"
    " status = 'running', updated_at = $3 WHERE eid = $4 AND status NOT IN ('completed', 'failed', 'cancelled')"
    " AND (lease_owner IS NULL OR lease_expires_at IS NULL OR lease_expires_at <= $3)"
    f" RETURNING {c.EXECUTION_COLUMNS})"
)
_ACQUIRE = _LEASE + f" SELECT {c.EXECUTION_COLUMNS} FROM x"
_ACQUIRE_ACK = (
    _LEASE + ", a AS (UPDATE tasks SET state = 'acked', lease_owner = NULL WHERE id = $5"
    " AND (SELECT count(*) FROM x) >= 0)"
    f" SELECT {c.EXECUTION_COLUMNS} FROM x"
)


# the rows locked in eid order first (as in every batch that locks several), then the leases,
# then the acks (the subquery on x makes them wait for the leases)
_ACQUIRE_MANY = (
    "WITH l AS (SELECT eid FROM executions WHERE eid = ANY($4::text[]) ORDER BY eid FOR UPDATE),"
    " x AS (UPDATE executions e SET lease_owner = $1, lease_epoch = e.lease_epoch + 1, lease_expires_at = $2,"
    " status = 'running', updated_at = $3 FROM l WHERE e.eid = l.eid"
    " AND e.status NOT IN ('completed', 'failed', 'cancelled')"
    " AND (e.lease_owner IS NULL OR e.lease_expires_at IS NULL OR e.lease_expires_at <= $3)"
    f" RETURNING {', '.join('e.' + col.strip() for col in c.EXECUTION_COLUMNS.split(','))}),"
    " a AS (UPDATE tasks SET state = 'acked', lease_owner = NULL WHERE id = ANY($5::text[])"
    " AND (SELECT count(*) FROM x) >= 0)"
    f" SELECT {c.EXECUTION_COLUMNS} FROM x"
)


_READ_JOURNALS = f"SELECT {c.ENTRY_COLUMNS} FROM journal WHERE eid = ANY($1::text[]) ORDER BY eid, seq"
_DEQUEUE = (
    "UPDATE tasks SET lease_owner = $1, visible_at = $2, deliveries = deliveries + 1"
    " WHERE id IN (SELECT id FROM tasks WHERE state = 'ready' AND queue = ANY($3::text[])"
    " AND kind = ANY($4::text[]) AND visible_at <= $5 ORDER BY visible_at LIMIT $6 FOR UPDATE SKIP LOCKED)"
    f" RETURNING {c.TASK_READ}"
)

_READ_MESSAGES = (
    "SELECT q.i, m.channel, m.seq, m.payload, m.provenance, m.application"
    " FROM unnest($1::text[], $2::bigint[], $3::int[]) WITH ORDINALITY AS q(channel, after, lim, i)"
    " CROSS JOIN LATERAL (SELECT channel, seq, payload, provenance, application FROM messages"
    " WHERE channel = q.channel AND seq > q.after ORDER BY seq LIMIT q.lim) m ORDER BY q.i, m.seq"
)

# the statements of the hot path, prepared on each connection when the store opens (``_warm``)
_WARM_WRITES = (_MANY_APPENDS, _ANNOUNCEMENTS, _START_LEASED, _START_QUEUED, _SIGNAL, _FIRE)
_WARM_READS = (_ACQUIRE_MANY, _READ_JOURNALS, _DEQUEUE, _READ_MESSAGES)


def _shard_key(w: Write) -> str | None:
    """The execution a write belongs to, if any: its writes share one writer."""
    if w.fence is not None:
        return w.fence.eid
    if w.expect is not None:
        return w.expect[0]
    if w.entries:
        return w.entries[0].eid
    if w.announcements:
        return w.announcements[0].entry.eid
    return None


class _Optimism(Exception):
    """A write of an optimistic batch raised: roll the batch back and isolate its writes."""


def _later(w: Write, now: datetime) -> bool:
    """Whether a write sets a timer or enqueues a task visible only after ``now``."""
    return bool(w.timers) or any(t.visible_at > now for t in w.tasks)


def _wakes(w: Write, result: WriteResult) -> bool:
    """Whether a write made a task visible that another process should dequeue."""
    return bool(w.tasks or w.resumes or any(new.task for new in w.executions) or w.wake_waiters or result.woke
                or w.timers)


SESSION_SETTINGS = {
    # Every statement of the store finds its rows by a key or a queue's index. A prepared
    # statement keeps the generic plan made at its sixth execution, and on a schema that is new
    # (a fresh deployment: no statistics yet, every table taken for ten pages) that plan scans
    # executions, unannounced and tasks whole, then keeps doing so as they grow to thousands of
    # rows: each batch of appends grew with the number of executions. With sequential scans
    # priced out, the plans use the indexes whatever the statistics said when they were made; a
    # query that has no index to use still scans.
    "enable_seqscan": "off",
}


class PostgresStore:
    """The Store protocol on one PostgreSQL database (and schema)."""

    notifies = True

    def __init__(self, url: str, *, pool_size: int = 10, writers: int = 2):
        self.url = url
        self.dsn, self.schema = parse_url(url)
        self.pool_size = pool_size
        self.writers = writers
        self._pool: asyncpg.Pool | None = None
        self._listener: asyncpg.Connection | None = None
        self._queues: list[asyncio.Queue[tuple[Write, datetime, asyncio.Future[WriteResult]]]] = [
            asyncio.Queue() for _ in range(writers)
        ]
        """One queue per writer. The writes of one execution always go to the same writer, so
        they apply in the order they were made (a frame.started before its frame.completed, a
        journal append before its control-log append), as with one writer."""
        self._round = 0
        self._starts: asyncio.Queue[tuple[Write, datetime, asyncio.Future[WriteResult]]] = asyncio.Queue()
        """Starts of executions and signals: a lane of their own, so a client's write does not wait
        behind the batches of a busy worker in the same process."""
        self._writers: list[asyncio.Task[None]] = []
        self._message_reads: list[tuple[str, int, int, asyncio.Future[list[Message]]]] = []
        self._reading: set[asyncio.Future[None]] = set()
        self._locks = [asyncio.Lock() for _ in range(writers + 1)]
        """One per writer connection: its writer's batches, and a client's write applied in place
        while the lane of clients is idle, never use it at once."""
        self._subscribers: list[Callable[[str], None]] = []
        self._relisten: asyncio.Future[None] | None = None
        self._closing = False
        self._wconns: dict[int, asyncpg.Connection] = {}
        self._views = PostgresViews(self._live_pool)
        self.origin = uuid.uuid4().hex
        """The payload of this store's notifications: its own come back to its listener, which
        ignores them (the engine of this process wakes its workers and sweeper in process)."""

    def _live_pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise RuntimeError(f"store {self.url} is not open")
        return self._pool

    @property
    def _min_size(self) -> int:
        """The connections opened at once: one per writer (and the lane of clients) and two for
        reads and acquisitions, so that no first request waits for a connection to be made."""
        return min(self.pool_size, self.writers + 3)

    async def _connect_pool(self) -> Any:
        try:
            return await asyncpg.create_pool(
                self.dsn, min_size=self._min_size, max_size=self.pool_size,
                statement_cache_size=512, connection_class=_Connection,
                # startup parameters, not SETs: they hold on every connection of the pool
                server_settings=SESSION_SETTINGS | {"search_path": f'"{self.schema}"'},
            )
        except ValueError as exc:
            raise InvalidDatabaseURL(self.url, str(exc)) from None
        except (OSError, asyncpg.PostgresError) as exc:
            raise unavailable(self.url, self.dsn, self.schema, exc) from None

    async def open(self) -> None:
        self._pool = await self._connect_pool()
        async with self._pool.acquire() as conn:
            await self._migrate(conn)
        await self._warm()
        # a few writers, each group-committing on its own connection: PostgreSQL runs their
        # transactions side by side, and a start does not queue behind one long batch
        self._writers = [
            asyncio.create_task(self._write_loop(slot), name=f"flowli-postgres-writer-{slot}")
            for slot in range(self.writers + 1)  # the last one serves the lane of starts
        ]
        await self._listen()

    async def _warm(self) -> None:
        """Prepare the statements of the hot path on the writers' connections and on the pool's
        others, once, at open. The first use of a statement on a new connection parses and plans
        it on a server process whose catalog caches are cold, and asyncpg looks up the array types
        it binds: 10–20 ms, which the first executions of an engine just opened would wait for.
        (A statement prepared here is planned again on its first use, with the caches warm.)"""
        assert self._pool is not None
        writers = [await self._writer_conn(slot) for slot in range(self.writers + 1)]
        readers = [await self._pool.acquire() for _ in range(max(0, self._min_size - len(writers)))]

        async def prepare(conn: asyncpg.Connection, statements: tuple[str, ...]) -> None:
            for sql in statements:
                await conn.prepare(sql)

        try:
            await asyncio.gather(*(prepare(conn, _WARM_WRITES) for conn in writers),
                                 *(prepare(conn, _WARM_READS) for conn in readers))
        finally:
            for conn in readers:
                await self._pool.release(conn)

    async def _listen(self) -> None:
        """LISTEN on a connection of its own; when it drops, listen again (meanwhile workers
        fall back to their slow poll, and a reconnection wakes them once in case they missed work)."""
        try:
            self._listener = await asyncpg.connect(self.dsn)
            await self._listener.add_listener(_CHANNEL, self._on_notify)
            self._listener.add_termination_listener(self._on_listener_lost)
        except (OSError, asyncpg.PostgresError) as exc:
            log.warning("LISTEN failed (%s); workers poll until it is back", exc)
            self._listener = None
            self._relisten_later()

    def _on_listener_lost(self, conn: Any) -> None:
        if self._closing:
            return
        self._listener = None
        self._relisten_later()

    def _relisten_later(self) -> None:
        async def again() -> None:
            await asyncio.sleep(1.0)
            if not self._closing and self._listener is None:
                await self._listen()
                self._on_notify(None, 0, _CHANNEL, ":timer")  # what it may have missed: anything

        self._relisten = asyncio.ensure_future(again())

    async def _migrate(self, conn: asyncpg.Connection) -> None:
        async with conn.transaction():
            # one process upgrades; the others wait here, then find nothing to do
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_KEY)
            await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
            await conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            current = await conn.fetchval("SELECT COALESCE(MAX(version), 0) FROM schema_version")
            for version, sql in _migrations():
                if version > current:
                    await conn.execute(sql)
                    await conn.execute("INSERT INTO schema_version (version) VALUES ($1)", version)

    async def close(self) -> None:
        self._closing = True
        if self._relisten is not None:
            self._relisten.cancel()
        for task in self._writers:
            task.cancel()
        if self._writers:
            await asyncio.wait(self._writers)
        self._writers = []
        for conn in self._wconns.values():
            if self._pool is not None:
                with contextlib.suppress(Exception):
                    await self._pool.release(conn)
        self._wconns = {}
        for queue in [*self._queues, self._starts]:
            while not queue.empty():  # writes that never reached a writer
                _, _, fut = queue.get_nowait()
                if not fut.done():
                    fut.set_exception(RuntimeError(f"store {self.url} is closed"))
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await self._listener.close()
            self._listener = None
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    async def register_worker(
        self, worker_id: str, kind: str, queues: Sequence[str], now: datetime,
        workflows: dict[str, list[str]] | None = None,
    ) -> None:
        assert self._pool is not None
        await self._pool.execute(
            "INSERT INTO workers (id, kind, queues, workflows, started_at, seen_at) VALUES ($1, $2, $3, $4, $5, $5)"
            " ON CONFLICT (id) DO UPDATE SET seen_at = excluded.seen_at, queues = excluded.queues,"
            " workflows = excluded.workflows",
            worker_id, kind, c.js(list(queues)), c.js(workflows), now.timestamp())

    async def read_workers(self, seen_after: datetime) -> list[dict[str, Any]]:
        assert self._pool is not None
        rows = await self._pool.fetch("SELECT id, kind, queues, started_at, seen_at, workflows FROM workers"
                                      " WHERE seen_at > $1"
                                      " ORDER BY id", seen_after.timestamp())
        return [c.worker_record(r) for r in rows]

    async def watch(self, eid: str, until: datetime) -> None:
        assert self._pool is not None
        await self._pool.execute(
            "UPDATE executions SET watched_until = GREATEST(COALESCE(watched_until, 0), $2) WHERE eid = $1",
            eid, until.timestamp())

    def views(self) -> PostgresViews:
        """The projection: tables of this database and schema, persistent and shared."""
        return self._views

    # ---- notifications ----------------------------------------------------------------

    def subscribe(self, callback: Callable[[str], None]) -> None:
        self._subscribers.append(callback)

    def _on_notify(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        origin, _, what = payload.partition(":")
        if origin == self.origin:
            return  # this store's own write: its process woke its workers and sweeper itself
        for callback in self._subscribers:
            callback(what or "work")

    # ---- writes -------------------------------------------------------------------------

    async def write(self, write: Write, now: datetime) -> WriteResult:
        fut: asyncio.Future[WriteResult] = asyncio.get_running_loop().create_future()
        if write.intent in (Intent.START, Intent.SIGNAL):
            lane = self._starts  # a client's write: never behind the batches of a busy worker
            lock = self._locks[self.writers]
            if not lock.locked() and lane.empty() and self._single(write) is not None:
                # the lane is idle: apply it here and now, without the hand-offs to its writer
                async with lock:
                    ((result, exc),) = await self._outcomes([(write, now, fut)], self.writers)
                if exc is not None:
                    raise exc
                return result  # type: ignore[no-any-return]
        elif _announce_only(write) and len({hash(a.entry.eid) % len(self._queues) for a in write.announcements}) > 1:
            # control-log appends of executions of several writers: each part on the writer of its
            # executions, behind their journal writes, in order
            parts: dict[int, list[Any]] = {}
            for a in write.announcements:
                parts.setdefault(hash(a.entry.eid) % len(self._queues), []).append(a)
            await asyncio.gather(*(self.write(Write(intent=Intent.ANNOUNCE, announcements=part), now) for part in parts.values()))
            return WriteResult(entry_seqs=[], entry_values=[], message_seqs=[], created=[])
        else:
            key = _shard_key(write)
            if key is None:
                self._round += 1
                lane = self._queues[self._round % len(self._queues)]
            else:
                lane = self._queues[hash(key) % len(self._queues)]
        await lane.put((write, now, fut))
        return await fut

    async def _write_loop(self, slot: int) -> None:
        assert self._pool is not None
        queue = self._starts if slot == self.writers else self._queues[slot]
        while True:
            batch = [await queue.get()]
            while len(batch) < _BATCH and not queue.empty():
                batch.append(queue.get_nowait())
            batch = [item for item in batch if not item[2].done()]
            if not batch:
                continue
            # a write that appends to the control log takes its counter row lock: put those last,
            # so that a batch holding it asks for no other lock (no lock cycle with another
            # process's batch); the sort is stable, so an announcement still follows the append it announces
            batch.sort(key=lambda item: bool(item[0].announcements))
            try:
                async with self._locks[slot]:
                    outcomes = await self._outcomes(batch, slot)
            except BaseException as exc:
                for _, _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                raise
            for (_, _, fut), (result, exc) in zip(batch, outcomes):
                settle(fut, result, exc)

    async def _outcomes(self, batch: list[Any], slot: int) -> list[tuple[Any, BaseException | None]]:
        """Apply a batch on the connection of ``slot``; a broken batch runs again write by write."""
        try:
            return await self._apply_batch(batch, slot)
        except (asyncpg.PostgresError, OSError) as exc:
            if getattr(exc, "sqlstate", None) in _RETRYABLE or len(batch) > 1:
                return [await self._apply_alone(item, slot) for item in batch]
            return [(None, exc)]

    async def _writer_conn(self, slot: int) -> asyncpg.Connection:
        """A writer's own connection, held across batches (no pool reset per batch)."""
        assert self._pool is not None
        conn = self._wconns.get(slot)
        if conn is not None and conn.is_closed():
            with contextlib.suppress(Exception):
                await self._pool.release(conn)
            conn = None
        if conn is None:
            conn = self._wconns[slot] = await self._pool.acquire()
        return conn

    async def _apply_batch(
        self, batch: list[Any], slot: int, isolated: bool = False
    ) -> list[tuple[Any, BaseException | None]]:
        """One transaction for the batch. Optimistic first, with no savepoints, since a write is
        refused (a lost fence, a state it does not expect) before it changes anything; when one
        raises all the same, the batch rolls back and runs again with a savepoint per write, so
        that each fails alone."""
        conn = await self._writer_conn(slot)
        writes = [w for w, _, _ in batch]
        now = batch[0][1]
        form = self._single(writes[0]) if not isolated and len(batch) == 1 else None
        if form is not None:
            # one statement, atomic on its own: no BEGIN and COMMIT round trips
            return [await self._one_statement(conn, writes[0], now, form)]
        if not isolated and all(_plain_append(w) for w in writes) and len(_append_runs(writes)) == 1:
            return await _many_appends(conn, writes, now, self.origin)
        if not isolated and all(_announce_only(w) for w in writes):
            return await _many_announcements(conn, writes, self.origin)
        out: list[tuple[Any, BaseException | None]] = []
        notify = timers = False
        appended: set[str] = set()  # executions whose journals the generic writes appended to
        announced: list[Any] = []
        try:
            async with conn.transaction():
                i = 0
                while i < len(batch):
                    if not isolated and (_plain_append(writes[i]) or _announce_only(writes[i])):
                        # a run of plain appends (the bulk of a busy worker's writes), or of control-log
                        # appends: one statement each
                        kind = _plain_append if _plain_append(writes[i]) else _announce_only
                        j = i
                        while j < len(batch) and kind(writes[j]):
                            j += 1
                        if kind is _announce_only:
                            out.extend(await _many_announcements(conn, writes[i:j], self.origin))
                        else:
                            for run in _append_runs(writes[i:j]):
                                out.extend(await _many_appends(conn, run, batch[i][1], self.origin))
                        i = j
                        continue
                    w, now, _ = batch[i]
                    i += 1
                    form = None if isolated else self._single(w)
                    if form is not None:
                        out.append(await self._one_statement(conn, w, now, form))  # notifies in its statement
                        continue
                    try:
                        if isolated:
                            async with conn.transaction():  # a savepoint
                                result = await drive(conn, apply_write(w, now))
                        else:
                            result = await drive(conn, apply_write(w, now))
                    except (asyncpg.PostgresError, OSError, asyncio.CancelledError):
                        raise  # a broken transaction: the caller retries each write alone
                    except BaseException as exc:  # LeaseLost is a BaseException: this write's answer
                        if not isolated:
                            raise _Optimism() from exc
                        out.append((None, exc))
                    else:
                        out.append((result, None))
                        notify = notify or _wakes(w, result)
                        timers = timers or _later(w, now)
                        appended.update(e.eid for e in w.entries)
                        announced += w.announcements
                if notify:
                    await conn.execute(f"SELECT pg_notify('{_CHANNEL}', $1)", payload(self.origin, timers))
                notes = log_notes(announced)
                if appended:
                    watched = await conn.fetch("SELECT eid, watched_until FROM executions WHERE eid = ANY($1::text[])"
                                               " AND watched_until > $2", list(appended), now.timestamp())
                    notes += journal_notes(((r[0], r[1]) for r in watched), now.timestamp())
                await notify_notes(conn, self.origin, notes)
        except _Optimism:
            return await self._apply_batch(batch, slot, isolated=True)
        return out

    @staticmethod
    def _single(w: Write) -> Callable[..., Any] | None:
        """The one-statement form of a write's intent, if it has one: a start, fired timers, a
        signal, a fenced write (plain appends go together in runs, see ``_many_appends``)."""
        return _SINGLE.get(w.intent) if w.intent is not None else None

    async def _one_statement(
        self, conn: asyncpg.Connection, w: Write, now: datetime, form: Callable[..., Any]
    ) -> tuple[Any, BaseException | None]:
        """A write in its one-statement ``form`` (see ``_single``). A refusal (a lost fence, the
        status a signal checks) changes nothing, so it is this write's answer and the transaction
        around it goes on."""
        try:
            if form is _start:
                return (await _start(conn, w, now, self.origin), None)
            if form is _fire:
                return (await _fire(conn, w, self.origin), None)
            if form is _fenced:
                return (await _fenced(conn, w, now, self.origin), None)
            return (await _signal(conn, w, self.origin), None)
        except (ExecutionStateError, UnknownExecutionError, LeaseLost) as refused:
            return (None, refused)

    async def _apply_alone(self, item: Any, slot: int) -> tuple[Any, BaseException | None]:
        for attempt in range(5):
            try:
                return (await self._apply_batch([item], slot))[0]
            except (asyncpg.PostgresError, OSError) as exc:
                if getattr(exc, "sqlstate", None) not in _RETRYABLE or attempt == 4:
                    return (None, exc)
                await asyncio.sleep(0.01 * (attempt + 1))
        raise AssertionError("unreachable")

    # ---- leases and tasks -----------------------------------------------------------------

    async def acquire(
        self, eid: str, owner: str, ttl: timedelta, now: datetime, ack: str | None = None
    ) -> Acquired:
        for attempt in range(5):
            try:
                return await self._acquire(eid, owner, ttl, now, ack)
            except asyncpg.PostgresError as exc:
                if getattr(exc, "sqlstate", None) not in _RETRYABLE or attempt == 4:
                    raise
                await asyncio.sleep(0.01 * (attempt + 1))
        raise AssertionError("unreachable")

    async def _acquire(
        self, eid: str, owner: str, ttl: timedelta, now: datetime, ack: str | None
    ) -> Acquired:
        assert self._pool is not None
        # one statement: the lease, then the ack of the task (the subquery on x makes the task's
        # update wait for the execution's row: the order a writer's batch locks them in)
        row = await self._pool.fetchrow(
            _ACQUIRE_ACK if ack is not None else _ACQUIRE,
            owner, (now + ttl).timestamp(), now.timestamp(), eid, *([ack] if ack is not None else []),
        )
        if row is None:  # terminal, unknown, or leased by a live worker
            row = await self._pool.fetchrow(f"SELECT {c.EXECUTION_COLUMNS} FROM executions WHERE eid = $1", eid)
            return Acquired(None if row is None else c.execution_record(row), None, [])
        record = c.execution_record(row)
        # the journal, read under the lease just taken
        rows = await self._pool.fetch(f"SELECT {c.ENTRY_COLUMNS} FROM journal WHERE eid = $1 ORDER BY seq", eid)
        return Acquired(record, record.lease_epoch, [c.entry_record(r) for r in rows])

    async def acquire_many(
        self, wanted: Sequence[tuple[str, str]], owner: str, ttl: timedelta, now: datetime
    ) -> list[Acquired]:
        assert self._pool is not None
        eids = sorted({eid for eid, _ in wanted})
        for attempt in range(5):
            try:
                rows = await self._pool.fetch(
                    _ACQUIRE_MANY, owner, (now + ttl).timestamp(), now.timestamp(), eids, [ack for _, ack in wanted]
                )
                break
            except asyncpg.PostgresError as exc:
                if getattr(exc, "sqlstate", None) not in _RETRYABLE or attempt == 4:
                    raise
                await asyncio.sleep(0.01 * (attempt + 1))
        records = {r.eid: r for r in (c.execution_record(row) for row in rows)}
        journals: dict[str, list[Entry]] = {eid: [] for eid in records}
        if records:
            # the journals, read under the leases just taken (a statement of its own: it sees what
            # the previous holders committed before they let go)
            for row in await self._pool.fetch(_READ_JOURNALS, list(records)):
                journals[row[0]].append(c.entry_record(row))
        out = []
        for eid, _ in wanted:
            record = records.pop(eid, None)
            out.append(Acquired(None, None, []) if record is None else Acquired(record, record.lease_epoch, journals[eid]))
        return out

    async def renew(
        self, owner: str, leases: Sequence[tuple[str, int]], ttl: timedelta, now: datetime
    ) -> Renewal:
        assert self._pool is not None
        lost, cancel = [], []
        # one row per statement, each its own transaction: a renewal never holds two row locks,
        # so it cannot deadlock with a writer's batch. An expired lease is not renewed: the
        # sweeper may have handed the execution to another worker already.
        async with self._pool.acquire() as conn:
            for eid, epoch in leases:
                for attempt in range(5):
                    try:
                        row = await conn.fetchrow(
                            "UPDATE executions SET lease_expires_at = $1 WHERE eid = $2 AND lease_owner = $3"
                            " AND lease_epoch = $4 AND lease_expires_at > $5 RETURNING cancel_requested IS NOT NULL",
                            (now + ttl).timestamp(), eid, owner, epoch, now.timestamp(),
                        )
                        break
                    except asyncpg.PostgresError as exc:
                        if getattr(exc, "sqlstate", None) not in _RETRYABLE or attempt == 4:
                            raise
                        await asyncio.sleep(0.01 * (attempt + 1))
                if row is None:
                    lost.append(eid)
                elif row[0]:
                    cancel.append(eid)
        return Renewal(lost, cancel)

    async def dequeue(
        self,
        queues: Sequence[str],
        kinds: Sequence[TaskKind],
        owner: str,
        limit: int,
        ttl: timedelta,
        now: datetime,
    ) -> list[Task]:
        assert self._pool is not None
        t = now.timestamp()
        rows = await self._pool.fetch(
            _DEQUEUE, owner, t + ttl.total_seconds(), list(queues), [k.value for k in kinds], t, limit,
        )
        return sorted((c.task_record(r) for r in rows), key=lambda task: task.visible_at)

    async def nack(self, task_id: str, owner: str | None, delay: timedelta, now: datetime) -> bool:
        assert self._pool is not None
        status = await self._pool.execute(
            "UPDATE tasks SET lease_owner = NULL, visible_at = $1 WHERE id = $2 AND state = 'ready'"
            " AND ($3::text IS NULL OR lease_owner = $3::text)",
            (now + delay).timestamp(), task_id, owner,
        )
        return rowcount(status) > 0

    async def renew_task(self, task_id: str, owner: str, ttl: timedelta, now: datetime) -> Task:
        assert self._pool is not None
        row = await self._pool.fetchrow(
            "UPDATE tasks SET visible_at = $1 WHERE id = $2 AND state = 'ready' AND lease_owner = $3 AND visible_at > $4"
            f" RETURNING {c.TASK_READ}", (now + ttl).timestamp(), task_id, owner, now.timestamp(),
        )
        if row is None:
            raise stale_hold(task_id, owner, await self.read_task(task_id), now)
        return c.task_record(row)

    async def read_task(self, task_id: str) -> Task | None:
        assert self._pool is not None
        row = await self._pool.fetchrow(f"SELECT {c.TASK_READ} FROM tasks WHERE id = $1", task_id)
        return None if row is None else c.task_record(row)

    async def expired_tasks(self, now: datetime, limit: int) -> list[Task]:
        assert self._pool is not None
        rows = await self._pool.fetch(
            f"SELECT {c.TASK_READ} FROM tasks WHERE state = 'ready' AND frame IS NOT NULL AND lease_owner IS NOT NULL"
            " AND visible_at <= $1 ORDER BY visible_at LIMIT $2", now.timestamp(), limit,
        )
        return [c.task_record(r) for r in rows]

    # ---- reads --------------------------------------------------------------------------

    async def read_execution(self, eid: str) -> ExecutionRecord | None:
        assert self._pool is not None
        row = await self._pool.fetchrow(f"SELECT {c.EXECUTION_COLUMNS} FROM executions WHERE eid = $1", eid)
        return None if row is None else c.execution_record(row)

    async def read_executions(self, eids: Sequence[str]) -> list[ExecutionRecord]:
        assert self._pool is not None
        rows = await self._pool.fetch(f"SELECT {c.EXECUTION_COLUMNS} FROM executions WHERE eid = ANY($1::text[])", list(eids))
        return [c.execution_record(r) for r in rows]

    async def read_journal(self, eid: str, after: int = 0) -> list[Entry]:
        assert self._pool is not None
        rows = await self._pool.fetch(
            f"SELECT {c.ENTRY_COLUMNS} FROM journal WHERE eid = $1 AND seq > $2 ORDER BY seq", eid, after
        )
        return [c.entry_record(r) for r in rows]

    async def read_messages(self, channel: str, after: int = 0, limit: int = 100) -> list[Message]:
        # the reads asked for in one turn of the loop (the receives of many resumed executions)
        # go in one statement
        fut: asyncio.Future[list[Message]] = asyncio.get_running_loop().create_future()
        self._message_reads.append((channel, after, limit, fut))
        if len(self._message_reads) == 1:
            asyncio.get_running_loop().call_soon(self._read_messages_now)
        return await fut

    def _read_messages_now(self) -> None:
        reads, self._message_reads = self._message_reads, []
        task = asyncio.ensure_future(self._read_many_messages(reads))
        self._reading.add(task)
        task.add_done_callback(self._reading.discard)

    async def _read_many_messages(self, reads: list[tuple[str, int, int, asyncio.Future[list[Message]]]]) -> None:
        try:
            assert self._pool is not None
            rows = await self._pool.fetch(_READ_MESSAGES, [r[0] for r in reads], [r[1] for r in reads],
                                          [r[2] for r in reads])
        except BaseException as exc:
            for *_, fut in reads:
                if not fut.done():
                    fut.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        found: list[list[Message]] = [[] for _ in reads]
        for row in rows:
            found[row[0] - 1].append(c.message_record(row[1:]))
        for (*_, fut), messages in zip(reads, found):
            if not fut.done():
                fut.set_result(messages)

    async def read_control_log(self, after: int = 0, limit: int = 1000) -> list[Entry]:
        assert self._pool is not None
        rows = await self._pool.fetch(
            "SELECT eid, seq, kind, fid, attempt, digest, value, error, provenance, journal_seq"
            " FROM control_log WHERE seq > $1 ORDER BY seq LIMIT $2",
            after, limit,
        )
        return [c.entry_record(tuple(r)[:9], r[9]) for r in rows]

    async def read_tasks(
        self, queue: str | None = None, eid: str | None = None, include_acked: bool = False
    ) -> list[Task]:
        assert self._pool is not None
        rows = await self._pool.fetch(
            f"SELECT {c.TASK_READ} FROM tasks WHERE ($1::text IS NULL OR queue = $1::text)"
            " AND ($2::text IS NULL OR eid = $2::text) AND ($3::bool OR state = 'ready') ORDER BY visible_at, id",
            queue, eid, include_acked,
        )
        return [c.task_record(r) for r in rows]

    async def read_timers(self, eid: str | None = None) -> list[Timer]:
        assert self._pool is not None
        rows = await self._pool.fetch(
            "SELECT eid, fid, at FROM timers WHERE ($1::text IS NULL OR eid = $1::text) ORDER BY at", eid
        )
        return [c.timer_record(r) for r in rows]

    async def due_timers(self, now: datetime, limit: int) -> list[Timer]:
        assert self._pool is not None
        rows = await self._pool.fetch("SELECT eid, fid, at FROM timers WHERE at <= $1 ORDER BY at LIMIT $2", now.timestamp(), limit)
        return [c.timer_record(r) for r in rows]

    async def expired_leases(self, now: datetime, limit: int) -> list[ExecutionRecord]:
        assert self._pool is not None
        rows = await self._pool.fetch(
            f"SELECT {c.EXECUTION_COLUMNS} FROM executions WHERE status = 'running'"
            " AND (lease_expires_at IS NULL OR lease_expires_at <= $1) LIMIT $2",
            now.timestamp(), limit,
        )
        return [c.execution_record(r) for r in rows]

    async def unannounced(self, before: datetime, limit: int) -> list[Entry]:
        assert self._pool is not None
        rows = await self._pool.fetch(
            f"SELECT {', '.join('j.' + x.strip() for x in c.ENTRY_COLUMNS.split(','))}"
            " FROM unannounced u JOIN journal j ON j.eid = u.eid AND j.seq = u.seq"
            " WHERE u.at <= $1 ORDER BY u.at, j.eid, j.seq LIMIT $2",
            before.timestamp(), limit,
        )
        return [c.entry_record(r, r[1]) for r in rows]

    async def finished_before(self, before: datetime, limit: int) -> list[str]:
        assert self._pool is not None
        rows = await self._pool.fetch(
            "SELECT eid FROM executions e WHERE status IN ('completed', 'failed', 'cancelled') AND updated_at <= $1"
                # not before its lifecycle entries reached the control log (the archive keeps no
                # unannounced mark): a pending second append, or the sweeper's repair, comes first
                " AND NOT EXISTS (SELECT 1 FROM unannounced u WHERE u.eid = e.eid)"
            " ORDER BY updated_at LIMIT $2",
            before.timestamp(), limit,
        )
        return [r[0] for r in rows]

    async def read_scoped_messages(self, eid: str) -> list[Message]:
        assert self._pool is not None
        rows = await self._pool.fetch(
            f"SELECT {c.MESSAGE_COLUMNS} FROM messages WHERE channel >= $1 AND channel < $2"
            " ORDER BY channel, seq",
            f"{eid}.", f"{eid}/",
        )
        return [c.message_record(r) for r in rows]

    async def waiters(self, channel: str) -> list[str]:
        assert self._pool is not None
        return [r[0] for r in await self._pool.fetch("SELECT eid FROM waiters WHERE channel = $1", channel)]

    async def next_wake(self, now: datetime) -> datetime | None:
        assert self._pool is not None
        value = await self._pool.fetchval(
            "SELECT LEAST((SELECT MIN(at) FROM timers),"
            " (SELECT MIN(visible_at) FROM tasks WHERE state = 'ready' AND visible_at > $1))",
            now.timestamp(),
        )
        return c.dt(value)

    async def claim(self, key: str, owner: str, now: datetime) -> bool:
        assert self._pool is not None
        status = await self._pool.execute(
            "INSERT INTO claims (key, owner, at) VALUES ($1, $2, $3) ON CONFLICT (key) DO NOTHING", key, owner, now.timestamp()
        )
        return rowcount(status) > 0
