"""Where a run's database lives: a fresh SQLite file, or a fresh schema on a PostgreSQL server.

``fresh_url(backend)`` yields a flowli URL on an empty database and removes it afterwards: a
temporary directory for SQLite; for PostgreSQL a new schema ``bench_<hex>`` on the server of
``FLOWLI_BENCH_POSTGRES`` (default ``postgresql://postgres@127.0.0.1:5432/test``), passed to
flowli as ``?schema=`` and dropped (``CASCADE``) on exit.

``fresh_dbos_url(backend)`` does the same for DBOS Transact, the peer (:mod:`bench.peer_dbos`): a
SQLite file in a temporary directory (``sqlite:////tmp/.../dbos.sqlite``), or a new database
``bench_dbos_<hex>`` on the same server (DBOS puts its tables in a schema ``dbos`` of the
database it is given), dropped (``WITH (FORCE)``) on exit.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import uuid
from collections.abc import AsyncIterator
from typing import Any

BACKENDS = ("sqlite", "postgresql")
POSTGRES_ENV = "FLOWLI_BENCH_POSTGRES"
POSTGRES_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"


def postgres_server() -> str:
    """The URL of the bench's PostgreSQL server (without a schema)."""
    return os.environ.get(POSTGRES_ENV) or POSTGRES_DEFAULT


def backend_of(url: str) -> str:
    scheme = url.split("://", 1)[0].lower()
    return "postgresql" if scheme in ("postgresql", "postgres") else scheme


def sqlite_url(db_dir: str) -> str:
    return f"sqlite:///{os.path.abspath(os.path.join(db_dir, 'bench.db'))}"


def with_schema(server: str, schema: str) -> str:
    return f"{server}{'&' if '?' in server else '?'}schema={schema}"


async def postgres_reachable(server: str | None = None, timeout: float = 3.0) -> bool:
    import asyncpg

    try:
        conn = await asyncpg.connect(server or postgres_server(), timeout=timeout)
    except (OSError, asyncpg.PostgresError, ValueError, TimeoutError):
        return False
    await conn.close()
    return True


async def postgres_info(server: str | None = None) -> dict[str, Any]:
    """The server version and the durability settings the figures depend on."""
    import asyncpg

    conn = await asyncpg.connect(server or postgres_server())
    try:
        info = {"server_version": await conn.fetchval("SHOW server_version")}
        for name in ("fsync", "synchronous_commit", "max_connections", "shared_buffers"):
            info[name] = await conn.fetchval(f"SHOW {name}")
        return info
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def fresh_postgres_schema(server: str | None = None) -> AsyncIterator[str]:
    """A flowli URL on a new, empty schema of the server; the schema is dropped on exit."""
    import asyncpg

    server = server or postgres_server()
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(server)
    try:
        await conn.execute(f'CREATE SCHEMA "{schema}"')
        yield with_schema(server, schema)
    finally:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()


@contextlib.asynccontextmanager
async def fresh_url(backend: str, prefix: str = "flowli-bench-") -> AsyncIterator[str]:
    """A flowli URL on an empty database of ``backend``, removed on exit."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix=prefix) as db_dir:
            yield sqlite_url(db_dir)
    elif backend == "postgresql":
        async with fresh_postgres_schema() as url:
            yield url
    else:
        raise ValueError(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")


def dbos_sqlite_url(db_dir: str) -> str:
    return f"sqlite:///{os.path.abspath(os.path.join(db_dir, 'dbos.sqlite'))}"


def with_database(server: str, database: str) -> str:
    """The URL of ``server`` with its database replaced (the query, if any, kept)."""
    base, _, query = server.partition("?")
    scheme, _, rest = base.partition("://")
    host = rest.split("/", 1)[0]
    return f"{scheme}://{host}/{database}" + (f"?{query}" if query else "")


@contextlib.asynccontextmanager
async def fresh_postgres_database(server: str | None = None, prefix: str = "bench_dbos_") -> AsyncIterator[str]:
    """The URL of a new, empty database on the server; the database is dropped on exit."""
    import asyncpg

    server = server or postgres_server()
    name = f"{prefix}{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(server)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
        yield with_database(server, name)
    finally:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.close()


@contextlib.asynccontextmanager
async def fresh_dbos_url(backend: str, prefix: str = "dbos-bench-") -> AsyncIterator[str]:
    """A DBOS ``system_database_url`` on an empty database of ``backend``, removed on exit."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix=prefix) as db_dir:
            yield dbos_sqlite_url(db_dir)
    elif backend == "postgresql":
        async with fresh_postgres_database() as url:
            yield url
    else:
        raise ValueError(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")
