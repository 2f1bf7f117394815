"""The examples run as a person runs them: the scripted assistant session, against the
database that ``flowli demo`` made."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from . import forked

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_the_assistant_session_runs_the_loop_to_completed(tmp_path):
    db = f"sqlite:///{tmp_path / 'flowli.db'}"
    demo = forked.run(["--db", db, "demo"], timeout=120, cwd=tmp_path)
    assert demo.returncode == 0, demo.stderr
    done = subprocess.run([sys.executable, str(EXAMPLES / "assistant_session.py"), "--db", db], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "assistant | invoice_approval" in done.stdout and ": COMPLETED after" in done.stdout
    assert "waits for a message on" in done.stdout  # the stuck-run triage said what it waits on
    assert "did you mean 'notify_accounting'?" in done.stdout  # the draft composition's validation
    assert "fixed: 0 errors" in done.stdout
