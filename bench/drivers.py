"""The driver question: the PostgreSQL store on psycopg 3 (async, ``psycopg_pool``) instead of asyncpg.

``PostgresStore`` talks to a small asyncpg surface: a pool with ``acquire()`` and ``fetch``,
``fetchrow``, ``fetchval``, ``execute``, ``close``; a connection with the same four calls
(``execute`` returns the command status, "UPDATE 3") and ``transaction()``, which nests as a
savepoint; asyncpg's ``PostgresError`` (with ``sqlstate``) for errors; and a listener connection
with ``add_listener`` and ``close``. :class:`Pool`, :class:`Connection` and :class:`Listener`
give a psycopg ``AsyncConnectionPool`` that surface:

- ``$n`` placeholders become ``%s``, the arguments reordered (and repeated) to match; a
  literal ``%`` is doubled. A statement without arguments goes as it is (a migration holds
  several statements, which psycopg sends only without parameters).
- connections are in autocommit, as asyncpg's are: a statement alone commits, and
  ``transaction()`` is psycopg's, which issues BEGIN/COMMIT or, nested, a savepoint.
- ``search_path`` and the store's ``SESSION_SETTINGS`` are startup options (``-c name=value``),
  as in the asyncpg store.
- psycopg's errors are raised as asyncpg's ``PostgresError`` of the same SQLSTATE (so that
  the writer retries serialization failures the same way), or ``ConnectionError`` without one.
- prepared statements: psycopg prepares a statement on its 5th run (``prepare_threshold``)
  and keeps ``prepared_max`` of them per connection; 512 here, as asyncpg's cache of the store.

:class:`PsycopgPostgresStore` overrides only ``open`` and ``_listen``; everything else (the
group-commit writer, the plans of ``_apply``, dequeue, renew, reads) is the store of ``src/``.
Run the comparison with ``python -m bench.drivers`` (W1, 3 runs per driver, medians), which is
``python -m bench.run --backend postgresql --workloads W1 --driver asyncpg,psycopg``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import asyncpg
import psycopg
from psycopg_pool import AsyncConnectionPool

import flowli
from flowli.domain import InvalidDatabaseURL
from flowli.store._pg_sql import channel
from flowli.store.postgres import SESSION_SETTINGS, PostgresStore

DRIVERS = ("asyncpg", "psycopg")
log = logging.getLogger("bench.drivers")
PREPARED_MAX = 512


@functools.lru_cache(maxsize=1024)
def translate(sql: str) -> tuple[str, tuple[int, ...]]:
    """``$n`` placeholders to psycopg's ``%s``; returns the statement and, for each ``%s`` in
    order, the index of its argument."""
    order: list[int] = []

    def one(match: re.Match[str]) -> str:
        order.append(int(match.group(1)) - 1)
        return "%s"

    return re.sub(r"\$(\d+)", one, sql.replace("%", "%%")), tuple(order)


def _translated(exc: psycopg.Error) -> BaseException:
    sqlstate = getattr(exc, "sqlstate", None)
    if sqlstate:
        return asyncpg.PostgresError.new({"C": sqlstate, "M": str(exc), "S": "ERROR"})
    return ConnectionError(f"{type(exc).__name__}: {exc}")  # an OSError, as asyncpg's connection errors


@contextlib.contextmanager
def _errors() -> Iterator[None]:
    try:
        yield
    except psycopg.Error as exc:
        raise _translated(exc) from exc


class Connection:
    """One pooled psycopg connection with asyncpg's calls."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]):
        self._conn = conn
        self._cur = conn.cursor()

    async def _run(self, sql: str, args: tuple[Any, ...]) -> psycopg.AsyncCursor[Any]:
        if args:
            query, order = translate(sql)
            params: list[Any] | None = [args[i] for i in order]
        else:
            query, params = sql, None
        with _errors():
            await self._cur.execute(query, params)
        return self._cur

    def is_closed(self) -> bool:
        return bool(self._conn.closed)

    async def fetch(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        cur = await self._run(sql, args)
        with _errors():
            return await cur.fetchall()

    async def fetchrow(self, sql: str, *args: Any) -> tuple[Any, ...] | None:
        cur = await self._run(sql, args)
        with _errors():
            return await cur.fetchone()

    async def fetchval(self, sql: str, *args: Any) -> Any:
        row = await self.fetchrow(sql, *args)
        return None if row is None else row[0]

    async def execute(self, sql: str, *args: Any) -> str:
        cur = await self._run(sql, args)
        return cur.statusmessage or ""

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """BEGIN … COMMIT; nested, a savepoint (psycopg's own nesting)."""
        with _errors():
            async with self._conn.transaction():
                yield


class _Acquire:
    def __init__(self, pool: Pool):
        self.pool = pool
        self.conn: Connection | None = None

    def __await__(self) -> Any:
        return self.pool.take().__await__()

    async def __aenter__(self) -> Connection:
        self.conn = await self.pool.take()
        return self.conn

    async def __aexit__(self, *exc: object) -> None:
        assert self.conn is not None
        await self.pool.release(self.conn)


class Pool:
    """A psycopg ``AsyncConnectionPool`` with asyncpg's pool calls."""

    def __init__(self, pool: AsyncConnectionPool):
        self._pool = pool

    def acquire(self) -> _Acquire:
        """As asyncpg's: ``async with pool.acquire() as conn``, or ``conn = await pool.acquire()``
        and later ``await pool.release(conn)``."""
        return _Acquire(self)

    async def take(self) -> Connection:
        with _errors():
            return Connection(await self._pool.getconn())

    async def release(self, conn: Connection) -> None:
        with _errors():
            await self._pool.putconn(conn._conn)

    async def fetch(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        async with self.acquire() as conn:
            return await conn.fetch(sql, *args)

    async def fetchrow(self, sql: str, *args: Any) -> tuple[Any, ...] | None:
        async with self.acquire() as conn:
            return await conn.fetchrow(sql, *args)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        async with self.acquire() as conn:
            return await conn.fetchval(sql, *args)

    async def execute(self, sql: str, *args: Any) -> str:
        async with self.acquire() as conn:
            return await conn.execute(sql, *args)

    async def close(self) -> None:
        await self._pool.close()


async def create_pool(dsn: str, *, schema: str, min_size: int = 2, max_size: int = 10) -> Pool:
    async def configure(conn: psycopg.AsyncConnection[Any]) -> None:
        conn.prepared_max = PREPARED_MAX

    pool = AsyncConnectionPool(
        dsn, min_size=min_size, max_size=max_size, open=False, configure=configure,
        kwargs={"autocommit": True, "options": " ".join(
            [f'-c search_path="{schema}"', *(f"-c {k}={v}" for k, v in SESSION_SETTINGS.items())]
        )},
    )
    await pool.open(wait=True, timeout=10)
    return Pool(pool)


class Listener:
    """A connection that LISTENs, with asyncpg's ``add_listener`` and ``close``."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]):
        self._conn = conn
        self._tasks: list[asyncio.Task[None]] = []

    @classmethod
    async def connect(cls, dsn: str) -> Listener:
        return cls(await psycopg.AsyncConnection.connect(dsn, autocommit=True))

    async def add_listener(self, channel: str, callback: Callable[[Any, int, str, str], None]) -> None:
        await self._conn.execute(f'LISTEN "{channel}"')

        async def deliver() -> None:
            async for note in self._conn.notifies():
                callback(self, note.pid, note.channel, note.payload)

        self._tasks.append(asyncio.create_task(deliver(), name=f"flowli-psycopg-listen-{channel}"))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._conn.close()


class PsycopgPostgresStore(PostgresStore):
    """The PostgreSQL store of ``src/`` on psycopg 3: only ``_connect_pool``, ``_listen`` (the
    LISTEN connection, without the store's reconnection) and ``_warm`` differ."""

    async def _warm(self) -> None:
        """Nothing: psycopg prepares a statement on the server at its ``prepare_threshold``-th
        run on a connection, not on request as asyncpg does (the first runs of each are parsed
        and planned each time, as with asyncpg before its statement is prepared)."""

    async def _connect_pool(self) -> Any:
        try:
            return await create_pool(self.dsn, schema=self.schema, max_size=self.pool_size)
        except (OSError, psycopg.Error, asyncpg.PostgresError) as exc:
            raise InvalidDatabaseURL(self.url, f"cannot connect: {exc}") from None

    async def _listen(self) -> None:
        try:
            listener = await Listener.connect(self.dsn)
            await listener.add_listener(channel(self.schema), self._on_notify)
        except (OSError, psycopg.Error) as exc:
            log.warning("LISTEN failed (%s); workers poll", exc)
            return
        self._listener = listener  # type: ignore[assignment]


async def open_psycopg_engine(url: str, registry: flowli.Registry | None = None) -> flowli.Engine:
    """An Engine on :class:`PsycopgPostgresStore` (what ``flowli.connect`` does for asyncpg)."""
    from .workloads import registry as bench_registry

    store = PsycopgPostgresStore(url)
    await store.open()
    return flowli.Engine(store, registry or bench_registry)  # type: ignore[arg-type]


def opener(driver: str) -> Callable[[str], Any] | None:
    """The engine opener of a driver for :mod:`bench.workloads` (None: ``flowli.connect``, asyncpg)."""
    if driver == "asyncpg":
        return None
    if driver == "psycopg":
        return open_psycopg_engine
    raise ValueError(f"unknown driver {driver!r}; known: {', '.join(DRIVERS)}")


def versions() -> dict[str, str]:
    import psycopg_pool

    return {"asyncpg": asyncpg.__version__, "psycopg": psycopg.__version__, "psycopg_pool": psycopg_pool.__version__,
            "psycopg_impl": psycopg.pq.__impl__}


def main(argv: list[str] | None = None) -> int:
    """W1 on each driver: ``python -m bench.drivers [--runs 3] [--n 200]`` (other bench.run options pass)."""
    from . import run

    return run.main(["--backend", "postgresql", "--workloads", "W1", "--driver", ",".join(DRIVERS),
                     *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
