"""The ``flowli`` command, run as a user runs it: in a subprocess, in a working directory of
its own, on a real SQLite file. A worker runs in a background process with a test app."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flowli.cli import app
from flowli.engine import COLLECTOR_THRESHOLDS

from . import forked

pytestmark = pytest.mark.e2e

APP = "cliapp:registry"
APP_SOURCE = textwrap.dedent(
    """
    import flowli

    registry = flowli.Registry()


    def double(n):
        return n * 2


    def explode():
        raise ValueError("the ledger is closed")


    @registry.workflow("double")
    async def double_wf(ctx, n: int) -> int:
        return await ctx.step(double, n)


    @registry.workflow("waiter")
    async def waiter(ctx) -> str:
        return await ctx.receive("go")


    def thresholds():
        import gc
        return list(gc.get_threshold())


    @registry.workflow("collector")
    async def collector(ctx) -> list:
        return await ctx.step(thresholds)


    @registry.workflow("changes")
    async def changes(ctx) -> int:
        import pathlib
        first = await ctx.step(double, int(pathlib.Path("n.txt").read_text()))  # a change of code, as a deploy
        await ctx.receive("go")
        return first


    @registry.workflow("waiter_for")
    async def waiter_for(ctx, what: str) -> str:
        return what + ": " + await ctx.receive("go")


    @registry.workflow("explode")
    async def explode_wf(ctx) -> None:
        await ctx.step(explode)


    def slow(marker: str, seconds: float) -> str:
        import pathlib, time
        pathlib.Path(marker).write_text("began")
        time.sleep(seconds)
        return "slept"


    @registry.workflow("slow_then_more")
    async def slow_then_more(ctx, marker: str, seconds: float) -> list:
        return [await ctx.step(slow, marker, seconds), await ctx.step(double, 1)]
    """
)


def cli_env(cwd: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FLOWLI_DB", "FLOWLI_APP")}
    env["PYTHONPATH"] = os.pathsep.join([str(cwd), env.get("PYTHONPATH", "")])
    env["COLUMNS"] = "200"  # one line per journal entry
    return env


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    (tmp_path / "cliapp.py").write_text(APP_SOURCE)
    return tmp_path


@pytest.fixture
def flowli(cwd: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    return in_directory(cwd)


def in_directory(cwd: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``flowli ARGS`` run in ``cwd``, its modules importable (``cli_env``)."""

    def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return forked.run(args, cwd=cwd, env=cli_env(cwd), timeout=timeout)

    return run


@pytest.fixture
def worker(cwd: Path) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "flowli.cli", "worker", "--app", APP, "--concurrency", "8"],
        cwd=cwd, env=cli_env(cwd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


def wait_for_show(flowli: Callable[..., subprocess.CompletedProcess[str]], eid: str, text: str, timeout: float = 30) -> str:
    """The output of ``flowli show eid`` once it contains ``text``; a bounded wait."""
    deadline = time.monotonic() + timeout
    while True:
        shown = flowli("show", eid)
        assert shown.returncode == 0, shown.stderr
        if text in shown.stdout:
            return shown.stdout
        if time.monotonic() > deadline:
            pytest.fail(f"{text!r} did not appear in the journal of {eid} within {timeout} s:\n{shown.stdout}")
        time.sleep(0.2)


def assert_refused(result: subprocess.CompletedProcess[str], *names: str) -> None:
    """Exit code 2 and one line on stderr naming the problem, not a traceback."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for name in names:
        assert name in lines[0]


def line_index(lines: list[str], *parts: str, after: int = -1) -> int:
    """The index of the first line past ``after`` that holds every one of ``parts``."""
    for i, line in enumerate(lines):
        if i > after and all(p in line for p in parts):
            return i
    raise AssertionError(f"no line past {after} holds {parts}:\n" + "\n".join(lines))


# ---- demo ----------------------------------------------------------------------------------


def test_demo_runs_the_invoice_approval_and_prints_its_journal(flowli, cwd):
    result = flowli("demo")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert (cwd / "flowli.db").exists()  # the default database, in the working directory
    journal = out.splitlines()[line_index(out.splitlines(), "journal of invoice_approval"):]
    failed = line_index(journal, "frame.failed", "root/check_fraud#0", "ConnectionError")
    completed = line_index(journal, "frame.completed", "root/check_fraud#0", after=failed)
    received = line_index(journal, "frame.completed", "root/receive#0", "human:carol@example.com", after=completed)
    child = line_index(journal, "frame.completed", "root/notify_accounting#0", after=received)
    line_index(journal, "execution.completed", after=child)
    listed = flowli("ls", "--status", "completed")
    assert "invoice_approval" in listed.stdout and "notify_accounting" in listed.stdout
    eid = next(w for w in out.split() if w.count("-") == 4 and len(w) == 36)
    shown = flowli("show", eid, "--evidence").stdout.splitlines()
    evidence = line_index(shown, "evidence from", str(cwd / "flowli.db-bucket"))  # it says where it looked
    first = line_index(shown, "root/check_fraud#0", "scoring", after=evidence)
    line_index(shown, "root/check_fraud#0", "scoring", after=first)  # one log per attempt: two attempts


# ---- start, worker, show, ls ---------------------------------------------------------------


def test_start_then_a_worker_runs_it_and_show_and_ls_read_it(flowli, worker):
    started = flowli("start", "double", "21", "--app", APP, "--by", "alice@example.com")
    assert started.returncode == 0, started.stderr
    eid = started.stdout.strip()
    uuid.UUID(eid)
    shown = wait_for_show(flowli, eid, "execution.completed")
    assert "human:alice@example.com" in shown  # the provenance of the start
    done = line_index(shown.splitlines(), "frame.completed", "root/double#0", "42")
    line_index(shown.splitlines(), "execution.completed", "42", after=done)
    assert "status" in shown and "completed" in shown.split("status", 1)[1]
    # the list reads the projection of the control log, the second append: it follows the journal
    deadline = time.monotonic() + 30
    while eid not in (listed := flowli("ls", "--workflow", "double", "--status", "completed")).stdout:
        assert time.monotonic() < deadline, f"{eid} not listed as completed within 30 s:\n{listed.stdout}"
        time.sleep(0.2)
    assert eid not in flowli("ls", "--status", "failed").stdout

    worker.send_signal(signal.SIGTERM)
    out, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    assert "worker stopped" in out


def test_a_worker_process_runs_with_the_tuned_collector(flowli, worker):
    # the step reads the collector's settings in the worker's own process (flowli worker runs
    # nothing else, so it tunes them: see flowli.engine.COLLECTOR_THRESHOLDS)
    eid = flowli("start", "collector", "--app", APP).stdout.strip()
    shown = wait_for_show(flowli, eid, "execution.completed").splitlines()
    line_index(shown, "execution.completed", json.dumps(list(COLLECTOR_THRESHOLDS)))
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0


def test_start_wait_runs_a_worker_in_process_and_prints_the_result(flowli):
    result = flowli("--app", APP, "start", "double", "21", "--wait")
    assert result.returncode == 0, result.stderr
    eid, value = result.stdout.split()
    uuid.UUID(eid)
    assert value == "42"
    failed = flowli("--app", APP, "start", "explode", "--wait")
    assert failed.returncode == 1
    assert "the ledger is closed" in failed.stderr and "failed" in failed.stderr


def test_signal_resumes_a_suspended_execution(flowli, worker):
    eid = flowli("start", "waiter", "--app", APP).stdout.strip()
    waiting = wait_for_show(flowli, eid, "execution.suspended").splitlines()
    # the frames of the run, below the journal: the receive waits, on its channel
    line_index(waiting, "waiting", "root/receive#0", "receive", "waits for", after=line_index(waiting, "frames of waiter"))
    sent = flowli("signal", eid, "go", '"hello"', "--by", "bob@example.com")
    assert sent.returncode == 0, sent.stderr
    shown = wait_for_show(flowli, eid, "execution.completed")
    line_index(shown.splitlines(), "frame.completed", "root/receive#0", '"hello"', "human:bob@example.com")
    line_index(shown.splitlines(), "completed", "root/receive#0", after=line_index(shown.splitlines(), "frames of waiter"))


def test_cancel_of_a_suspended_execution_shows_execution_cancelled(flowli, worker):
    started = flowli("start", "waiter", "--app", APP)
    assert started.returncode == 0, started.stderr
    eid = started.stdout.strip()
    wait_for_show(flowli, eid, "execution.suspended")
    cancelled = flowli("cancel", eid, "--by", "dana@example.com")
    assert cancelled.returncode == 0, cancelled.stderr
    shown = wait_for_show(flowli, eid, "execution.cancelled")
    line_index(shown.splitlines(), "execution.cancelled", "dana@example.com")
    # it is terminal now: a second cancel and a signal are refused, and change nothing
    assert_refused(flowli("cancel", eid), eid, "cancelled")
    assert_refused(flowli("signal", eid, "go", "1"), eid, "cancelled")
    assert flowli("show", eid).stdout.count("execution.cancelled") == 1


# ---- refused commands ----------------------------------------------------------------------


def test_signal_to_an_unknown_eid_exits_2_naming_it(flowli, cwd):
    unknown = str(uuid.uuid4())
    assert_refused(flowli("signal", unknown, "go", "1"), unknown)  # no database yet
    assert not (cwd / "flowli.db").exists()
    assert flowli("start", "double", "1", "--app", APP).returncode == 0
    assert_refused(flowli("signal", unknown, "go", "1"), unknown)
    assert_refused(flowli("show", unknown), unknown)


def test_a_bogus_database_url_exits_2_naming_it(flowli):
    assert_refused(flowli("--db", "bogus://x", "ls"), "bogus://x")
    assert_refused(flowli("start", "double", "1", "--app", APP, "--db", "bogus://x"), "bogus://x")


def test_start_of_an_unknown_workflow_exits_2_naming_it_and_writes_nothing(flowli, cwd):
    assert_refused(flowli("start", "no_such_flow", "--app", APP), "no_such_flow")
    assert_refused(flowli("start", "no_such_flow"), "no_such_flow", "--app")
    assert not (cwd / "flowli.db").exists()
    assert_refused(flowli("start", "double", "1", "2", "--app", APP), "double")
    assert "no executions" in flowli("ls").stdout


def test_a_bad_app_exits_2_naming_it(cwd, monkeypatch):
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the CLI puts the working directory on it
    monkeypatch.setitem(sys.modules, "cliapp", None)
    monkeypatch.delitem(sys.modules, "cliapp")  # so that monkeypatch removes the import afterwards
    runner = CliRunner()
    for spec, name in [("no_such_module:registry", "no_such_module"), (f"{APP}x", "registryx"), ("cliapp", "cliapp")]:
        result = runner.invoke(app, ["--app", spec, "start", "double", "1"])
        assert result.exit_code == 2, result.output
        assert name in result.output
    monkeypatch.setenv("FLOWLI_DB", "bogus://from-env")
    result = runner.invoke(app, ["ls"])
    assert result.exit_code == 2 and "bogus://from-env" in result.output


# ---- operations: explain, terminate, retry ------------------------------------------------------


def test_explain_terminate_and_retry_from_the_command_line(flowli, worker):
    eid = flowli("start", "waiter", "--app", APP).stdout.strip()
    wait_for_show(flowli, eid, "execution.suspended")
    explained = flowli("explain", eid)
    assert explained.returncode == 0, explained.stderr
    assert "message" in explained.stdout and f"waits for a message on {eid}.go" in explained.stdout
    # it progressed moments ago: the guard refuses, naming why
    assert_refused(flowli("terminate", eid, "--reason", "stuck"), eid, "within min_idle")
    done = flowli("terminate", eid, "--reason", "nobody will send go", "--min-idle", "0", "--by", "ops@example.com")
    assert done.returncode == 0, done.stderr
    shown = flowli("show", eid).stdout
    assert "Terminated: nobody will send go" in shown and "execution.failed" in shown
    assert "it ended failed" in flowli("explain", eid).stdout

    failed = flowli("--app", APP, "start", "explode", "--wait")
    assert failed.returncode == 1
    exploded = failed.stdout.strip().splitlines()[0]
    retried = flowli("retry", exploded, "--by", "ops@example.com", "--reason", "try once more")
    assert retried.returncode == 0, retried.stderr
    assert "frame root/explode#0 runs again" in retried.stdout
    again = wait_for_show(flowli, exploded, "execution.retried")
    assert "human:ops@example.com" in again
    assert_refused(flowli("retry", eid.replace(eid[-4:], "0000")), "unknown execution")


# ---- a stop waits for the steps under way ----------------------------------------------------


def _worker_with_a_slow_step(
    flowli: Any, cwd: Path, seconds: float, *flags: str
) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "flowli.cli", "worker", "--app", APP, "--grace", "30", *flags],
        cwd=cwd, env=cli_env(cwd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    marker = cwd / "began"
    eid = flowli("start", "slow_then_more", f'"{marker}"', str(seconds), "--app", APP).stdout.strip()
    deadline = time.monotonic() + 30
    while not marker.exists():
        assert time.monotonic() < deadline and proc.poll() is None, "the slow step did not begin"
        time.sleep(0.05)
    return proc, eid


def test_sigterm_waits_for_the_step_under_way_then_hands_the_run_back(flowli, cwd):
    proc, eid = _worker_with_a_slow_step(flowli, cwd, 3.0)
    began = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    took = time.monotonic() - began
    assert proc.returncode == 0, err
    assert "stopping: the running activations end first (up to 30 s)" in out and "worker stopped" in out
    assert 2.0 < took < 25, took  # it waited for the 3 s step, not for the grace
    shown = flowli("show", eid).stdout
    assert "root/slow#0" in shown and "slept" in shown  # the step's outcome is in the journal
    assert "worker stopped" in shown and "root/double#0" not in shown  # handed back at the next frame


def test_a_second_sigterm_stops_at_once_and_hands_the_step_back(flowli, cwd):
    proc, eid = _worker_with_a_slow_step(flowli, cwd, 20.0)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    began = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert time.monotonic() - began < 10
    assert "stopping at once" in out
    shown = flowli("show", eid).stdout
    assert "worker stopped" in shown and "slept" not in shown


def test_lease_ttl_sets_how_long_a_lease_lasts_and_show_names_its_holder_and_expiry(flowli, cwd):
    proc, eid = _worker_with_a_slow_step(flowli, cwd, 20.0, "--lease-ttl", "4")
    try:
        shown = flowli("show", eid).stdout
        held = re.search(r"lease held by (\S+) at epoch 1, expires (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC", shown)
        assert held, shown
        expires = datetime.strptime(held[2], "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)
        left = (expires - datetime.now(timezone.utc)).total_seconds()
        assert -2 < left < 6, left  # 4 s renewed every third of it, not the default 30 s
    finally:
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)


# ---- bad input ---------------------------------------------------------------------------------


def test_a_value_that_is_not_json_is_refused_with_where_and_taken_as_a_string_only_with_string(flowli, cwd):
    assert_refused(flowli("start", "double", "[a,b]", "--app", APP), "argument 1 '[a,b]' is not JSON",
                   "Expecting value at column 2", "--string")
    assert_refused(flowli("start", "double", '{"order": 1', "--app", APP), "is not JSON", "column 12")
    as_string = flowli("start", "waiter_for", "[a,b]", "--string", "--app", APP)
    assert as_string.returncode == 0, as_string.stderr
    eid = as_string.stdout.strip()
    assert '"[a,b]"' in flowli("show", eid).stdout
    assert_refused(flowli("signal", eid, "go", "not json"), "the payload 'not json' is not JSON")
    sent = flowli("signal", eid, "go", "not json", "--string")
    assert sent.returncode == 0, sent.stderr


def test_review_takes_one_decision_and_a_rejection_takes_a_reason(flowli):
    eid = "01234567-89ab-7cde-8f01-23456789abcd"
    assert_refused(flowli("review", eid, "--approve", "--reject", "--by", "c@example.com"), "one decision", "not both")
    assert_refused(flowli("review", eid, "--reject", "--by", "c@example.com"), "a rejection needs --reason")
    assert_refused(flowli("review", eid, "--reject", "--reason", "  ", "--by", "c@example.com"), "needs --reason")


def test_an_empty_database_url_and_an_unreachable_server_are_named(flowli, cwd):
    assert_refused(flowli("--db", "", "ls"), "the database URL is empty")
    env = {**cli_env(cwd), "FLOWLI_DB": ""}
    empty = forked.run(["ls"], cwd=cwd, env=env)
    assert_refused(empty, "the database URL is empty")
    closed = flowli("--db", "postgresql://flowli:secret@127.0.0.1:1/test", "ls")
    assert_refused(closed, "cannot connect to the database at postgresql://flowli:***@127.0.0.1:1/test",
                   "no server answered", "the URL parsed: host 127.0.0.1, port 1, database test")
    assert "secret" not in closed.stderr


def test_a_blocked_run_is_listed_warned_about_and_shown_with_its_arguments(flowli, worker, cwd):
    (cwd / "n.txt").write_text("1")
    eid = flowli("start", "changes", "--app", APP).stdout.strip()
    wait_for_show(flowli, eid, "execution.suspended")
    # a redeploy: the worker goes, and the code that a new worker runs passes another argument
    worker.kill()
    worker.communicate()
    (cwd / "n.txt").write_text("5")
    redeployed = subprocess.Popen(
        [sys.executable, "-m", "flowli.cli", "worker", "--app", APP, "--concurrency", "8"],
        cwd=cwd, env=cli_env(cwd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        _listed_blocked(flowli, eid)
    finally:
        redeployed.kill()
        redeployed.communicate()


def _listed_blocked(flowli: Callable[..., subprocess.CompletedProcess[str]], eid: str) -> None:
    sent = flowli("signal", eid, "go", "true")
    assert sent.returncode == 0, sent.stderr
    deadline = time.monotonic() + 30
    while eid not in (listed := flowli("ls", "--status", "blocked")).stdout:
        assert time.monotonic() < deadline, listed.stdout
        time.sleep(0.2)
    [row] = [line for line in listed.stdout.splitlines() if eid in line]
    assert "blocked" in row
    warned = flowli("signal", eid, "go", "true")
    assert warned.returncode == 0 and f"warning: execution {eid} is blocked" in warned.stderr
    shown = flowli("show", eid).stdout
    assert "recorded args" in shown and '{"args": [1]}' in shown
    assert "current args" in shown and '{"args": [5]}' in shown


def _worker_stderr(cwd: Path, url: str, **env: str) -> str:
    """The stderr of a worker on ``url`` that started (its banner printed) and was stopped."""
    proc = subprocess.Popen([sys.executable, "-m", "flowli.cli", "worker", "--app", APP, "--db", url],
                            cwd=cwd, env={**cli_env(cwd), **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        assert "flowli worker:" in banner, banner
        assert "flowli.dag" not in banner and "composition.save" not in banner  # the application's own only
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        return err
    finally:
        if proc.poll() is None:
            proc.kill()


def test_the_bucket_is_named_by_bucket_or_flowli_bucket_and_a_shared_database_warns_without_one(flowli, cwd):
    from .pg import server_url

    other = cwd / "elsewhere"
    shown = flowli("--bucket", str(other), "show", "01234567-89ab-7cde-8f01-23456789abcd", "--evidence")
    assert shown.returncode == 2 and "unknown execution" in shown.stderr  # the bucket option is taken
    err = _worker_stderr(cwd, server_url())
    assert "warning: evidence goes to" in err and "give every worker one bucket (--bucket DIR or FLOWLI_BUCKET)" in err
    assert "warning: evidence goes to" not in _worker_stderr(cwd, server_url(), FLOWLI_BUCKET=str(other))


async def test_flowli_bucket_sets_where_connect_puts_evidence(tmp_path, monkeypatch):
    import flowli

    monkeypatch.setenv("FLOWLI_BUCKET", str(tmp_path / "shared-bucket"))
    engine = await flowli.connect(f"sqlite:///{tmp_path / 'x.db'}", flowli.Registry())
    async with engine:
        assert engine.options.bucket == str(tmp_path / "shared-bucket")



def test_migrate_checks_the_version_and_warns_when_no_live_worker_runs_it(flowli, worker, cwd):
    (cwd / "cliapp2.py").write_text(textwrap.dedent("""
        import flowli

        registry = flowli.Registry()


        @registry.workflow("waiter", version="1")
        async def waiter(ctx) -> str:
            return await ctx.receive("go")


        @registry.workflow("waiter", version="3")
        async def waiter_v3(ctx) -> str:
            return "v3: " + await ctx.receive("go")


        @registry.workflow("waiter", version="4")
        async def waiter_v4(ctx) -> str:
            await ctx.sleep(__import__("datetime").timedelta(seconds=1))
            return await ctx.receive("go")
    """))
    eid = flowli("start", "waiter", "--app", APP).stdout.strip()
    wait_for_show(flowli, eid, "execution.suspended")
    time.sleep(1.5)  # the worker has written its row: it runs waiter version 1 only
    refused = flowli("migrate", eid, "4", "--app", "cliapp2:registry")
    assert_refused(refused, "version 4 does not replay it", "root/sleep#0", "force it")
    moved = flowli("migrate", eid, "3", "--app", "cliapp2:registry", "--by", "ops@example.com")
    assert moved.returncode == 0, moved.stderr
    assert "now runs version 3" in moved.stdout
    assert "warning: no live worker registers waiter version 3" in moved.stderr


def test_start_checks_its_arguments_against_the_workflows_signature(flowli, cwd):
    """As the catalog checks its inputs: an argument that does not fit its parameter's annotation
    is refused before anything is stored, naming the parameter; one that the annotation reads
    (a JSON string of digits for an ``int``) starts the run with the value it becomes."""
    refused = flowli("start", "double", '"abc"', "--app", APP)
    assert refused.returncode == 2 and refused.stdout == ""
    assert "double(n: int): n: Input should be a valid integer" in refused.stderr, refused.stderr
    assert not (cwd / "flowli.db").exists()  # refused before a database was opened
    started = flowli("start", "double", '"21"', "--app", APP, "--wait", "--timeout", "30")
    assert started.returncode == 0, started.stderr
    assert started.stdout.splitlines()[-1] == "42"  # the run got 21, an int


def test_a_worker_can_replay_every_time_and_refuses_a_negative_cache(flowli, cwd):
    """``--workflow-cache 0``: the worker keeps no run between its activations (each resume
    replays; the function of ``changes`` starts again, and a changed argument blocks the run)."""
    refused = flowli("worker", "--app", APP, "--workflow-cache", "-1")
    assert refused.returncode == 2 and "--workflow-cache" in refused.stderr
    (cwd / "n.txt").write_text("1")
    eid = flowli("start", "changes", "--app", APP).stdout.strip()
    proc = subprocess.Popen(
        [sys.executable, "-m", "flowli.cli", "worker", "--app", APP, "--workflow-cache", "0"],
        cwd=cwd, env=cli_env(cwd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        wait_for_show(flowli, eid, "execution.suspended")
        (cwd / "n.txt").write_text("5")  # the same process, no cache: the resume replays the new code
        _listed_blocked(flowli, eid)
    finally:
        proc.kill()
        proc.communicate()


def _command_paths() -> list[list[str]]:
    """Every command and group of the CLI, as the words that name it (``[]`` is flowli itself)."""
    import typer.main

    def walk(command: Any, path: list[str]) -> Iterator[list[str]]:
        yield path
        for name, sub in (getattr(command, "commands", None) or {}).items():
            yield from walk(sub, [*path, name])

    return list(walk(typer.main.get_command(app), []))


def test_every_help_names_values_and_shows_no_python_types_or_markup() -> None:
    """A flag shows nothing beside it, an option's value its name (``--queue QUEUE``), an
    argument its name alone: never a Python type (``<bool>``, ``<str>``) or a raw backtick."""
    paths = _command_paths()
    assert len(paths) > 30 and ["apps", "create"] in paths and ["serve"] in paths
    for path in paths:
        result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "120"})
        assert result.exit_code == 0, (path, result.output)
        assert not re.search(r"<(bool|str|int|float|list|path|dict)\b", result.output), (path, result.output)
        assert "`" not in result.output, (path, result.output)
    serve = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "120"}).output
    assert re.search(r"--host\s+HOST\s", serve) and re.search(r"--no-worker\s+Serve the routes only", serve), serve
