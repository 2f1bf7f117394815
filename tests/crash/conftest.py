"""Every crash test runs on both backends: a SQLite file, and a fresh PostgreSQL schema (the
worker processes get its URL, ``?schema=`` included)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from ..pg import fresh_schema
from . import Workers


@pytest.fixture(params=["sqlite", "postgresql"])
async def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'flow.db'}"  # tmp_path is absolute: sqlite:////tmp/...
    else:
        async with fresh_schema() as url:
            yield url


@pytest.fixture
def workers(tmp_path: Path, db_url: str) -> Iterator[Workers]:
    """The worker processes of the test; killed at its end, whatever happened."""
    w = Workers(tmp_path, db_url)
    try:
        yield w
    finally:
        w.close()
