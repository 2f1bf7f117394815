"""The README's examples run as pasted, in seconds: every complete program (a ``python`` block
that runs ``asyncio.run``) in a fresh folder, the pytest example under pytest, and every other
block at least compiles. They are read from README.md at test time."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


PROGRAMS = [b for b in blocks() if "asyncio.run(" in b]
TESTS = [b for b in blocks() if re.search(r"^async def test_", b, re.M)]


@pytest.mark.unit
def test_the_readme_has_programs_and_a_test_to_run():
    assert len(PROGRAMS) >= 1 and len(TESTS) >= 1


@pytest.mark.e2e
@pytest.mark.parametrize("program", PROGRAMS, ids=lambda b: b.splitlines()[0][:40])
def test_a_readme_program_runs_as_pasted_in_seconds(program: str, tmp_path: Path):
    (tmp_path / "example.py").write_text(program)
    began = time.monotonic()
    out = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert time.monotonic() - began < 30
    assert out.stdout.strip(), "it printed nothing"


@pytest.mark.e2e
@pytest.mark.parametrize("test", TESTS, ids=lambda b: b.splitlines()[0][:40])
def test_a_readme_test_passes_under_pytest(test: str, tmp_path: Path):
    (tmp_path / "test_example.py").write_text(test)
    (tmp_path / "pytest.ini").write_text("[pytest]\nasyncio_mode = auto\n")
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_example.py"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert " passed" in out.stdout


@pytest.mark.unit
@pytest.mark.parametrize("block", blocks(), ids=lambda b: b.splitlines()[0][:40])
def test_every_readme_block_compiles(block: str):
    source = block if "await " not in block or "async def" in block else \
        "async def _():\n" + "\n".join("    " + line for line in block.splitlines())
    compile(source, "README.md", "exec")
