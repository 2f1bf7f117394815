"""The PostgreSQL server of the tests.

``FLOWLI_TEST_POSTGRES`` names it (``.ci/run`` sets it): then an unreachable server fails the
PostgreSQL tests. Unset, they use the local server at ``postgresql://postgres@127.0.0.1:5432/test``
when it answers, and skip when it does not (the summary says so in one line). Each test gets a
schema of its own, dropped afterwards.
"""

from __future__ import annotations

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


@contextlib.asynccontextmanager
async def fresh_schema(_: Any = None) -> AsyncIterator[str]:
    """Yields a flowli URL on a new, empty schema; drops it on exit."""
    import asyncpg

    url = server_url()
    schema = f"t_{uuid.uuid4().hex[:16]}"
    conn = await asyncpg.connect(url)  # unreachable with the variable set: the test fails
    try:
        await conn.execute(f'CREATE SCHEMA "{schema}"')
        sep = "&" if "?" in url else "?"
        yield f"{url}{sep}schema={schema}"
    finally:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()
