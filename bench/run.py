"""Run the workloads of BENCH.md: ``python -m bench.run [--backend sqlite,postgresql] [--workloads W1,W2] [--runs 3] [--engines flowli,dbos]``.

Every run gets a fresh database (a SQLite file in a temp dir, or a new PostgreSQL schema, dropped
afterwards; see :mod:`bench.targets`) and its own event loop. W1–W4 run the worker in the same
process as the client; W5 (PostgreSQL only) runs worker processes (:mod:`bench.w5`); W6 runs in a
subprocess of its own (:mod:`bench.w6`, :mod:`bench.child`), whose RSS it reports. With
``--engines flowli,dbos``, the same workloads run on DBOS Transact too (:mod:`bench.peer_dbos`,
each run a subprocess on a fresh database; not W5). Each run prints one JSON line on stdout; the
summary table of medians (and, with both engines, their ratios) goes to stderr, so that stdout
stays JSON lines only.
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
import traceback
from dataclasses import dataclass, field
from typing import Any

from . import targets
from .workloads import WORKLOADS, Workload

HTTP_WORKLOADS = ("H1", "H2", "H3")
ALL_WORKLOADS = (*WORKLOADS, "W5", "W6", *HTTP_WORKLOADS)
ENGINES = ("flowli", "dbos", "temporal")
"""dbos is the peer of W1-W6; temporal the peer of H1-H3 (bench.http, bench.peer_temporal)."""
W5_DEFAULT_N = 2000
W6_DEFAULT_N = 10_000


def versions() -> dict[str, Any]:
    try:
        flowli_version = importlib.metadata.version("flowli")
    except importlib.metadata.PackageNotFoundError:
        import flowli

        flowli_version = flowli.__version__
    out: dict[str, Any] = {
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "flowli": flowli_version,
        "commit": _commit(),
    }
    for dist in ("asyncpg", "psycopg", "psycopg-pool", "dbos", "sqlalchemy"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


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


def loadavg() -> float | None:
    """The 1-minute load average when a run starts (other processes on the machine skew figures)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


# ---- what runs ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One configuration that runs ``--runs`` times: a workload on a backend (and driver)."""

    workload: str
    backend: str
    n: int
    driver: str | None = None
    options: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    engine: str = "flowli"

    @property
    def in_child(self) -> bool:
        """DBOS runs and W6 run in a subprocess of their own (:mod:`bench.child`)."""
        return self.engine != "flowli" or self.workload == "W6"

    @property
    def variant(self) -> str:
        if self.workload != "W5":
            return ""
        return f"{self.options['procs']} procs" + (", SIGKILL" if self.options.get("kill") else "")


async def _run_case(case: Case) -> dict[str, Any]:
    if case.in_child:
        from .child import run_child

        fresh = targets.fresh_dbos_url if case.engine == "dbos" else targets.fresh_url
        async with fresh(case.backend) as url:
            line = await run_child(case.engine, case.workload, url, case.n, sleep_s=case.options.get("sleep_s"),
                                   concurrency=case.options.get("concurrency") if case.engine == "flowli" else None)
        if case.backend == "postgresql" and case.engine == "flowli":
            line["driver"] = case.driver or "asyncpg"
        return line
    async with targets.fresh_url(case.backend, prefix=f"flowli-bench-{case.workload}-") as url:
        if case.workload == "W5":
            from .w5 import run_w5

            line = await run_w5(url, case.n, **case.options)
        else:
            opener = None
            if case.driver not in (None, "asyncpg"):
                from .drivers import opener as driver_opener

                opener = driver_opener(case.driver)
            line = await WORKLOADS[case.workload].run(url, case.n, opener=opener, **case.options)
    if case.backend == "postgresql":
        line["driver"] = case.driver or "asyncpg"
    return line


def run_once(case: Case) -> dict[str, Any]:
    """One run on a fresh database, in a fresh event loop."""
    load = loadavg()
    return asyncio.run(_run_case(case)) | {"loadavg": load}


def profile_once(case: Case, tool: str = "auto", top: int = 30) -> dict[str, Any]:
    """One run under pyinstrument (``auto``: if it is installed) or cProfile; the report goes to stderr."""
    title = f"{case.workload} on {case.backend}{'/' + case.driver if case.driver else ''} (n={case.n})"
    Profiler = None
    if tool != "cprofile":
        try:
            from pyinstrument import Profiler  # type: ignore[import-not-found]
        except ImportError:
            if tool == "pyinstrument":
                raise
    if Profiler is not None:
        profiler = Profiler(async_mode="enabled")
        profiler.start()
        try:
            line = run_once(case)
        finally:
            profiler.stop()
        print(f"--- pyinstrument of {title} ---", file=sys.stderr)
        print(profiler.output_text(unicode=True, color=False, show_all=False), file=sys.stderr)
        return line
    prof = cProfile.Profile()
    prof.enable()
    try:
        line = run_once(case)
    finally:
        prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    print(f"--- cProfile of {title} ---\n{out.getvalue()}", file=sys.stderr)
    return line


def cases(args: argparse.Namespace) -> list[list[Case]]:
    """The cases of each selected workload, in order; a workload's cases alternate run by run."""
    groups: list[list[Case]] = []
    for wid in args.ids:
        group: list[Case] = []
        if wid == "W5" and "dbos" in args.engines:
            print("W5 runs on flowli only (worker processes): DBOS skipped", file=sys.stderr)
        if wid == "W5" and "flowli" not in args.engines:
            continue
        if wid == "W5":
            if "postgresql" not in args.backends:
                print("W5 runs on PostgreSQL only: skipped (no postgresql in --backend)", file=sys.stderr)
                continue
            n = args.n if args.n is not None else W5_DEFAULT_N
            common = {"concurrency": args.concurrency, "ttl": args.w5_ttl}
            group += [Case("W5", "postgresql", n, "asyncpg", {"procs": p, **common}) for p in args.w5_procs]
            if args.w5_kill_procs:
                group.append(Case("W5", "postgresql", n, "asyncpg", {"procs": args.w5_kill_procs, "kill": True, **common}))
        else:
            if wid == "W6":
                n = args.n if args.n is not None else args.w6_n
            else:
                workload: Workload = WORKLOADS[wid]
                n = args.n if args.n is not None else workload.default_n
            options: dict[str, Any] = {"concurrency": args.concurrency}
            if wid == "W4":
                options["sleep_s"] = args.sleep
            for backend in args.backends:
                for engine in args.engines:
                    if engine == "dbos" and wid == "W7":
                        print("W7 runs on flowli only (the issue's workload, not BENCH.md's): DBOS skipped",
                              file=sys.stderr)
                        continue
                    if engine == "dbos":
                        group.append(Case(wid, backend, n, None, options, engine="dbos"))
                        continue
                    drivers = args.drivers if backend == "postgresql" else [None]
                    if wid == "W6" and backend == "postgresql":
                        drivers = ["asyncpg"]  # W6 runs in a child on the store as shipped
                    for driver in drivers:
                        group.append(Case(wid, backend, n, driver, options))
        groups.append(group)
    return groups


# ---- summary --------------------------------------------------------------------------------


def _key(line: dict[str, Any]) -> tuple[Any, ...]:
    return (line.get("engine", "flowli"), line["workload"], line.get("backend", "sqlite"), line.get("driver"),
            line.get("procs"), line.get("variant"))


FIGURES = ("wall_s", "rate", "p50_ms", "p99_ms", "recovery_s", "overhead_s", "peak_rss_mb", "rss_suspended_mb",
           "kb_per_suspended")


def summarize(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Medians over the runs of each case (failed and profiled runs excluded)."""
    by: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for line in lines:
        if "error" not in line and not line.get("profiled"):
            by.setdefault(_key(line), []).append(line)
    rows = []
    for (engine, wid, backend, driver, procs, variant), runs in by.items():
        row: dict[str, Any] = {"engine": engine, "workload": wid, "backend": backend, "driver": driver,
                               "n": runs[0]["n"], "runs": len(runs), "unit": runs[0]["unit"], "variant": ""}
        if procs is not None:
            row["variant"] = f"{procs} procs" + (", SIGKILL" if variant == "sigkill" else "")
        for name in FIGURES:
            values = [r[name] for r in runs if r.get(name) is not None]
            row[name] = statistics.median(values) if values else None
        rows.append(row)
    return rows


def print_table(rows: list[dict[str, Any]], header: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    v, m = header["versions"], header["machine"]
    pg = header.get("postgresql")
    caption = (f"python {v['python']}, sqlite {v['sqlite']}, flowli {v['flowli']} ({v['commit']}); "
               f"{m.get('cores_logical')} cores, {m.get('ram_gb', '?')} GB RAM")
    if pg:
        caption += (f"; PostgreSQL {pg['server_version']} (fsync {pg['fsync']}, synchronous_commit "
                    f"{pg['synchronous_commit']}), asyncpg {v.get('asyncpg')}, psycopg {v.get('psycopg')}")
    if v.get("dbos"):
        caption += f"; dbos {v['dbos']} (sqlalchemy {v.get('sqlalchemy')})"
    table = Table(title="medians", caption=caption)
    for col in ("workload", "engine", "backend", "variant", "n", "runs", "wall s", "rate", "unit", "p50 ms",
                "p99 ms", "peak RSS MB"):
        table.add_column(col, justify="left" if col in ("workload", "engine", "backend", "variant", "unit") else "right")

    def fmt(x: Any, digits: int) -> str:
        return "-" if x is None else f"{x:.{digits}f}"

    for r in rows:
        backend = r["backend"] + (f"/{r['driver']}" if r.get("driver") else "")
        variant = r.get("variant", "")
        if r.get("recovery_s") is not None:
            variant += f" (recovery {r['recovery_s']:.1f} s)"
        table.add_row(r["workload"], r.get("engine", "flowli"), backend, variant, str(r["n"]), str(r["runs"]),
                      fmt(r["wall_s"], 3), fmt(r["rate"], 1), r["unit"] if r["rate"] is not None else "-",
                      fmt(r["p50_ms"], 2), fmt(r["p99_ms"], 2), fmt(r.get("peak_rss_mb"), 1))
    Console(file=sys.stderr, width=170).print(table)


RATIO_FIGURES: dict[str, list[tuple[str, str, bool]]] = {
    # workload: (figure, label, higher is better)
    "W1": [("rate", "steps/s", True)],
    "W2": [("rate", "steps/s", True)],
    "W3": [("p50_ms", "p50 ms", False), ("p99_ms", "p99 ms", False)],
    "W4": [("wall_s", "wall s", False), ("overhead_s", "wall - sleep s", False)],
    "W6": [("wall_s", "drain s", False), ("peak_rss_mb", "peak RSS MB", False),
           ("kb_per_suspended", "KiB per suspended", False)],
}


def engine_ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """flowli against DBOS, per workload and backend: a ratio > 1 means flowli is better (a rate:
    flowli's / DBOS's; a time or a size: DBOS's / flowli's). flowli's figure on PostgreSQL is the
    asyncpg store's."""
    def pick(engine: str, wid: str, backend: str) -> dict[str, Any] | None:
        for r in rows:
            if (r.get("engine", "flowli"), r["workload"], r["backend"]) == (engine, wid, backend) \
                    and not r["variant"] and r.get("driver") in (None, "asyncpg"):
                return r
        return None

    out = []
    for r in rows:
        if r.get("engine") != "flowli" or r["workload"] not in RATIO_FIGURES:
            continue
        f = pick("flowli", r["workload"], r["backend"])
        d = pick("dbos", r["workload"], r["backend"])
        if f is not r or d is None:
            continue
        for name, label, higher in RATIO_FIGURES[r["workload"]]:
            a, b = f.get(name), d.get(name)
            ratio = None
            if a is not None and b is not None and a > 0 and b > 0:
                ratio = a / b if higher else b / a
            out.append({"workload": r["workload"], "backend": r["backend"], "figure": label, "flowli": a,
                        "dbos": b, "ratio": ratio})
    return out


def print_engine_ratios(ratios: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="flowli vs DBOS: ratio > 1 means flowli is better "
                        "(rates: flowli/DBOS; times and memory: DBOS/flowli)")
    for col in ("workload", "backend", "figure", "flowli", "dbos", "ratio"):
        table.add_column(col, justify="left" if col in ("workload", "backend", "figure") else "right")
    for x in ratios:
        table.add_row(x["workload"], x["backend"], x["figure"], f"{x['flowli']:.2f}" if x["flowli"] is not None else "-",
                      f"{x['dbos']:.2f}" if x["dbos"] is not None else "-",
                      f"x{x['ratio']:.2f}" if x["ratio"] is not None else "-")
    Console(file=sys.stderr, width=170).print(table)


def print_ratios(rows: list[dict[str, Any]]) -> None:
    """With several drivers: each driver's median rate against asyncpg's, per workload."""
    base = {r["workload"]: r for r in rows if r.get("driver") == "asyncpg" and not r["variant"]
            and r.get("engine", "flowli") == "flowli"}
    for r in rows:
        b = base.get(r["workload"])
        if r.get("driver") not in (None, "asyncpg") and b and r["rate"] and b["rate"]:
            print(f"{r['workload']}: {r['driver']} {r['rate']:.1f} vs asyncpg {b['rate']:.1f} {r['unit']} "
                  f"(x{r['rate'] / b['rate']:.2f})", file=sys.stderr)


# ---- command line -------------------------------------------------------------------------


def _csv(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    p.add_argument("--backend", default=None,
                   help="comma-separated stores: sqlite, postgresql (default: both when the server of "
                        f"${targets.POSTGRES_ENV} answers, else sqlite)")
    p.add_argument("--workloads", default="W1,W2,W3,W4",
                   help="comma-separated ids among W1..W6, or all (default: W1,W2,W3,W4)")
    p.add_argument("--engines", default="flowli",
                   help="comma-separated engines: flowli, dbos (DBOS Transact, the peer; not W5) (default flowli)")
    p.add_argument("--runs", type=int, default=3, help="runs per case (default 3)")
    p.add_argument("--n", type=int, default=None, help="override n of every selected workload")
    p.add_argument("--concurrency", type=int, default=64, help="worker concurrency, per process (default 64)")
    p.add_argument("--sleep", type=float, default=1.0, help="W4's sleep in seconds (default 1)")
    p.add_argument("--driver", default="asyncpg",
                   help="comma-separated PostgreSQL drivers for W1-W4: asyncpg (the store's), psycopg "
                        "(bench/drivers.py) (default asyncpg)")
    p.add_argument("--w5-procs", default="4", help="W5: comma-separated worker process counts (default 4)")
    p.add_argument("--w5-kill-procs", type=int, default=4,
                   help="W5: processes of the SIGKILL variant (one killed halfway); 0 skips it (default 4)")
    p.add_argument("--w5-ttl", type=float, default=None,
                   help="W5: lease_ttl and task_ttl of the worker processes in s (default: as shipped, 30)")
    p.add_argument("--w6-n", type=int, default=W6_DEFAULT_N,
                   help=f"W6: executions suspended on receive (default {W6_DEFAULT_N}; --n overrides)")
    p.add_argument("--profile", action="store_true",
                   help="add one profiled run per case (pyinstrument if installed, else cProfile), "
                        "report on stderr, not counted in the medians")
    p.add_argument("--profiler", choices=["auto", "cprofile", "pyinstrument"], default="auto",
                   help="the profiler of --profile (auto: pyinstrument when installed, else cProfile)")
    args = p.parse_args(argv)
    ids = list(ALL_WORKLOADS) if args.workloads.strip().lower() == "all" else [w.upper() for w in _csv(args.workloads)]
    unknown = [w for w in ids if w not in ALL_WORKLOADS]
    if unknown:
        p.error(f"unknown workloads {unknown}; known: {', '.join(ALL_WORKLOADS)}")
    if args.runs < 1:
        p.error("--runs must be at least 1")
    args.engines = _csv(args.engines)
    if not args.engines or any(e not in ENGINES for e in args.engines):
        p.error(f"--engines takes {', '.join(ENGINES)}")
    if "dbos" in args.engines:
        try:
            import dbos  # noqa: F401
        except ImportError:
            p.error("--engines dbos needs DBOS Transact: pip install -e '.[bench]'")
    if args.backend is None:
        args.backends = ["sqlite"]
        if asyncio.run(targets.postgres_reachable()):
            args.backends.append("postgresql")
        else:
            print(f"no PostgreSQL server answers at {targets.postgres_server()} (${targets.POSTGRES_ENV}): "
                  "sqlite only", file=sys.stderr)
    else:
        args.backends = _csv(args.backend)
    bad = [b for b in args.backends if b not in targets.BACKENDS]
    if bad or not args.backends:
        p.error(f"unknown backends {bad}; known: {', '.join(targets.BACKENDS)}")
    args.drivers = _csv(args.driver)
    if any(d not in ("asyncpg", "psycopg") for d in args.drivers) or not args.drivers:
        p.error("--driver takes asyncpg, psycopg")
    try:
        args.w5_procs = [int(x) for x in _csv(args.w5_procs)]
    except ValueError:
        p.error("--w5-procs takes comma-separated integers")
    if any(x < 1 for x in args.w5_procs) or args.w5_kill_procs == 1 or args.w5_kill_procs < 0:
        p.error("W5 needs at least 1 process (2 for the SIGKILL variant)")
    args.ids = ids
    return args


def header_for(args: argparse.Namespace) -> dict[str, Any]:
    header: dict[str, Any] = {"versions": versions(), "machine": machine()}
    if "postgresql" in args.backends:
        try:
            header["postgresql"] = asyncio.run(targets.postgres_info())
        except Exception as exc:  # the runs report the failure themselves
            header["postgresql"] = {"error": f"{type(exc).__name__}: {exc}"}
    return header


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    header = header_for(args)
    if "error" in header.get("postgresql", {}):
        header.pop("postgresql")
    lines: list[dict[str, Any]] = []
    failed = False
    http_ids = [w for w in args.ids if w in HTTP_WORKLOADS]
    args.ids = [w for w in args.ids if w not in HTTP_WORKLOADS]
    engines = args.engines
    args.engines = [e for e in engines if e != "temporal"] or ["flowli"]
    for group in (cases(args) if args.ids else []):
        plan: list[tuple[int | str, Case]] = [(run, case) for run in range(1, args.runs + 1) for case in group]
        if args.profile:
            plan += [("profile", case) for case in group if not case.in_child]
        for run, case in plan:
            try:
                line = (profile_once(case, args.profiler) | {"profiled": True}) if run == "profile" else run_once(case)
            except Exception as exc:  # a failed run is reported and the bench goes on
                traceback.print_exc(file=sys.stderr)
                failed = True
                line = {"engine": case.engine, "backend": case.backend, "workload": case.workload, "n": case.n,
                        "error": f"{type(exc).__name__}: {exc}"}
                if case.driver:
                    line["driver"] = case.driver
                if case.workload == "W5":
                    line |= {"procs": case.options["procs"],
                             "variant": "sigkill" if case.options.get("kill") else "plain"}
            line = line | {"run": run} | header
            lines.append(line)
            print(json.dumps(line), flush=True)
    http_lines = []
    for run in range(1, args.runs + 1):
        for wid in http_ids:
            for engine in [e for e in engines if e in ("flowli", "temporal")]:
                try:
                    if engine == "temporal":
                        from .peer_temporal import run as run_temporal

                        line = run_temporal(wid, args.n)
                    else:
                        from .http import run as run_http

                        line = run_http(wid, args.n)
                except Exception as exc:
                    traceback.print_exc(file=sys.stderr)
                    failed = True
                    line = {"engine": engine, "workload": wid, "error": f"{type(exc).__name__}: {exc}"}
                line = line | {"run": run, "loadavg": loadavg()} | header
                http_lines.append(line)
                print(json.dumps(line), flush=True)
    if http_lines:
        from .http import summary

        summary([x for x in http_lines if "error" not in x])
    if not lines:
        return 1 if failed else 0
    rows = summarize(lines)
    print_table(rows, header)
    if len(args.drivers) > 1:
        print_ratios(rows)
    if len(args.engines) > 1:
        print_engine_ratios(engine_ratios(rows))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
