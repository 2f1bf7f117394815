"""The test command's own behaviour: the PostgreSQL tests use the local server when no URL is
given and it answers, skip when none does (and fail when the URL is given: CI gives it); the
summary names each reason to skip once; every test has exactly one tier, and a unit test that
reaches for a connection, a database or a process fails (each rule run in a pytest of its own,
on a folder whose conftest is the suite's rules, ``tests/tiers.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from . import pg


@pytest.mark.unit
def test_without_a_url_the_local_server_is_used_when_it_answers_else_the_tests_skip(monkeypatch):
    monkeypatch.delenv(pg.ENV, raising=False)
    monkeypatch.setattr(pg, "_local_server_answers", lambda: True)
    assert pg.server_url() == pg.DEFAULT
    monkeypatch.setattr(pg, "_local_server_answers", lambda: False)
    with pytest.raises(pytest.skip.Exception, match="no PostgreSQL server answers at"):
        pg.server_url()
    monkeypatch.setenv(pg.ENV, "postgresql://ci@db:5432/ci")
    assert pg.server_url() == "postgresql://ci@db:5432/ci"  # given: used, never skipped


def run_pytest(folder: Path, tests: str, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest on ``folder`` holding ``tests`` (a module), the suite's rules as its conftest and
    the tiers declared as in the project."""
    (folder / "conftest.py").write_text((Path(__file__).parent / "tiers.py").read_text())
    (folder / "pytest.ini").write_text("[pytest]\nmarkers =\n    unit: u\n    integration: i\n    e2e: e\n")
    (folder / "test_many.py").write_text(textwrap.dedent(tests))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", "--strict-markers",
                           *args, str(folder)], capture_output=True, text=True, cwd=folder,
                          env={**os.environ, "PYTHONPATH": ""}, timeout=120)


@pytest.mark.e2e
def test_the_summary_names_each_reason_to_skip_once(tmp_path: Path):
    out = run_pytest(tmp_path, """
        import pytest

        pytestmark = pytest.mark.unit

        @pytest.mark.parametrize("n", range(5))
        def test_needs_a_server(n):
            pytest.skip("no server here")

        def test_needs_a_peer():
            pytest.skip("no peer here")

        def test_runs():
            assert True
    """)
    lines = out.stdout.splitlines()
    assert sorted(line for line in lines if line.startswith("skipped ")) == [
        "skipped 1: no peer here", "skipped 5: no server here"]
    assert not [line for line in lines if line.startswith("SKIPPED")]
    assert "1 passed, 6 skipped" in out.stdout


@pytest.mark.e2e
def test_a_test_without_a_tier_or_with_two_stops_the_collection_naming_it(tmp_path: Path):
    out = run_pytest(tmp_path, """
        import pytest

        def test_untiered():
            assert True

        @pytest.mark.unit
        @pytest.mark.e2e
        def test_twice():
            assert True

        @pytest.mark.integration
        def test_fine():
            assert True
    """)
    assert out.returncode == 4, out.stdout + out.stderr  # a usage error: nothing ran
    said = out.stdout + out.stderr
    assert "every test needs exactly one tier marker" in said
    assert "test_many.py::test_untiered: no tier" in said and "test_many.py::test_twice: e2e, unit" in said
    assert "test_fine" not in said
    selected = run_pytest(tmp_path, """
        import pytest

        pytestmark = pytest.mark.integration

        def test_a():
            assert True

        @pytest.mark.parametrize("n", [1, 2])
        def test_b(n):
            assert n
    """, "-m", "integration")
    assert "3 passed" in selected.stdout, selected.stdout


@pytest.mark.e2e
def test_a_unit_test_that_reaches_for_a_connection_a_database_or_a_process_fails(tmp_path: Path):
    out = run_pytest(tmp_path, """
        import asyncio
        import socket
        import sqlite3
        import subprocess
        import sys

        import pytest

        @pytest.mark.unit
        def test_socket():
            socket.create_connection(("127.0.0.1", 9), timeout=1)

        @pytest.mark.unit
        def test_sqlite(tmp_path):
            sqlite3.connect(str(tmp_path / "x.db"))

        @pytest.mark.unit
        def test_process():
            subprocess.run([sys.executable, "-c", "pass"])

        @pytest.mark.unit
        def test_async_process():
            asyncio.run(asyncio.create_subprocess_exec(sys.executable, "-c", "pass"))

        @pytest.mark.unit
        def test_pure():
            assert sorted([2, 1]) == [1, 2]

        @pytest.mark.integration
        def test_integration_may(tmp_path):
            sqlite3.connect(str(tmp_path / "y.db")).close()
    """)
    lines = out.stdout.splitlines()
    failed = sorted(line.split("::")[1].split(" ")[0] for line in lines if line.startswith("FAILED"))
    assert failed == ["test_async_process", "test_process", "test_socket", "test_sqlite"], out.stdout
    assert "a unit test may not open a network connection: mark it integration or e2e" in out.stdout
    assert "a unit test may not open a SQLite database" in out.stdout
    assert "a unit test may not start a process" in out.stdout
    assert "4 failed, 2 passed" in out.stdout
