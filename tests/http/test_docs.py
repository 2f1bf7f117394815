"""Every command and code block of ``docs/`` runs, as the pages say to run it, read from the pages
at test time (so they cannot drift):

- a page's ``bash`` blocks run in order in one shell (``set -euo pipefail``: a failed command or
  a refused ``curl --fail-with-body`` fails the test), against a real ``flowli serve`` (the
  session's shared one, with an application of the test's own: ``FLOWLI_URL``, ``FLOWLI_KEY``);
- a ``sh`` block's commands run in a fresh folder on a database of their own; a ``flowli serve``
  line is started, must say ``listening on``, and is stopped;
- a ``python`` block that runs ``asyncio.run`` runs as a program; every other one compiles.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .. import forked
from ..pg import fresh_schema

pytestmark = pytest.mark.e2e

DOCS = Path(__file__).resolve().parents[2] / "docs"


def pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def blocks(page: Path, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", page.read_text(), re.S)


def env(**extra: str) -> dict[str, str]:
    """The environment of a page's commands: ``flowli`` on the PATH (this interpreter's)."""
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", **extra}


def test_the_docs_are_there_and_link_to_files_that_exist():
    names = {p.name for p in pages()}
    assert {"README.md", "concepts.md", "worker-protocol.md", "operating.md"} <= names
    readme = (DOCS.parent / "README.md").read_text()
    for page in [*pages(), DOCS.parent / "README.md"]:
        for link in re.findall(r"\]\(([^)#\s]+)", page.read_text()):
            if "://" in link or link.startswith("mailto:"):
                continue
            assert (page.parent / link).exists(), f"{page.name} links to {link}, which is not in the repository"
            assert "shared" not in Path(link).parts, f"{page.name} links outside the project: {link}"
    assert "docs/README.md" in readme


def run_bash(page: Path, url: str, key: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    script = "set -euo pipefail\n" + "\n".join(blocks(page, "bash"))
    return subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, text=True, timeout=120, check=False,
                          env=env(FLOWLI_URL=url, FLOWLI_KEY=key))


def test_the_worker_protocol_runs_step_by_step(service, billing, tmp_path):
    page = DOCS / "worker-protocol.md"
    assert len(blocks(page, "bash")) >= 10
    done = run_bash(page, service.url, billing[1], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert re.search(r"^pipeline \d+$", out, re.M), out
    assert "stage " in out and ": {\"invoiceId\": \"inv-42\"}" in out
    assert '{"accepted":true}' in out.replace(" ", "")
    assert re.search(r"^Completed$", out, re.M), out  # the pipeline after its one stage's result
    assert re.search(r"^201$", out, re.M) and re.search(r"^202$", out, re.M)  # a batch create, a batch result
    assert "['stopped']" in out


def run_sh(block: str, cwd: Path, db: str) -> None:
    """The commands of a ``sh`` block, one by one (comments dropped), on the database ``db``."""
    for line in block.splitlines():
        command = line.split("  #", 1)[0].strip()
        if not command or command.startswith("#"):
            continue
        words = shlex.split(command)
        if words[:2] == ["flowli", "serve"]:
            serve(words, cwd, db)
            continue
        done = subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=120,
                              check=False, env=env(FLOWLI_DB=db))
        assert done.returncode == 0, f"{command}: {done.stdout}{done.stderr}"


def serve(words: list[str], cwd: Path, db: str) -> None:
    """``flowli serve ...`` as written (on a free port unless the line names one): it must come up."""
    args = words[2:]
    if "--port" not in args:
        args += ["--port", "0"]
    else:
        args[args.index("--port") + 1] = "0"
    proc = subprocess.Popen([*forked.FLOWLI, "--db", db, "serve", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env())
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        line = proc.stdout.readline()
        assert line.startswith("listening on "), f"{' '.join(words)}: {line!r} {proc.stderr.read() if proc.poll() else ''}"
        assert time.monotonic() < deadline
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.mark.parametrize("name", ["worker-protocol.md", "operating.md", "concepts.md", "README.md"])
async def test_a_pages_shell_commands_run(name: str, tmp_path: Path):
    page = DOCS / name
    sh = blocks(page, "sh")
    async with fresh_schema() as pg_url:
        for block in sh:
            # a PostgreSQL URL in a page is the test's own schema; anything else is a SQLite file here
            db = pg_url if "postgresql://" in block else f"sqlite:///{tmp_path / 'flowli.db'}"
            run_sh(block.replace("postgresql://flowli@db.internal:5432/flowli", pg_url), tmp_path, db)


@pytest.mark.parametrize("name", ["concepts.md", "operating.md"])
def test_a_pages_python_runs(name: str, tmp_path: Path):
    for n, block in enumerate(blocks(DOCS / name, "python")):
        if "asyncio.run(" not in block:
            compile(block, f"{name} block {n}", "exec")
            continue
        (tmp_path / f"example{n}.py").write_text(block)
        done = subprocess.run([sys.executable, f"example{n}.py"], cwd=tmp_path, capture_output=True, text=True,
                              timeout=60, env=env())
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip(), f"{name} block {n} printed nothing"


def test_the_operating_pages_bash_runs_against_a_service(service, billing, tmp_path):
    page = DOCS / "operating.md"
    done = run_bash(page, service.url, billing[1], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "# HELP flowli_queue_depth " in done.stdout and "# HELP flowli_stage_duration_seconds " in done.stdout
