"""The fixtures every part of the suite may use, and the suite's rules (``tests/tiers.py``: each
test in exactly one tier, ``unit``, ``integration`` or ``e2e``; the summary of skips).

The shared servers: one ``flowli serve`` per backend for the whole session (``servers``), which
the HTTP, dashboard and MCP tests reach through ``service``, each with applications of its own
named by ``names`` (``tests/served.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from . import pg
from .served import Names, Servers, Service
from .tiers import _unit_tests_stay_pure as _unit_tests_stay_pure
from .tiers import pytest_collection_modifyitems as pytest_collection_modifyitems
from .tiers import pytest_terminal_summary as pytest_terminal_summary


@pytest.fixture(scope="session", autouse=True)
def _emptied_schemas_dropped() -> Iterator[None]:
    """The PostgreSQL schemas kept for reuse (``tests/pg.py``) are dropped when the session ends."""
    yield
    pg.drop_clean()


@pytest.fixture(scope="session")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """The session's shared ``flowli serve`` processes (one per backend, started on first use)."""
    started = Servers(Path(tmp_path_factory.mktemp("served")))
    yield started
    started.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def service(request: pytest.FixtureRequest, servers: Servers, monkeypatch: pytest.MonkeyPatch) -> Service:
    """The session's shared server on a SQLite file, and on a PostgreSQL schema; the test types'
    effects of this test go to the server's file (name what you fix and count with ``names``)."""
    monkeypatch.setenv("FLOWLI_TEST_EFFECTS", str(servers.effects))
    return servers.get(request.param)


@pytest.fixture
def names() -> Names:
    """Names (of applications, users, buckets) that no other test of the session uses."""
    return Names()


