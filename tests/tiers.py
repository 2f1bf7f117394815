"""The suite's own rules, as a pytest plugin (``tests/conftest.py`` loads it): its tiers, and the
summary of a run.

Every test belongs to exactly one tier, a marker declared in ``pyproject.toml``:

- ``unit``: pure code. No engine, no store, no server: a unit test that opens a network
  connection, a SQLite database or a process fails, naming what it tried;
- ``integration``: real stores (a SQLite file, PostgreSQL) and engines in this process;
- ``e2e``: a real ``flowli serve``, CLI subprocesses, Chromium, processes killed with SIGKILL.

A module says its tier once (``pytestmark = pytest.mark.integration``); a module that mixes tiers
marks each test instead. A test with no tier, or with two, stops the collection with its name.

The summary of a run names each reason to skip once, with how many tests it skipped (the
PostgreSQL tests without a server, the DBOS comparisons without the bench extra).
"""

from __future__ import annotations

import asyncio
import socket
import sqlite3
import subprocess
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

TIERS = ("unit", "integration", "e2e")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wrong = []
    for item in items:
        tiers = {m.name for m in item.iter_markers() if m.name in TIERS}
        if len(tiers) != 1:
            wrong.append(f"{item.nodeid}: {', '.join(sorted(tiers)) or 'no tier'}")
    if wrong:
        raise pytest.UsageError("every test needs exactly one tier marker (unit, integration or e2e):\n  "
                                + "\n  ".join(wrong))


def _refuse(what: str) -> Any:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"a unit test may not {what}: mark it integration or e2e")

    return refused


@pytest.fixture(autouse=True)
def _unit_tests_stay_pure(request: pytest.FixtureRequest) -> Iterator[None]:
    """A ``unit`` test that reaches for a socket, a database or a process fails at once."""
    if request.node.get_closest_marker("unit") is None:
        yield
        return
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket.socket, "connect", _refuse("open a network connection"))
        mp.setattr(socket.socket, "connect_ex", _refuse("open a network connection"))
        mp.setattr(socket.socket, "bind", _refuse("listen on a socket"))
        mp.setattr(sqlite3, "connect", _refuse("open a SQLite database"))
        mp.setattr(subprocess.Popen, "__init__", _refuse("start a process"))
        mp.setattr(asyncio, "create_subprocess_exec", _refuse("start a process"))
        mp.setattr(asyncio, "create_subprocess_shell", _refuse("start a process"))
        yield


def pytest_terminal_summary(terminalreporter: Any) -> None:
    reasons: Counter[str] = Counter()
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        reasons[reason.removeprefix("Skipped: ")] += 1
    for reason, n in sorted(reasons.items()):
        terminalreporter.write_line(f"skipped {n}: {reason}", yellow=True)
