"""The benchmark's own workload functions, once each with a tiny n: the JSON line has the fields of
BENCH.md and every execution completed. No timing assertions (performance belongs in bench/)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import pytest

import flowli
from flowli.domain import Status

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import run as bench_run  # noqa: E402
from bench import workloads  # noqa: E402

COMMON = {"engine", "backend", "workload", "n", "wall_s", "rate", "unit"}


async def statuses_in_file(db_dir: str, workflow: str) -> list[Status]:
    """The statuses of the executions of ``workflow``, read back from the file the run left."""
    engine = await flowli.connect(workloads.db_url(db_dir), workloads.registry)
    async with engine:
        summaries = await engine.list(workflow=workflow, limit=10_000)
        return [(await engine.status(s.eid)).status for s in summaries]


def check_line(line: dict[str, Any], workload: str, n: int, unit: str) -> None:
    assert COMMON <= set(line), COMMON - set(line)
    assert (line["engine"], line["backend"], line["workload"], line["n"], line["unit"]) == (
        "flowli", "sqlite", workload, n, unit)
    assert line["wall_s"] > 0
    json.dumps(line)  # one JSON line


@pytest.mark.parametrize(
    "wid, n, options, workflow, unit, expected_executions",
    [
        ("W1", 5, {}, "bench.sequential", "steps/s", 5),
        ("W2", 20, {}, "bench.fan_out", "steps/s", 1),
        ("W3", 5, {}, "bench.one_step", "workflows/s", 5),
        ("W4", 5, {"sleep_s": 0.1}, "bench.sleep", "s", 5),
    ],
)
async def test_workload_runs_and_completes(
    tmp_path: Any, wid: str, n: int, options: dict[str, Any], workflow: str, unit: str, expected_executions: int
) -> None:
    db_dir = str(tmp_path)
    line = await asyncio.wait_for(workloads.WORKLOADS[wid].run(db_dir, n, concurrency=8, **options), timeout=60)
    check_line(line, wid, n, unit)
    # the run checked every result itself; check again from the file the run left
    statuses = await statuses_in_file(db_dir, workflow)
    assert statuses == [Status.COMPLETED] * expected_executions
    if wid in ("W1", "W2"):
        assert line["steps"] == (n * 10 if wid == "W1" else n)
        assert line["rate"] > 0
    if wid == "W3":
        assert 0 < line["p50_ms"] <= line["p99_ms"] <= line["max_ms"]
    if wid == "W4":
        assert line["rate"] is None and line["sleep_s"] == 0.1


def test_run_prints_one_json_line_per_run_with_versions_and_machine(capsys: pytest.CaptureFixture[str]) -> None:
    code = bench_run.main(["--workloads", "W2,W3", "--runs", "2", "--n", "4", "--concurrency", "4"])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = [json.loads(x) for x in out.splitlines() if x.strip()]
    assert [(x["workload"], x["run"]) for x in lines] == [("W2", 1), ("W2", 2), ("W3", 1), ("W3", 2)]
    for x in lines:
        assert "error" not in x
        assert set(x["versions"]) >= {"python", "sqlite", "flowli"}
        assert x["machine"]["cores_logical"] >= 1 and x["machine"]["ram_gb"] > 0
    assert "medians" in err


def test_summary_takes_medians_and_skips_failed_runs() -> None:
    lines = [
        {"workload": "W1", "n": 3, "unit": "steps/s", "wall_s": w, "rate": r} for w, r in ((1.0, 30.0), (3.0, 10.0), (2.0, 15.0))
    ] + [{"workload": "W1", "n": 3, "error": "TimeoutError"}]
    (row,) = bench_run.summarize(lines)
    assert (row["runs"], row["wall_s"], row["rate"], row["p50_ms"]) == (3, 2.0, 15.0, None)


async def test_engine_close_leaves_no_pending_tasks(tmp_path: Any) -> None:
    """After a bench run has closed its engine, no task of the engine is left on the loop: a task
    left waiting forever on an engine Event is destroyed pending ("Task was destroyed but it is
    pending!") when the engine is collected."""
    await workloads.run_w2(str(tmp_path), 4, concurrency=4)
    await asyncio.sleep(0.05)
    left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert left == [], [(t.get_name(), t.get_coro()) for t in left]
