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
from datetime import datetime
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse, urlunparse

import asyncpg

from flowli.domain import (
    DatabaseUnavailable,
    ExecutionStateError,
    InvalidDatabaseURL,
    LeaseLost,
    Message,
    UnknownExecutionError,
)

from . import _codec as c
from ._apply import apply_write, settle
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
from ._pg_items import PostgresItems
from ._pg_leases import ACQUIRE_MANY, DEQUEUE, READ_JOURNALS, RETRYABLE, PostgresLeases
from ._pg_reads import READ_MESSAGES
from ._pg_sql import CHANNEL_SQL, channel, drive, journal_notes, log_notes, payload
from ._pg_sql import notify as notify_notes
from ._pg_views import PostgresViews
from ._protocol import Intent, Write, WriteResult

log = logging.getLogger("flowli.store.postgres")
_BATCH = 256
_LOCK_KEY = 0x666C6F776C69  # "flowli": the advisory lock of schema migrations


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


# the statements of the hot path, prepared on each connection when the store opens (``_warm``)
_WARM_WRITES = (_MANY_APPENDS, _ANNOUNCEMENTS, _START_LEASED, _START_QUEUED, _SIGNAL, _FIRE)
_WARM_READS = (ACQUIRE_MANY, READ_JOURNALS, DEQUEUE, READ_MESSAGES)


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
    return bool(w.timers) or any(t.visible_at > now and t.lease_owner is None for t in w.tasks)


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
    # ... and pricing them out adds 1e10 to the cost of every plan that still scans, far past
    # jit_above_cost: each execution of such a statement (the migrations' check of
    # schema_version, a read with no index to use) compiled itself with LLVM first, 25-120 ms
    # where the query takes a millisecond. The store's statements are short lookups that JIT
    # never pays for.
    "jit": "off",
}


class PostgresStore(PostgresLeases):
    """The Store protocol on one PostgreSQL database (and schema)."""

    notifies = True
    announces_in_write = False  # the second append: one counter taken by every write would serialize them

    def __init__(self, url: str, *, pool_size: int = 10, writers: int = 2):
        self.url = url
        self.dsn, self.schema = parse_url(url)
        self.batch_sizes: dict[int, int] = {}
        """How many batches of each size the writers committed (the group commit)."""
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
        self._items = PostgresItems(self._live_pool)
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
            await self._listener.add_listener(channel(self.schema), self._on_notify)
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
                self._on_notify(None, 0, channel(self.schema), ":timer")  # what it may have missed: anything

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

    async def watch(self, eid: str, until: datetime) -> None:
        assert self._pool is not None
        await self._pool.execute(
            "UPDATE executions SET watched_until = GREATEST(COALESCE(watched_until, 0), $2) WHERE eid = $1",
            eid, until.timestamp())

    def views(self) -> PostgresViews:
        """The projection: tables of this database and schema, persistent and shared."""
        return self._views

    def items(self) -> PostgresItems:
        """The items: a table of this database and schema, shared by every process."""
        return self._items

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
            await self._write_batch(slot, queue, await queue.get())

    async def _write_batch(self, slot: int, queue: asyncio.Queue[Any], first: Any) -> None:
        """Apply ``first`` with what else is queued now, as one batch. A method of its own so that
        nothing of the batch outlives it (a quiet store would otherwise hold its last writes
        until the next one came)."""
        batch = [first]
        while len(batch) < _BATCH and not queue.empty():
            batch.append(queue.get_nowait())
        batch = [item for item in batch if not item[2].done()]
        if not batch:
            return
        self.batch_sizes[len(batch)] = self.batch_sizes.get(len(batch), 0) + 1
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
            if getattr(exc, "sqlstate", None) in RETRYABLE or len(batch) > 1:
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
                        link: Write | None = w
                        answer: WriteResult | None = result
                        while link is not None and answer is not None:  # with those joined (Write.then)
                            notify = notify or _wakes(link, answer)
                            timers = timers or _later(link, now)
                            appended.update(e.eid for e in link.entries)
                            announced += link.announcements
                            link, answer = link.then, answer.then
                if notify:
                    await conn.execute(f"SELECT pg_notify({CHANNEL_SQL}, $1)", payload(self.origin, timers))
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
        if w.intent is None or w.items or any(new.items for new in w.executions):
            return None  # items go with the generic path, in the write's transaction
        return _SINGLE.get(w.intent)

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
                if getattr(exc, "sqlstate", None) not in RETRYABLE or attempt == 4:
                    return (None, exc)
                await asyncio.sleep(0.01 * (attempt + 1))
        raise AssertionError("unreachable")
