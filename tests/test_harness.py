"""The test command's own behaviour: the PostgreSQL tests use the local server when no URL is
given and it answers, skip when none does (and fail when the URL is given: CI gives it), and the
summary names each reason to skip once."""

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


@pytest.mark.e2e
def test_the_summary_names_each_reason_to_skip_once(tmp_path: Path):
    (tmp_path / "conftest.py").write_text((Path(__file__).parent / "conftest.py").read_text())
    (tmp_path / "test_many.py").write_text(textwrap.dedent("""
        import pytest

        @pytest.mark.parametrize("n", range(5))
        def test_needs_a_server(n):
            pytest.skip("no server here")

        def test_needs_a_peer():
            pytest.skip("no peer here")

        def test_runs():
            assert True
    """))
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", str(tmp_path)],
                         capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": ""})
    lines = out.stdout.splitlines()
    assert sorted(line for line in lines if line.startswith("skipped ")) == [
        "skipped 1: no peer here", "skipped 5: no server here"]
    assert not [line for line in lines if line.startswith("SKIPPED")]
