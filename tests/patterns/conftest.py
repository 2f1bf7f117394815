"""The fixtures of the engine tests (every test runs on SQLite and on PostgreSQL), plus the
worker processes of the crash tests of the patterns."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ..engine.conftest import _dump_tasks_if_stuck, db_url, open_engine  # noqa: F401  (fixtures, reused)
from . import PatternWorkers


@pytest.fixture
def workers(tmp_path: Path, db_url: str) -> Iterator[PatternWorkers]:  # noqa: F811
    """The worker processes of the test; killed at its end, whatever happened."""
    w = PatternWorkers(tmp_path, db_url)
    try:
        yield w
    finally:
        w.close()
