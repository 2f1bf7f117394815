"""bench/pipelines.py, once each with a tiny size against a real ``flowli serve``: each workload works
its pipelines to Completed through the routes and reports the service's CPU. No timing assertions
(performance belongs in bench/); a figure must be there and positive, which it is only when the
service process was actually measured."""

from __future__ import annotations

import argparse
import os
import sys

import pytest

from .pg import server_url

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import pipelines, targets  # noqa: E402

TINY = argparse.Namespace(n=3, stages=4, stored=120, calls=2, reads=[])


@pytest.mark.unit
def test_cpu_delta_sums_threads_and_falls_back_to_ticks_when_a_thread_ended() -> None:
    before = (1.0, {"1": 1_000_000_000, "2": 500_000_000})
    assert pipelines.ServiceCPU.delta(before, (1.5, {"1": 1_200_000_000, "2": 600_000_000, "3": 100_000_000})) == 0.4
    assert pipelines.ServiceCPU.delta(before, (1.5, {"1": 1_200_000_000})) == 0.5  # thread 2 took its time with it


@pytest.mark.e2e
def test_p1_p2_p3_run_on_sqlite_and_measure_the_service() -> None:
    p1 = pipelines.run("P1", "sqlite", TINY)
    assert [(line["workload"], line["n"]) for line in p1] == [("P1", 3)]
    assert p1[0]["cpu_ms"] > 0 and p1[0]["wall_ms"] > 0 and p1[0]["idle_cpu_ms_per_s"] >= 0
    (p2,) = pipelines.run("P2", "sqlite", TINY)
    assert p2["stages"] == 4 and p2["cpu_ms"] > 0 and p2["get_cpu_ms"] > 0 and p2["wall_s"] > 0
    p3 = pipelines.run("P3", "sqlite", TINY)
    assert [line["stored"] for line in p3] == [100, 120]
    for line in p3:
        assert "error" not in line, line
        assert all(line[f"{read}_cpu_ms"] > 0 for read in pipelines.READS), line


@pytest.mark.e2e
def test_p1_counted_gives_the_services_statements_per_pipeline_by_thread_and_kind() -> None:
    """P1 --count: a one-stage pipeline is three writes (create, pull, result; the ack and the
    control log's appends may share a transaction with others), each of several statements, and
    the routes read points on the event loop's connection."""
    (line,) = pipelines.run("P1", "sqlite", argparse.Namespace(**{**vars(TINY), "n": 10, "count": True}))
    per = line["statements_per_pipeline"]
    assert line["counted"] is True and line["cpu_ms"] > 0
    assert 2 <= per["flowli-sqlite-writer:begin"] <= 8, per
    assert per["flowli-sqlite-writer:statement"] >= 10 * per["flowli-sqlite-writer:begin"] / 3, per
    assert per["MainThread:statement"] >= 3, per  # the key, the task and the stage, at least
    assert "FLOWLI_BENCH_SERVE" not in os.environ  # the next run's service is the plain one again


@pytest.mark.unit
def test_counts_per_pipeline_are_the_differences_of_two_readings_over_n() -> None:
    before = {"w:begin": 10, "w:statement": 100, "r:statement": 5}
    after = {"w:begin": 40, "w:statement": 400, "r:statement": 5, "m:statement": 20}
    # private: the arithmetic of --count, apart from a service to count
    assert pipelines._per(before, after, 10) == {"m:statement": 2.0, "w:begin": 3.0, "w:statement": 30.0}


@pytest.mark.e2e
def test_p1_runs_on_postgresql(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(targets.POSTGRES_ENV, server_url())
    (line,) = pipelines.run("P1", "postgresql", TINY)
    assert line["backend"] == "postgresql" and line["cpu_ms"] > 0
