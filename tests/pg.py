"""The PostgreSQL server of the tests: its URL comes from one environment variable.

``FLOWLI_TEST_POSTGRES`` (e.g. ``postgresql://postgres@127.0.0.1:5432/test``). Unset: the
PostgreSQL tests skip with a message saying so. Set (as ``.ci/run`` does): an unreachable server
fails them. Each test gets a schema of its own, dropped afterwards.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

ENV = "FLOWLI_TEST_POSTGRES"


def server_url() -> str:
    url = os.environ.get(ENV)
    if not url:
        pytest.skip(f"PostgreSQL tests need a server: set {ENV}=postgresql://user@host:5432/db (CI sets it)")
    return url


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
