"""The benchmark's own workload functions, once each with a tiny n: the JSON line has the fields of
BENCH.md and every execution completed. SQLite always; PostgreSQL (W1–W4 on both drivers, W5 with
worker processes, its SIGKILL variant) when ``FLOWLI_TEST_POSTGRES`` names a server, else those
tests skip saying so. W6 in-process and in a child process. DBOS Transact, the peer (each run a
child process), when it is installed (the ``bench`` extra), else those tests skip saying so. No
timing assertions (performance belongs in bench/)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import pytest

import flowli
from flowli.domain import Status
from flowli.store.postgres import parse_url

from .pg import fresh_schema, server_url

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import child, drivers, targets, w5, w6, workloads  # noqa: E402
from bench import run as bench_run  # noqa: E402

COMMON = {"engine", "backend", "workload", "n", "wall_s", "rate", "unit"}

SMALL = [
    ("W1", 5, {}, "bench.sequential", "steps/s", 5),
    ("W2", 20, {}, "bench.fan_out", "steps/s", 1),
    ("W3", 5, {}, "bench.one_step", "workflows/s", 5),
    ("W4", 5, {"sleep_s": 0.1}, "bench.sleep", "s", 5),
    ("W7", 12, {"window": 4}, "bench.ping_pong", "x", 1),
]


async def statuses_in(url: str, workflow: str) -> list[Status]:
    """The statuses of the executions of ``workflow``, read back from the database the run left."""
    engine = await flowli.connect(url, workloads.registry)
    async with engine:
        summaries = await engine.list(workflow=workflow, limit=10_000)
        return [(await engine.status(s.eid)).status for s in summaries]


def check_line(line: dict[str, Any], backend: str, workload: str, n: int, unit: str) -> None:
    assert COMMON <= set(line), COMMON - set(line)
    assert (line["engine"], line["backend"], line["workload"], line["n"], line["unit"]) == (
        "flowli", backend, workload, n, unit)
    assert line["wall_s"] > 0
    json.dumps(line)  # one JSON line


async def run_small(url: str, backend: str, wid: str, n: int, options: dict[str, Any], workflow: str, unit: str,
                    expected_executions: int, opener: Any = None) -> None:
    line = await asyncio.wait_for(
        workloads.WORKLOADS[wid].run(url, n, concurrency=8, opener=opener, **options), timeout=60)
    check_line(line, backend, wid, n, unit)
    # the run checked every result itself; check again from the database the run left
    assert await statuses_in(url, workflow) == [Status.COMPLETED] * expected_executions
    if wid in ("W1", "W2"):
        assert line["steps"] == (n * 10 if wid == "W1" else n)
        assert line["rate"] > 0
    if wid == "W3":
        assert 0 < line["p50_ms"] <= line["p99_ms"] <= line["max_ms"]
    if wid == "W4":
        assert line["rate"] is None and line["sleep_s"] == 0.1
    if wid == "W7":
        assert line["first_ms"] > 0 and line["last_ms"] > 0
        assert abs(line["rate"] - line["last_ms"] / line["first_ms"]) <= 0.06  # the growth, to 0.1


@pytest.mark.integration
@pytest.mark.parametrize("wid, n, options, workflow, unit, expected_executions", SMALL)
async def test_workload_runs_and_completes_on_sqlite(
    tmp_path: Any, wid: str, n: int, options: dict[str, Any], workflow: str, unit: str, expected_executions: int
) -> None:
    await run_small(targets.sqlite_url(str(tmp_path)), "sqlite", wid, n, options, workflow, unit, expected_executions)


@pytest.mark.integration
@pytest.mark.parametrize("driver", ["asyncpg", "psycopg"])
@pytest.mark.parametrize("wid, n, options, workflow, unit, expected_executions", SMALL)
async def test_workload_runs_and_completes_on_postgresql(
    driver: str, wid: str, n: int, options: dict[str, Any], workflow: str, unit: str, expected_executions: int
) -> None:
    async with fresh_schema() as url:
        await run_small(url, "postgresql", wid, n, options, workflow, unit, expected_executions,
                        opener=drivers.opener(driver))


@pytest.mark.e2e
async def test_w5_runs_on_two_worker_processes() -> None:
    async with fresh_schema() as url:
        line = await asyncio.wait_for(w5.run_w5(url, 6, procs=2, concurrency=8), timeout=120)
        check_line(line, "postgresql", "W5", 6, "steps/s")
        assert (line["procs"], line["variant"], line["steps"]) == (2, "plain", 60)
        assert sum(line["steps_by_process"]) == 60  # each step completed once, by some process
        assert line["worker_exits"] == [0, 0]  # both stopped cleanly on SIGTERM
        assert line["worker_log"]["tracebacks"] == 0
        assert await statuses_in(url, "bench.sequential") == [Status.COMPLETED] * 6
        # where the CPU went while timed: the workers ran the 60 steps (the client's share of so
        # short a run can be below the 10 ms that the kernel counts CPU time in)
        cpu = line["cpu_s"]
        assert cpu["workers"] > 0 and cpu["client"] >= 0, cpu
        assert set(cpu) <= {"client", "workers", "postgresql", "other"}, cpu
        # a share of all cores, over a span that holds both readings of the processes' times: at
        # most 1 but for the kernel's 10 ms ticks of each process (this run is sub-second)
        assert 0 < line["machine_busy"] < 2, line["machine_busy"]


@pytest.mark.e2e
async def test_w5_sigkill_variant_completes_all_with_each_step_memoized_once() -> None:
    async with fresh_schema() as url:
        line = await asyncio.wait_for(w5.run_w5(url, 10, procs=2, kill=True, concurrency=8, ttl=1.0), timeout=120)
        check_line(line, "postgresql", "W5", 10, "steps/s")
        assert line["variant"] == "sigkill" and line["killed_after"] >= 5
        assert line["worker_exits"][0] == -9 and line["worker_exits"][1] == 0
        assert sum(line["steps_by_process"]) == 100  # the journals hold one frame.completed per step
        assert await statuses_in(url, "bench.sequential") == [Status.COMPLETED] * 10


@pytest.mark.unit
def test_translate_numbers_placeholders_in_order_and_doubles_percent() -> None:
    sql, order = drivers.translate("SELECT $2, x LIKE 'a%' FROM t WHERE ($1::text IS NULL OR y = $1::text) LIMIT $3")
    assert sql == "SELECT %s, x LIKE 'a%%' FROM t WHERE (%s::text IS NULL OR y = %s::text) LIMIT %s"
    assert order == (1, 0, 0, 2)


@pytest.mark.integration
async def test_psycopg_pool_answers_like_asyncpg() -> None:
    """The adapter's statuses, rows, savepoints and errors (asyncpg's type, same SQLSTATE)."""
    import asyncpg

    async with fresh_schema() as url:
        dsn, schema = parse_url(url)
        pool = await drivers.create_pool(dsn, schema=schema)
        try:
            await pool.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v BIGINT)")
            assert await pool.execute("INSERT INTO t VALUES ($1, $2), ($3, $2)", "a", 1, "b") == "INSERT 0 2"
            async with pool.acquire() as conn, conn.transaction():
                with pytest.raises(asyncpg.UniqueViolationError) as info:
                    async with conn.transaction():  # a savepoint: only it rolls back
                        await conn.execute("INSERT INTO t VALUES ($1, $2)", "c", 3)
                        await conn.execute("INSERT INTO t VALUES ($1, $2)", "a", 9)
                assert info.value.sqlstate == "23505"
                assert await conn.execute("UPDATE t SET v = v + $1 WHERE k = ANY($2::text[])", 1, ["a", "b"]) == "UPDATE 2"
            assert await pool.fetch("SELECT k, v FROM t ORDER BY k") == [("a", 2), ("b", 2)]
            assert await pool.fetchrow("SELECT k FROM t WHERE k = $1", "zz") is None
            assert await pool.fetchval("SELECT count(*) FROM t WHERE ($1::text IS NULL OR k = $1::text)", None) == 2
        finally:
            await pool.close()


# ---- the command line -----------------------------------------------------------------------


@pytest.mark.integration
def test_run_prints_one_json_line_per_run_with_versions_and_machine(capsys: pytest.CaptureFixture[str]) -> None:
    code = bench_run.main(["--backend", "sqlite", "--workloads", "W2,W3", "--runs", "2", "--n", "4",
                           "--concurrency", "4"])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = [json.loads(x) for x in out.splitlines() if x.strip()]
    assert [(x["workload"], x["run"]) for x in lines] == [("W2", 1), ("W2", 2), ("W3", 1), ("W3", 2)]
    for x in lines:
        assert "error" not in x and x["backend"] == "sqlite"
        assert set(x["versions"]) >= {"python", "sqlite", "flowli"}
        assert x["machine"]["cores_logical"] >= 1 and x["machine"]["ram_gb"] > 0
    assert "medians" in err


@pytest.mark.integration
def test_run_on_postgresql_alternates_drivers_and_compares_them(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(targets.POSTGRES_ENV, server_url())
    code = bench_run.main(["--backend", "postgresql", "--workloads", "W1", "--runs", "2", "--n", "3",
                           "--concurrency", "4", "--driver", "asyncpg,psycopg"])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = [json.loads(x) for x in out.splitlines() if x.strip()]
    assert [(x["run"], x["driver"]) for x in lines] == [
        (1, "asyncpg"), (1, "psycopg"), (2, "asyncpg"), (2, "psycopg")]
    assert all(x["backend"] == "postgresql" and "error" not in x for x in lines)
    assert set(lines[0]["postgresql"]) >= {"server_version", "fsync", "synchronous_commit"}
    assert "W1: psycopg" in err and "vs asyncpg" in err


@pytest.mark.unit
def test_summary_takes_medians_per_case_and_skips_failed_runs() -> None:
    lines = [
        {"workload": "W1", "backend": "sqlite", "n": 3, "unit": "steps/s", "wall_s": w, "rate": r}
        for w, r in ((1.0, 30.0), (3.0, 10.0), (2.0, 15.0))
    ] + [{"workload": "W1", "backend": "sqlite", "n": 3, "error": "TimeoutError"}] + [
        {"workload": "W5", "backend": "postgresql", "driver": "asyncpg", "procs": 4, "variant": v, "n": 2,
         "unit": "steps/s", "wall_s": 1.0, "rate": r, "recovery_s": 2.0 if v == "sigkill" else None}
        for v, r in (("plain", 100.0), ("sigkill", 20.0))
    ]
    rows = bench_run.summarize(lines)
    assert [(r["workload"], r["variant"], r["runs"], r["wall_s"], r["rate"]) for r in rows] == [
        ("W1", "", 3, 2.0, 15.0), ("W5", "4 procs", 1, 1.0, 100.0), ("W5", "4 procs, SIGKILL", 1, 1.0, 20.0)]
    assert rows[0]["p50_ms"] is None and rows[2]["recovery_s"] == 2.0


@pytest.mark.integration
async def test_engine_close_leaves_no_pending_tasks(tmp_path: Any) -> None:
    """After a bench run has closed its engine, no task of the engine is left on the loop: a task
    left waiting forever on an engine Event is destroyed pending ("Task was destroyed but it is
    pending!") when the engine is collected."""
    await workloads.run_w2(targets.sqlite_url(str(tmp_path)), 4, concurrency=4)
    await asyncio.sleep(0.05)
    left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert left == [], [(t.get_name(), t.get_coro()) for t in left]


# ---- W6, and DBOS Transact, the peer ----------------------------------------------------------


@pytest.mark.integration
async def test_w6_suspends_all_then_drains_on_sqlite(tmp_path: Any) -> None:
    url = targets.sqlite_url(str(tmp_path))
    line = await asyncio.wait_for(w6.run_w6(url, 6, concurrency=4), timeout=60)
    check_line(line, "sqlite", "W6", 6, "executions/s")
    assert 0 < line["rss_base_mb"] <= line["peak_rss_mb"] and line["rss_suspended_mb"] <= line["peak_rss_mb"]
    assert line["suspend_s"] >= line["start_s"] and line["drain_s"] == line["wall_s"] >= line["signal_s"]
    assert await statuses_in(url, "bench.wait_signal") == [Status.COMPLETED] * 6


@pytest.mark.e2e
async def test_w6_in_a_child_process_reports_the_child_memory(tmp_path: Any) -> None:
    line = await asyncio.wait_for(child.run_child("flowli", "W6", targets.sqlite_url(str(tmp_path)), 4), timeout=120)
    check_line(line, "sqlite", "W6", 4, "executions/s")
    # the child's own high-water mark, not this (bigger) test process's
    assert 0 < line["peak_rss_mb"] and 0 < line["rss_sampled_peak_mb"] <= line["peak_rss_mb"] * 1.5
    assert await statuses_in(targets.sqlite_url(str(tmp_path)), "bench.wait_signal") == [Status.COMPLETED] * 4


def dbos_installed() -> None:
    """DBOS Transact is a dev dependency: without it these tests fail, they never skip."""
    import dbos  # noqa: F401


def dbos_statuses(db_file: str) -> dict[str, int]:
    """The workflow statuses that DBOS left in its SQLite system database, counted."""
    import sqlite3

    conn = sqlite3.connect(db_file)
    try:
        return dict(conn.execute("SELECT status, count(*) FROM workflow_status GROUP BY status").fetchall())
    finally:
        conn.close()


DBOS_SMALL = [("W1", 3, {}, "steps/s", 3), ("W2", 10, {}, "steps/s", 1), ("W3", 3, {}, "workflows/s", 3),
              ("W4", 3, {"sleep_s": 0.1}, "s", 3), ("W6", 5, {}, "executions/s", 5)]


@pytest.mark.e2e
@pytest.mark.parametrize("wid, n, options, unit, workflows", DBOS_SMALL)
async def test_dbos_workload_runs_in_a_child_on_sqlite(
    tmp_path: Any, wid: str, n: int, options: dict[str, Any], unit: str, workflows: int
) -> None:
    dbos_installed()
    db_file = str(tmp_path / "dbos.sqlite")
    line = await asyncio.wait_for(child.run_child("dbos", wid, f"sqlite:///{db_file}", n, **options), timeout=120)
    assert COMMON <= set(line) and (line["engine"], line["backend"], line["workload"], line["n"], line["unit"]) == (
        "dbos", "sqlite", wid, n, unit)
    assert line["wall_s"] > 0 and line["dbos"]
    assert dbos_statuses(db_file) == {"SUCCESS": workflows}  # read back from the file the child left


@pytest.mark.e2e
async def test_dbos_runs_on_a_fresh_postgresql_database_dropped_after(monkeypatch: pytest.MonkeyPatch) -> None:
    dbos_installed()
    import asyncpg

    server = server_url()
    monkeypatch.setenv(targets.POSTGRES_ENV, server)
    async with targets.fresh_dbos_url("postgresql") as url:
        name = url.rsplit("/", 1)[1].split("?")[0]
        line = await asyncio.wait_for(child.run_child("dbos", "W1", url, 3), timeout=120)
        conn = await asyncpg.connect(url)
        try:
            assert await conn.fetchval("SELECT count(*) FROM dbos.workflow_status WHERE status = 'SUCCESS'") == 3
        finally:
            await conn.close()
    assert (line["engine"], line["backend"], line["steps"]) == ("dbos", "postgresql", 30)
    conn = await asyncpg.connect(server)
    try:
        assert await conn.fetchval("SELECT count(*) FROM pg_database WHERE datname = $1", name) == 0
    finally:
        await conn.close()


@pytest.mark.e2e
def test_run_with_both_engines_prints_lines_of_each_and_their_ratios(capsys: pytest.CaptureFixture[str]) -> None:
    dbos_installed()
    code = bench_run.main(["--backend", "sqlite", "--engines", "flowli,dbos", "--workloads", "W2,W6", "--runs", "1",
                           "--n", "4", "--concurrency", "4"])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = [json.loads(x) for x in out.splitlines() if x.strip()]
    assert [(x["workload"], x["engine"]) for x in lines] == [
        ("W2", "flowli"), ("W2", "dbos"), ("W6", "flowli"), ("W6", "dbos")]
    assert all("error" not in x and x["versions"]["dbos"] for x in lines)
    assert "flowli vs DBOS" in err and "peak RSS MB" in err


@pytest.mark.unit
def test_ratios_say_greater_than_one_when_flowli_is_better() -> None:
    def row(engine: str, wid: str, **figures: float) -> dict[str, Any]:
        return {"engine": engine, "workload": wid, "backend": "sqlite", "driver": None, "variant": "", **figures}

    rows = [row("flowli", "W1", rate=300.0), row("dbos", "W1", rate=100.0),
            row("flowli", "W3", p50_ms=2.0, p99_ms=8.0), row("dbos", "W3", p50_ms=4.0, p99_ms=4.0),
            row("flowli", "W6", wall_s=1.0, peak_rss_mb=100.0, kb_per_suspended=5.0),
            row("dbos", "W6", wall_s=3.0, peak_rss_mb=50.0, kb_per_suspended=5.0)]
    got = {(r["workload"], r["figure"]): r["ratio"] for r in bench_run.engine_ratios(rows)}
    assert got == {("W1", "steps/s"): 3.0, ("W3", "p50 ms"): 2.0, ("W3", "p99 ms"): 0.5, ("W6", "drain s"): 3.0,
                   ("W6", "peak RSS MB"): 0.5, ("W6", "KiB per suspended"): 1.0}


@pytest.mark.e2e
def test_the_projection_bench_fills_catches_up_and_times_a_new_process(capfd: pytest.CaptureFixture[str]) -> None:
    """``bench.projection`` with a tiny n: its lines name the first catch-up and a new process's
    first list, which sees every execution (it reads the persisted projection, not a replay)."""
    import subprocess

    server_url()  # skips without a server
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-m", "bench.projection", "--n", "300", "--runs", "1"], cwd=root,
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "FLOWLI_BENCH_POSTGRES": server_url()})
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert [line["workload"] for line in lines] == ["projection-catch-up", "projection-first-list"]
    assert lines[0]["completed"] == lines[1]["completed"] == 300
    assert lines[1]["first_list_s"] > 0


@pytest.mark.e2e
@pytest.mark.parametrize("workload,n", [("H1", 20), ("H2", 5), ("H3", 10)])
def test_the_http_workloads_run_through_a_real_service(workload, n):
    from bench.http import run

    line = run(workload, n)
    assert (line["engine"], line["workload"], line["n"]) == ("flowli", workload, n)
    assert line["rate"] > 0 and (line.get("stages") == n * (3 if workload == "H3" else 1) or workload == "H2")


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_the_composition_bench_runs_both_sides_and_reports_the_overhead(backend):
    from bench.catalog import one_run

    line = await one_run(backend, 8)
    assert line["workload"] == "C1" and line["steps_per_run"] == 12
    assert line["composition_runs_per_s"] > 0 and line["plain_runs_per_s"] > 0
    assert "overhead_ms_per_step" in line and line["ratio_plain_over_composition"] > 0


@pytest.mark.e2e
def test_the_mcp_bench_drives_a_real_service_with_the_sdk_client():
    from bench.assistants import one_run

    m1, m2 = one_run(3, 2, 2)
    assert m1["workload"] == "M1" and 0 < m1["p50_ms"] <= m1["p99_ms"]
    assert m2["workload"] == "M2" and m2["runs"] == 4 and m2["runs_per_s"] > 0


@pytest.mark.e2e
def test_the_dashboard_benchmark_runs_end_to_end_once_small(tmp_path):
    """D1 and D2 with 20 runs stored, one round: every page answered and every append reached the
    browser (the bench's own failure count), a line per page and round then its summary."""
    import subprocess

    out = tmp_path / "dashboard.jsonl"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "bench/dashboard.py", "--runs", "20", "--rounds", "1", "--requests", "5",
                           "--appends", "2", "--backend", "sqlite", "--port", "0", "--out", str(out)],
                          cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    summaries = [x for x in lines if "median_of" in x]
    assert {x["workload"] for x in summaries} == {"D1", "D2"}
    assert all(x["failures"] == 0 and x["p50_ms"] > 0 for x in summaries), summaries
    assert any(x["page"] == "runs" and x["stored"] == 20 for x in summaries), summaries


@pytest.mark.e2e
async def test_the_clients_micro_benchmark_measures_each_candidate(service: Any, names: Any) -> None:
    """bench.clients against the shared ``flowli serve``: every request answered 200, a CPU figure
    per request for httpx and the streams client (and aiohttp where the bench extra installed it)."""
    from bench import clients

    _, key, _ = await service.application(names("clients"))
    lines = await clients.measure(service.url, key, 20, 2)
    by = {line["client"]: line for line in lines}
    assert {"httpx", "streams"} <= set(by)
    for line in lines:
        assert line["requests"] == 20 and line["cpu_us_per_request"] > 0 and line["rate"] > 0, line


@pytest.mark.e2e
def test_h1b_runs_on_postgresql_and_reports_the_cpu_of_each_part(monkeypatch):
    from bench.http import run

    monkeypatch.setenv("FLOWLI_BENCH_POSTGRES", server_url())
    # 200 stages: the worker's CPU is read in clock ticks (10 ms), and 40 stages of about 0.4 ms
    # each once came to no tick at all on a loaded machine
    line = run("H1B", 200, "postgresql")
    assert (line["backend"], line["workload"], line["stages"]) == ("postgresql", "H1B", 200)
    parts = line["cpu_ms_per_stage"]
    assert parts["service"] > 0 and parts["postgresql"] > 0 and parts["worker"] > 0
    assert line["commits_per_stage"] > 0


@pytest.mark.unit
def test_the_scaling_model_is_bound_by_the_cores_or_by_a_single_loop_process():
    from bench.scaling import simulate

    costs = {"service": 0.5, "postgresql": 0.3, "worker": 0.1, "client": 0.1, "commits": 0.0, "serial": 0.0}
    # 1 ms of CPU a stage on 2 cores: about 2,000 stages/s when no part runs out of processes
    wide = simulate(costs, cores=2, service=2, workers=2)
    assert 1800 < wide.stages_per_s <= 2000 and wide.bound == "cores"
    # one service process is one core: 0.5 ms a stage there caps the rate at 2,000, and on 8 cores it binds
    narrow = simulate(costs, cores=8, service=1, workers=4)
    assert 1800 < narrow.stages_per_s <= 2000 and narrow.bound == "service processes"
    # a notify-serialized commit of 1 ms a stage caps it at 1,000 whatever the cores
    serial = simulate({**costs, "commits": 1.0, "serial": 1.0}, cores=16, service=16, workers=8)
    assert 900 < serial.stages_per_s <= 1000 and serial.bound == "notify-serialized commits"
