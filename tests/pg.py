"""The PostgreSQL server of the tests.

``FLOWLI_TEST_POSTGRES`` names it (``.ci/run`` sets it): then an unreachable server fails the
PostgreSQL tests. Unset, they use the local server at ``postgresql://postgres@127.0.0.1:5432/test``
when it answers, and skip when it does not (the summary says so in one line). Each test gets a
schema of its own, holding no row (see :func:`fresh_schema`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import socket
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

ENV = "FLOWLI_TEST_POSTGRES"
DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"
SKIP = f"no PostgreSQL server answers at {DEFAULT}: set {ENV}=postgresql://user@host:5432/db to run the PostgreSQL tests"


@functools.lru_cache(maxsize=1)
def _local_server_answers() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=1.0):
            return True
    except OSError:
        return False


def server_url() -> str:
    url = os.environ.get(ENV)
    if url:
        return url
    if _local_server_answers():
        return DEFAULT
    pytest.skip(SKIP)


_clean: list[str] = []
"""Schemas of this process that a test used, emptied, at the version the code migrates to."""
_reference: dict[str, Any] = {}
"""What a migration of an empty schema makes: the schema itself, kept untouched (``schema``), its
tables (``tables``), the ones the migration seeds with rows (``seeded``) and version (``version``)."""


@contextlib.asynccontextmanager
async def fresh_schema(_: Any = None, *, empty: bool = False) -> AsyncIterator[str]:
    """Yields a flowli URL on a schema of the test's own, holding no row.

    A schema another test of this process used is emptied after it and given to the next one:
    it holds the tables of the current version, with the rows the migrations seed and nothing
    else, so a store opened on it finds nothing to migrate (the migrations' DDL costs the server
    about 90 ms of CPU, as much as a whole test on SQLite). ``empty=True`` asks for a new schema
    without tables (a test of the migrations themselves). A schema that does not hold the
    current tables afterwards, or cannot be emptied at once, is dropped."""
    import asyncpg

    url = server_url()
    conn = await asyncpg.connect(url)  # unreachable with the variable set: the test fails
    try:
        if not _reference:
            await _learn_reference(conn, url)
        if _clean and not empty:
            schema = _clean.pop()
        else:
            schema = f"t_{uuid.uuid4().hex[:16]}"
            await conn.execute(f'CREATE SCHEMA "{schema}"')
        try:
            yield _url_of(url, schema)
        finally:
            if await _emptied(conn, schema):
                _clean.append(schema)
            else:
                await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


def _url_of(url: str, schema: str) -> str:
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}schema={schema}"


async def _learn_reference(conn: Any, url: str) -> None:
    """Migrate a new schema with the store itself, once per process, and note what it made."""
    from flowli.testing import open_store

    schema = f"t_{uuid.uuid4().hex[:16]}"
    await conn.execute(f'CREATE SCHEMA "{schema}"')
    store = open_store(_url_of(url, schema))
    await store.open()
    await store.close()
    tables = await _tables(conn, schema)
    _reference.update(schema=schema, tables=tables,
                      seeded=[t for t in sorted(tables - {"schema_version"})
                              if await conn.fetchval(f'SELECT count(*) FROM "{schema}"."{t}"')],
                      version=await conn.fetchval(f'SELECT max(version) FROM "{schema}".schema_version'))


async def _tables(conn: Any, schema: str) -> frozenset[str]:
    return frozenset(r[0] for r in await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = $1", schema))


async def _emptied(conn: Any, schema: str) -> bool:
    """Empty ``schema`` for the next test if it holds the current tables (drop any other table a
    test made, and put back the rows the migrations seed); False when it does not, or when it
    cannot be emptied at once (a connection of the test still holds a lock)."""
    import asyncpg

    tables = await _tables(conn, schema)
    if not _reference["tables"] <= tables:
        return False
    try:
        async with conn.transaction():
            await conn.execute("SET LOCAL lock_timeout = '2s'")
            version = await conn.fetchval(f'SELECT max(version) FROM "{schema}".schema_version')
            if version != _reference["version"]:
                return False
            for table in sorted(tables - _reference["tables"]):
                await conn.execute(f'DROP TABLE "{schema}"."{table}" CASCADE')
            for table in sorted(_reference["tables"] - {"schema_version"}):
                await conn.execute(f'DELETE FROM "{schema}"."{table}"')
            for table in _reference["seeded"]:
                await conn.execute(f'INSERT INTO "{schema}"."{table}" SELECT * FROM "{_reference["schema"]}"."{table}"')
            for (sequence,) in await conn.fetch(
                    "SELECT sequence_name FROM information_schema.sequences WHERE sequence_schema = $1", schema):
                await conn.execute(f'ALTER SEQUENCE "{schema}"."{sequence}" RESTART')
    except asyncpg.PostgresError:
        return False
    return True


def drop_clean() -> None:
    """Drop the emptied schemas this process kept for the next tests, and the one it migrated to
    learn from (at the end of a session)."""
    if "schema" in _reference:
        _clean.append(_reference.pop("schema"))
    if not _clean:
        return

    async def drop() -> None:
        import asyncpg

        conn = await asyncpg.connect(server_url())
        try:
            while _clean:
                await conn.execute(f'DROP SCHEMA IF EXISTS "{_clean.pop()}" CASCADE')
        finally:
            await conn.close()

    asyncio.run(drop())
