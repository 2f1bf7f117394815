"""Run workloads W1–W4 of BENCH.md: ``python -m bench.run [--workloads W1,W2] [--runs 3] [--n N]``.

Every run gets a fresh SQLite file in a temp dir (durable settings as shipped) and its own event
loop, with the worker in the same process as the client. Each run prints one JSON line on
stdout; the summary table of medians goes to stderr, so that stdout stays JSON lines only.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import importlib.metadata
import io
import json
import os
import platform
import pstats
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import traceback
from typing import Any

from .workloads import WORKLOADS, Workload


def versions() -> dict[str, Any]:
    try:
        flowli_version = importlib.metadata.version("flowli")
    except importlib.metadata.PackageNotFoundError:
        import flowli

        flowli_version = flowli.__version__
    return {
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "flowli": flowli_version,
        "commit": _commit(),
    }


def _commit() -> str | None:
    """The checked-out commit of the repository, with ``+dirty`` for uncommitted changes (read only)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}+dirty" if dirty else head


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"platform": platform.platform(), "cpu": platform.processor() or platform.machine()}
    try:
        import psutil

        info["cores_logical"] = psutil.cpu_count(logical=True)
        info["cores_physical"] = psutil.cpu_count(logical=False)
        info["ram_gb"] = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:
        info["cores_logical"] = os.cpu_count()
    return info


def run_once(workload: Workload, n: int, options: dict[str, Any]) -> dict[str, Any]:
    """One run on a fresh database, in a fresh event loop."""
    with tempfile.TemporaryDirectory(prefix=f"flowli-bench-{workload.id}-") as db_dir:
        return asyncio.run(workload.run(db_dir, n, **options))


def profile_once(workload: Workload, n: int, options: dict[str, Any]) -> dict[str, Any]:
    """One run under pyinstrument if it is installed, else cProfile; the report goes to stderr."""
    try:
        from pyinstrument import Profiler  # type: ignore[import-not-found]
    except ImportError:
        Profiler = None
    if Profiler is not None:
        profiler = Profiler(async_mode="enabled")
        profiler.start()
        try:
            line = run_once(workload, n, options)
        finally:
            profiler.stop()
        print(profiler.output_text(unicode=True, color=False, show_all=False), file=sys.stderr)
        return line
    prof = cProfile.Profile()
    prof.enable()
    try:
        line = run_once(workload, n, options)
    finally:
        prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("cumulative").print_stats(30)
    stats.sort_stats("tottime").print_stats(25)
    print(f"--- cProfile of {workload.id} (n={n}) ---\n{out.getvalue()}", file=sys.stderr)
    return line


def workload_options(workload: Workload, args: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = {"concurrency": args.concurrency}
    if workload.id == "W4":
        options["sleep_s"] = args.sleep
    return options


def summarize(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Medians over the runs of each workload (failed runs excluded)."""
    by: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        if "error" not in line and not line.get("profiled"):
            by.setdefault(line["workload"], []).append(line)
    rows = []
    for wid, runs in by.items():
        row: dict[str, Any] = {"workload": wid, "n": runs[0]["n"], "runs": len(runs), "unit": runs[0]["unit"]}
        for field in ("wall_s", "rate", "p50_ms", "p99_ms"):
            values = [r[field] for r in runs if r.get(field) is not None]
            row[field] = statistics.median(values) if values else None
        rows.append(row)
    return rows


def print_table(rows: list[dict[str, Any]], header: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    v, m = header["versions"], header["machine"]
    table = Table(
        title="flowli on sqlite: medians",
        caption=(f"python {v['python']}, sqlite {v['sqlite']}, flowli {v['flowli']} ({v['commit']}); "
                 f"{m.get('cores_logical')} cores, {m.get('ram_gb', '?')} GB RAM"),
    )
    for col in ("workload", "n", "runs", "wall s", "rate", "unit", "p50 ms", "p99 ms"):
        table.add_column(col, justify="left" if col in ("workload", "unit") else "right")

    def fmt(x: Any, digits: int) -> str:
        return "-" if x is None else f"{x:.{digits}f}"

    for r in rows:
        table.add_row(r["workload"], str(r["n"]), str(r["runs"]), fmt(r["wall_s"], 3), fmt(r["rate"], 1),
                      r["unit"] if r["rate"] is not None else "-", fmt(r["p50_ms"], 2), fmt(r["p99_ms"], 2))
    Console(file=sys.stderr).print(table)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="sqlite", choices=["sqlite"], help="the store (only sqlite for now)")
    p.add_argument("--workloads", default="W1,W2,W3,W4", help="comma-separated ids (default: W1,W2,W3,W4)")
    p.add_argument("--runs", type=int, default=3, help="runs per workload (default 3)")
    p.add_argument("--n", type=int, default=None, help="override n of every selected workload")
    p.add_argument("--concurrency", type=int, default=64, help="worker concurrency (default 64)")
    p.add_argument("--sleep", type=float, default=1.0, help="W4's sleep in seconds (default 1)")
    p.add_argument("--profile", action="store_true",
                   help="add one profiled run per workload (pyinstrument if installed, else cProfile), "
                        "report on stderr, not counted in the medians")
    args = p.parse_args(argv)
    ids = [w.strip().upper() for w in args.workloads.split(",") if w.strip()]
    unknown = [w for w in ids if w not in WORKLOADS]
    if unknown:
        p.error(f"unknown workloads {unknown}; known: {', '.join(WORKLOADS)}")
    if args.runs < 1:
        p.error("--runs must be at least 1")
    args.ids = ids
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    header = {"versions": versions(), "machine": machine()}
    lines: list[dict[str, Any]] = []
    failed = False
    for wid in args.ids:
        workload = WORKLOADS[wid]
        n = args.n if args.n is not None else workload.default_n
        options = workload_options(workload, args)
        plan: list[int | str] = [*range(1, args.runs + 1)] + (["profile"] if args.profile else [])
        for run in plan:
            try:
                if run == "profile":
                    line = profile_once(workload, n, options) | {"profiled": True}
                else:
                    line = run_once(workload, n, options)
            except Exception as exc:  # a failed run is reported and the bench goes on
                traceback.print_exc(file=sys.stderr)
                failed = True
                line = {"engine": "flowli", "backend": args.backend, "workload": wid, "n": n,
                        "error": f"{type(exc).__name__}: {exc}"}
            line = line | {"run": run} | header
            lines.append(line)
            print(json.dumps(line), flush=True)
    print_table(summarize(lines), header)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
