"""``flowli inbox`` and ``flowli review``, run as a user runs them: in subprocesses, in a working
directory of their own, on a real SQLite file, with a worker in a background process."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import flowli
from flowli.domain import EntryKind

from .test_cli import assert_refused, cli_env, in_directory

pytestmark = pytest.mark.e2e

APP = "inboxapp:registry"
APP_SOURCE = textwrap.dedent(
    """
    import flowli
    from flowli.patterns import review

    registry = flowli.Registry()


    @registry.workflow("expense")
    async def expense(ctx, claim: dict) -> dict:
        return await review(ctx, f"expense {claim['id']}", claim)


    @registry.workflow("waiter")
    async def waiter(ctx) -> str:
        return await ctx.receive("go")
    """
)

Flowli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    (tmp_path / "inboxapp.py").write_text(APP_SOURCE)
    return tmp_path


@pytest.fixture
def flowli_cli(cwd: Path) -> Flowli:
    return in_directory(cwd)


@pytest.fixture
def worker(cwd: Path) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "flowli.cli", "worker", "--app", APP, "--concurrency", "8"],
        cwd=cwd, env=cli_env(cwd), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
    )
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)


def wait_for_output(flowli_cli: Flowli, args: tuple[str, ...], text: str, timeout: float = 30) -> str:
    """The output of ``flowli *args`` once it contains ``text``; a bounded wait."""
    deadline = time.monotonic() + timeout
    while True:
        result = flowli_cli(*args)
        assert result.returncode == 0, result.stderr
        if text in result.stdout:
            return result.stdout
        if time.monotonic() > deadline:
            pytest.fail(f"{text!r} did not appear in `flowli {' '.join(args)}` within {timeout} s:\n{result.stdout}")
        time.sleep(0.2)


def start(flowli_cli: Flowli, *args: str) -> str:
    started = flowli_cli("start", *args, "--app", APP, "--by", "alice@example.com")
    assert started.returncode == 0, started.stderr
    return started.stdout.strip()


def test_inbox_lists_the_review_and_flowli_review_approves_it(flowli_cli, worker, cwd):
    eid = start(flowli_cli, "expense", '{"id": "c-17", "amount": 80}')
    listed = wait_for_output(flowli_cli, ("inbox",), eid)
    [row] = [line for line in listed.splitlines() if eid in line]
    assert "expense c-17" in row and "humans" in row

    reviewed = flowli_cli("review", eid, "--approve", "--reason", "ok", "--by", "carol@example.com")
    assert reviewed.returncode == 0, reviewed.stderr
    assert eid in reviewed.stdout and "carol@example.com" in reviewed.stdout

    shown = wait_for_output(flowli_cli, ("show", eid), "execution.completed")
    frames = shown.splitlines()[[i for i, line in enumerate(shown.splitlines()) if "frames of" in line][0]:]
    group = next(i for i, line in enumerate(frames) if "review expense c-17" in line)
    assert all(any(fid in line for line in frames[group + 1:group + 4])
               for fid in ("root/delegate#0", "root/announce#0", "root/announce#1"))  # under the pattern
    assert any("root/delegate#0" in line and "human:carol@example.com" in line for line in shown.splitlines()), shown
    value, memo_by = asyncio.run(result_and_receiver(cwd / "flowli.db", eid))
    assert value == {"approved": True, "reason": "ok", "by": "carol@example.com"}
    assert memo_by == "human:carol@example.com"

    assert eid not in flowli_cli("inbox").stdout and "no review waits for a person" in flowli_cli("inbox").stdout
    closed = [line for line in flowli_cli("inbox", "--all").stdout.splitlines() if eid in line]
    assert len(closed) == 1 and '"approved": true' in closed[0]
    # answered: a second review of it is refused, naming it
    assert_refused(flowli_cli("review", eid, "--reject", "--reason", "late", "--by", "carol@example.com"), eid)


async def result_and_receiver(db: Path, eid: str) -> tuple[object, str]:
    engine = await flowli.connect(f"sqlite:///{db}", flowli.Registry())
    async with engine:
        value = await engine.result(eid, timeout=30)
        [answered] = [e for e in await engine.journal(eid)
                      if e.kind is EntryKind.FRAME_COMPLETED and e.fid == "root/delegate#0"]
    return value, str(answered.provenance.actor)


def test_review_of_an_execution_with_no_open_review_exits_2_naming_it(flowli_cli, worker):
    eid = start(flowli_cli, "waiter")
    wait_for_output(flowli_cli, ("show", eid), "execution.suspended")
    assert_refused(flowli_cli("review", eid, "--approve", "--by", "carol@example.com"), eid, "no open review")
    unknown = "01900000-0000-7000-8000-000000000000"
    assert_refused(flowli_cli("review", unknown, "--approve", "--by", "carol@example.com"), unknown)


def test_review_without_by_or_without_a_decision_exits_2(flowli_cli, worker):
    eid = start(flowli_cli, "expense", '{"id": "c-18"}')
    wait_for_output(flowli_cli, ("inbox",), eid)
    assert_refused(flowli_cli("review", eid, "--approve"), "--by")
    assert_refused(flowli_cli("review", eid, "--by", "carol@example.com"), "--approve")
    assert eid in flowli_cli("inbox").stdout  # nothing was answered
