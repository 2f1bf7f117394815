"""The suite's forked CLI calls (``tests/forked.py``) behave as new interpreters do: the same
output, standard error and return code, the call's own directory and environment, and a call
that outlives its timeout killed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from . import forked

pytestmark = pytest.mark.e2e


def real(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "flowli.cli", *args], capture_output=True, text=True, timeout=60,
                          check=False, **kwargs)  # type: ignore[call-overload]


@pytest.mark.parametrize("args", [["--help"], ["ls", "--help"], ["no-such-command"], ["--db", "nope", "ls"],
                                  ["--db", "", "ls"]])
def test_a_forked_call_answers_as_a_new_interpreter_does(args: list[str]):
    made, fresh = forked.run(args), real(args)
    assert (made.returncode, made.stdout, made.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert made.args == [sys.executable, "-m", "flowli.cli", *args]


def test_a_call_has_its_own_directory_environment_and_input(tmp_path: Path):
    env = {**os.environ, "FLOWLI_DB": "sqlite:///here.db", "COLUMNS": "40"}
    made = forked.run(["apps", "create", "billing", "--json"], cwd=tmp_path, env=env)
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["application"]["name"] == "billing"
    assert (tmp_path / "here.db").exists()  # the relative path, in the call's directory
    # the consoles take the width of the call's environment (they are made when the CLI is imported)
    narrow = forked.run(["--help"], cwd=tmp_path, env=env)
    wide = forked.run(["--help"], cwd=tmp_path, env={**env, "COLUMNS": "200"})
    assert narrow.returncode == wide.returncode == 0
    assert max(map(len, narrow.stdout.splitlines())) <= 40 < max(map(len, wide.stdout.splitlines()))
    assert narrow.stdout == real(["--help"], cwd=tmp_path, env=env).stdout
    # a module of the call's own PYTHONPATH, imported by the call alone
    (tmp_path / "callapp.py").write_text("import flowli\nregistry = flowli.Registry()\n")
    listed = forked.run(["--app", "callapp:registry", "ls"], cwd=tmp_path, env=env)
    assert listed.returncode == 0, listed.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    start = ["--db", "sqlite:///f.db", "--app", "callapp:registry", "start", "x"]
    missing = forked.run(start, cwd=elsewhere, env=env)  # another directory: not found
    assert missing.returncode == 2 and "no module named 'callapp'" in missing.stderr
    assert (missing.returncode, missing.stderr) == (lambda r: (r.returncode, r.stderr))(real(start, cwd=elsewhere, env=env))


def test_a_call_that_outlives_its_timeout_is_killed(tmp_path: Path):
    db = f"sqlite:///{tmp_path / 'f.db'}"
    began = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        forked.run(["--db", db, "serve", "--port", "0"], timeout=2)
    assert time.monotonic() - began < 10
    after = forked.run(["--db", db, "apps", "ls"])  # the zygote serves on
    assert after.returncode == 0, after.stderr


def test_calls_from_many_threads_at_once_each_get_their_own_answer(tmp_path: Path):
    from concurrent.futures import ThreadPoolExecutor

    def create(n: int) -> tuple[int, str]:
        env = {**os.environ, "FLOWLI_DB": f"sqlite:///{tmp_path / f'{n}.db'}"}
        made = forked.run(["apps", "create", f"app{n}", "--json"], env=env)
        assert made.returncode == 0, made.stderr
        return n, json.loads(made.stdout)["application"]["name"]

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(create, range(16)))
    assert answers == [(n, f"app{n}") for n in range(16)]
    assert all((tmp_path / f"{n}.db").exists() for n in range(16))
