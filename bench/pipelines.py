"""The pipeline service's own CPU: what a ``flowli serve`` process spends per pipeline, per stage, per read.

The bench starts a real ``flowli serve`` on a fresh database (no HttpWorker process) and works
its jobs itself through the reference routes, with one keep-alive client; its own CPU does not
count. The figure is the service process's CPU time: the sum over its threads of
``/proc/PID/task/TID/schedstat`` (nanoseconds), or the process's ``utime + stime`` of
``/proc/PID/stat`` (all threads, clock ticks) when a thread ended in between. Why CPU and not
wall time: on a shared two-core machine wall time carries the neighbours' load; the service's
CPU per unit of work is what grows when a route does more work than it should.

- P1: ``n`` one-stage pipelines (default 200), one after another: create (``POST
  /pipelines/idempotent``), pull (``POST /jobs/pull``), acquire, result, ack; nothing else is
  read. ``cpu_ms`` = service CPU over the loop / n; ``wall_ms`` per pipeline. With ``--count``
  the service runs under bench/counted_serve.py and the line adds ``statements_per_pipeline``:
  the SQLite statements it ran per pipeline, by thread and kind (``flowli-sqlite-writer:begin``
  is its transactions; ``MainThread:statement`` the event loop's point reads), figures that do
  not move with the machine's noise (its CPU figures then include the counting).
- P2: one pipeline of ``--stages`` sequential stages (default 200; each waits for the one declared
  before it), worked by the same loop one stage at a time. ``wall_s`` create to Completed,
  ``cpu_ms`` per stage, ``ratio`` = P2's CPU per stage / P1's CPU per pipeline of the same
  invocation (target <= 1.5), and ``get_cpu_ms``: 20 ``GET /pipelines/{id}`` of the finished
  pipeline, service CPU per call.
- P3: reads with many pipelines stored: 100 one-stage pipelines, then up to ``--stored`` (default
  10 000) in the same database, created 16 at a time and left Running (their stage Pending: no
  worker), names ``name-0`` to ``name-9``, keyword ``k:v{i%10}``. At each size, service CPU per
  call (median of 3 batches of 20 calls) of a GET by id and five lists of ``pageSize=20``
  (all, ``statuses=Running``, ``keywords=k:v3``, ``search=name-7``, ``name=name-3``). One line
  per size; a size whose read fails (a list that outlasts the 600 s timeout) gives a line with
  ``error``, the sizes before it keep theirs. ``--reads`` and ``--calls`` narrow P3 to what a
  size can finish.

``python -m bench.pipelines --workloads P1,P2,P3 --runs 3 [--backend sqlite|postgresql]
[--stored 10000] [--stages 200] [--n 200] [--calls 20] [--reads get,list,...] [--count]`` prints one JSON line per workload run on stdout
and the medians on stderr. A line also carries ``idle_cpu_ms_per_s``, the service's CPU per
second while nobody calls it, measured for 1 s before the timed part: the floor under every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from . import counted_serve, targets
from .http import Running

READS: dict[str, dict[str, str | int] | None] = {
    "get": None,  # GET /pipelines/{id}, an id of a stored pipeline
    "list": {"pageSize": 20},
    "list_running": {"statuses": "Running", "pageSize": 20},
    "list_keyword": {"keywords": "k:v3", "pageSize": 20},
    "list_search": {"search": "name-7", "pageSize": 20},
    "list_name": {"name": "name-3", "pageSize": 20},
}
BATCHES = 3
CALLS = 20  # per batch; --calls changes it (a list that costs seconds per call at 10 000 stored)


class ServiceCPU:
    """CPU seconds of one process, all its threads.

    Per thread ``schedstat`` is nanosecond-precise where ``/proc/PID/stat`` counts clock ticks (10
    ms), which matters for a batch of 20 reads of a few ms each. A thread that ends takes its
    schedstat with it, so a delta in which a thread of the first sample is gone falls back to the
    ticks of ``/proc/PID/stat``, which keep the time of ended threads."""

    def __init__(self, pid: int):
        self.pid = pid
        self.tick = os.sysconf("SC_CLK_TCK")

    def sample(self) -> tuple[float, dict[str, int]]:
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = (int(fields[11]) + int(fields[12])) / self.tick  # utime, stime (fields 14, 15)
        threads: dict[str, int] = {}
        for tid in os.listdir(f"/proc/{self.pid}/task"):
            with contextlib.suppress(OSError):
                with open(f"/proc/{self.pid}/task/{tid}/schedstat") as f:
                    threads[tid] = int(f.read().split()[0])
        return ticks, threads

    @staticmethod
    def delta(a: tuple[float, dict[str, int]], b: tuple[float, dict[str, int]]) -> float:
        if a[1] and set(a[1]) <= set(b[1]):
            return sum(ns - a[1].get(tid, 0) for tid, ns in b[1].items()) / 1e9
        return b[0] - a[0]


def _stage(i: int, name: str = "s") -> dict[str, Any]:
    return {"stageName": name, "stageHandlerName": "BenchHandler", "input": str(i)}


def _pipeline(i: int, stages: int = 1) -> dict[str, Any]:
    return {"idempotencyKey": f"bench-{uuid.uuid4().hex}", "name": f"name-{i % 10}",
            "stages": [_stage(i, f"s{k}") for k in range(stages)],
            "pipelineKeywords": [{"key": "k", "value": f"v{i % 10}"}]}


def _get(http: httpx.Client, path: str, params: dict[str, str | int] | None = None) -> Any:
    """A GET whose timeout names the read (a list can take long with many pipelines stored)."""
    try:
        return _ok(http.get(path, params=params))
    except httpx.TimeoutException as exc:
        raise RuntimeError(f"GET {path} {params or ''}: {type(exc).__name__} after {http.timeout.read} s") from None


def _ok(r: httpx.Response) -> Any:
    if r.status_code >= 400:
        raise RuntimeError(f"{r.request.method} {r.request.url.path} -> {r.status_code}: {r.text[:300]}")
    return r.json() if r.content else None


class RawWorker:
    """The worker protocol by hand, one job at a time: pull, acquire, result, ack."""

    def __init__(self, http: httpx.Client, key: str):
        self.http = http
        boot = _ok(http.post("/workers/bootstrap", headers={"X-API-Key": key},
                             json={"workerName": "bench", "supportedHandlers": ["BenchHandler"]}))
        self.worker_id = boot["workerId"]
        self.headers = {"X-Worker-Session": boot["workerSessionToken"]}
        self.interval = float(boot["heartbeat"]["intervalSeconds"])
        self.beat = time.monotonic()

    def one(self) -> dict[str, Any]:
        """Work one job to its ack; the job."""
        if time.monotonic() - self.beat > self.interval / 2:  # what a worker does anyway; keeps the session
            _ok(self.http.post("/workers/heartbeat", headers=self.headers, json={"state": "ready"}))
            self.beat = time.monotonic()
        r = self.http.post("/jobs/pull", headers=self.headers, json={"waitSeconds": 10})
        if r.status_code == 204:
            raise RuntimeError("no job within 10 s")
        job = _ok(r)
        stage, lease = job["stageId"], {"executionId": job["executionId"], "workerId": self.worker_id}
        got = _ok(self.http.post(f"/stages/{stage}/lease/acquire", headers=self.headers, json=lease))
        if not got.get("acquired"):
            raise RuntimeError(f"lease refused: {got}")
        _ok(self.http.post(f"/stages/{stage}/result", headers=self.headers, json={
            "executionId": job["executionId"], "attempt": job["attempt"], "isSuccess": True, "output": job["input"] or "ok"}))
        _ok(self.http.post("/jobs/ack", headers=self.headers, json={"token": job["token"]}))
        return dict(job)


def _idle(cpu: ServiceCPU, seconds: float = 1.0) -> float:
    a = cpu.sample()
    time.sleep(seconds)
    return round(ServiceCPU.delta(a, cpu.sample()) * 1000 / seconds, 3)


def _settle(cpu: ServiceCPU, limit: float = 60.0) -> None:
    """Wait until the service is idle (two 0.5 s windows under 30 ms of CPU per second): after a
    fill, its own background work would otherwise be counted in the reads that follow."""
    quiet, deadline = 0, time.monotonic() + limit
    while quiet < 2 and time.monotonic() < deadline:
        quiet = quiet + 1 if _idle(cpu, 0.5) < 30 else 0


def _status(http: httpx.Client, pid: int) -> str:
    return str(_get(http, f"/pipelines/{pid}")["status"])


def _completed(http: httpx.Client, pid: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while (status := _status(http, pid)) != "Completed":
        if time.monotonic() > deadline:
            raise RuntimeError(f"pipeline {pid} is {status}, not Completed")
        time.sleep(0.01)


def _p1(http: httpx.Client, key: str, cpu: ServiceCPU, n: int,
        counted: Callable[[], dict[str, int]] | None = None) -> dict[str, Any]:
    w = RawWorker(http, key)
    for i in range(5):  # warm: every route and the store's statements
        made = _ok(http.post("/pipelines/idempotent", json=_pipeline(-1 - i)))
        w.one()
    _completed(http, made["pipeline"]["id"])
    idle = _idle(cpu)
    last = 0
    before = counted() if counted else {}
    a, t0 = cpu.sample(), time.perf_counter()
    for i in range(n):
        last = _ok(http.post("/pipelines/idempotent", json=_pipeline(i)))["pipeline"]["id"]
        w.one()
    wall, used = time.perf_counter() - t0, ServiceCPU.delta(a, cpu.sample())
    counts = _per(before, counted(), n) if counted else None
    _completed(http, last)
    line = {"n": n, "cpu_ms": round(used * 1000 / n, 3), "wall_ms": round(wall * 1000 / n, 3),
            "cpu_s": round(used, 3), "wall_s": round(wall, 3), "idle_cpu_ms_per_s": idle}
    return line if counts is None else {**line, "counted": True, "statements_per_pipeline": counts}


def _per(before: dict[str, int], after: dict[str, int], n: int) -> dict[str, float]:
    """The statements of the counted service (thread:kind, see bench/counted_serve.py) per pipeline,
    between two readings of its counts. (The second append of the last pipelines may fall after
    the second reading: a bunch of control-log appends every 50 ms.)"""
    return {k: round((after.get(k, 0) - before.get(k, 0)) / n, 2) for k in sorted(after)
            if after.get(k, 0) > before.get(k, 0)}


def _calls(http: httpx.Client, cpu: ServiceCPU, path: str, params: dict[str, str | int] | None,
           calls: int) -> tuple[float, float]:
    """Service CPU and wall per call: the median of BATCHES batches of ``calls`` calls, in ms."""
    cpus, walls = [], []
    for _ in range(BATCHES):
        a, t0 = cpu.sample(), time.perf_counter()
        for _ in range(calls):
            _get(http, path, params)
        walls.append((time.perf_counter() - t0) * 1000 / calls)
        cpus.append(ServiceCPU.delta(a, cpu.sample()) * 1000 / calls)
    return round(statistics.median(cpus), 3), round(statistics.median(walls), 3)


def _p2(http: httpx.Client, key: str, cpu: ServiceCPU, stages: int, calls: int) -> dict[str, Any]:
    w = RawWorker(http, key)
    warm = _ok(http.post("/pipelines/idempotent", json=_pipeline(-1, 2)))["pipeline"]["id"]
    w.one()
    w.one()
    _completed(http, warm)
    idle = _idle(cpu)
    a, t0 = cpu.sample(), time.perf_counter()
    pid = _ok(http.post("/pipelines/idempotent", json=_pipeline(0, stages)))["pipeline"]["id"]
    for k in range(stages):
        job = w.one()
        if job["stageName"] != f"s{k}":
            raise RuntimeError(f"stage {job['stageName']} came as the {k}th")
    used = ServiceCPU.delta(a, cpu.sample())
    _completed(http, pid)
    wall = time.perf_counter() - t0
    get_cpu, get_wall = _calls(http, cpu, f"/pipelines/{pid}", None, calls)
    return {"n": stages, "stages": stages, "wall_s": round(wall, 3), "cpu_ms": round(used * 1000 / stages, 3),
            "cpu_s": round(used, 3), "get_cpu_ms": get_cpu, "get_wall_ms": get_wall, "idle_cpu_ms_per_s": idle}


async def _fill(url: str, key: str, start: int, stop: int, concurrency: int = 16) -> list[int]:
    """Create pipelines ``start`` to ``stop`` 16 at a time; their ids."""
    ids: list[int] = []
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(httpx.AsyncClient(
            base_url=url, headers={"X-API-Key": key}, timeout=120, limits=httpx.Limits(max_connections=1)))
            for _ in range(concurrency)]

        async def creator(client: httpx.AsyncClient, numbers: range) -> None:
            for i in numbers:
                ids.append(_ok(await client.post("/pipelines/idempotent", json=_pipeline(i)))["pipeline"]["id"])

        await asyncio.gather(*(creator(c, range(start + k, stop, concurrency)) for k, c in enumerate(clients)))
    return ids


def _p3(http: httpx.Client, r: Running, cpu: ServiceCPU, sizes: list[int], calls: int,
        reads: list[str]) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    ids: list[int] = []
    for size in sizes:
        try:
            lines.append(_p3_at(http, r, cpu, size, ids, calls, reads))
        except Exception as exc:  # the sizes measured before stay; this one reports why it has no figure
            lines.append({"n": size, "stored": size, "error": f"{type(exc).__name__}: {exc}"})
            break
    return lines


def _p3_at(http: httpx.Client, r: Running, cpu: ServiceCPU, size: int, ids: list[int], calls: int,
           reads: list[str]) -> dict[str, Any]:
    """Fill up to ``size`` pipelines (``ids`` grows), then time the reads."""
    t0 = time.perf_counter()
    ids += asyncio.run(_fill(r.url, r.key, len(ids), size))
    fill_s = time.perf_counter() - t0
    total = _get(http, "/pipelines", {"pageSize": 1})["totalCount"]
    if total != size:
        raise RuntimeError(f"{total} pipelines listed, {size} created")
    _get(http, f"/pipelines/{ids[0]}")  # warm
    _settle(cpu)
    idle = _idle(cpu)
    line: dict[str, Any] = {"n": size, "stored": size, "fill_s": round(fill_s, 3), "calls": calls,
                            "idle_cpu_ms_per_s": idle}
    for name, params in READS.items():
        if reads and name not in reads:
            continue
        path = f"/pipelines/{ids[len(ids) // 2]}" if params is None else "/pipelines"
        if params is not None:
            items = _get(http, path, params)["items"]
            if not items:
                raise RuntimeError(f"{name} listed nothing")
        line[f"{name}_cpu_ms"], line[f"{name}_wall_ms"] = _calls(http, cpu, path, params, calls)
        print(f"P3 {size} stored: {name} {line[f'{name}_cpu_ms']} ms CPU/call", file=sys.stderr, flush=True)
    return line


@contextlib.contextmanager
def _counting(on: bool) -> Iterator[Path | None]:
    """With ``on``: the service that Running starts is bench/counted_serve.py, and this gives the
    file its counts go to (else None, and the service is ``python -m flowli.cli``)."""
    if not on:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="flowli-bench-counts-") as tmp:
        path = Path(tmp) / "counts.json"
        saved = {k: os.environ.get(k) for k in ("FLOWLI_BENCH_SERVE", counted_serve.COUNTS_ENV, "PYTHONPATH")}
        root = str(Path(counted_serve.__file__).resolve().parent.parent)  # where ``-m bench....`` is found
        os.environ["FLOWLI_BENCH_SERVE"] = "-m bench.counted_serve"
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, saved["PYTHONPATH"]) if p)
        os.environ[counted_serve.COUNTS_ENV] = str(path)
        try:
            yield path
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def run(workload: str, backend: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """One run of a workload on a fresh database and service; its lines (P3: one per size)."""
    async def enter() -> tuple[Any, str]:
        cm = targets.fresh_url(backend, prefix="flowli-bench-pipelines-")
        return cm, await cm.__aenter__()

    loop = asyncio.new_event_loop()  # the database's lifetime spans the run (a PostgreSQL schema is dropped after)
    try:
        cm, db = loop.run_until_complete(enter())
        try:
            with _counting(getattr(args, "count", False) and workload == "P1") as counts, \
                    Running(db, worker=False) as r:
                cpu = ServiceCPU(r.procs[0].pid)
                counted = None if counts is None else (lambda: counted_serve.read_counts(r.procs[0].pid, counts))
                with httpx.Client(base_url=r.url, headers={"X-API-Key": r.key}, timeout=600) as http:
                    if workload == "P1":
                        found = [_p1(http, r.key, cpu, args.n, counted)]
                    elif workload == "P2":
                        found = [_p2(http, r.key, cpu, args.stages, args.calls)]
                    else:
                        found = _p3(http, r, cpu, sorted({min(100, args.stored), args.stored}), args.calls,
                                    args.reads)
        finally:
            loop.run_until_complete(cm.__aexit__(None, None, None))
    finally:
        loop.close()
    return [{"engine": "flowli", "backend": backend, "workload": workload, "unit": "ms", **f} for f in found]


def _header() -> dict[str, Any]:
    import subprocess

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parent).stdout.strip()
    return {"commit": commit, "python": sys.version.split()[0], "cores": os.cpu_count()}


def summary(lines: list[dict[str, Any]]) -> None:
    def med(rows: list[dict[str, Any]], key: str) -> float:
        return round(float(statistics.median(r[key] for r in rows)), 3)

    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for line in lines:
        if "error" not in line:
            groups.setdefault((line["backend"], line["workload"], line["n"]), []).append(line)
    out = sys.stderr
    for (backend, w, n), rows in sorted(groups.items()):
        if w == "P1":
            print(f"{backend} P1 n={n}: service CPU {med(rows, 'cpu_ms')} ms/pipeline, wall {med(rows, 'wall_ms')}"
                  f" ms/pipeline (median of {len(rows)}; idle {med(rows, 'idle_cpu_ms_per_s')} ms/s)", file=out)
            counted = [r["statements_per_pipeline"] for r in rows if r.get("counted")]
            if counted:
                keys = sorted({k for c in counted for k in c})
                print(f"{backend} P1 statements per pipeline (counted; median of {len(counted)}): " + ", ".join(
                    f"{k} {statistics.median(c.get(k, 0) for c in counted)}" for k in keys), file=out)
        elif w == "P2":
            ratio = [r["ratio"] for r in rows if r.get("ratio") is not None]
            print(f"{backend} P2 {n} stages: wall {med(rows, 'wall_s')} s create->Completed, service CPU "
                  f"{med(rows, 'cpu_ms')} ms/stage, ratio to P1 {statistics.median(ratio) if ratio else '-'}"
                  f" (target <= 1.5); GET /pipelines/{{id}} {med(rows, 'get_cpu_ms')} ms CPU/call", file=out)
    p3 = {k: v for k, v in groups.items() if k[1] == "P3"}
    if p3:
        sizes = sorted({k[2] for k in p3})
        for backend in sorted({k[0] for k in p3}):
            calls = sorted({r["calls"] for k, rows in p3.items() if k[0] == backend for r in rows})
            print(f"\n{backend} P3: service CPU ms per call (wall ms), median of {BATCHES} batches of"
                  f" {'/'.join(map(str, calls))} calls per run, median of runs", file=out)
            print("| read | " + " | ".join(f"{s} stored" for s in sizes) + " |", file=out)
            print("|---|" + "---|" * len(sizes), file=out)
            for name, params in READS.items():
                label = "GET /pipelines/{id}" if params is None else "GET /pipelines?" + "&".join(
                    f"{k}={v}" for k, v in params.items())
                cells = []
                for s in sizes:
                    rows = p3.get((backend, "P3", s), [])
                    rows = [r for r in rows if name + "_cpu_ms" in r]
                    cells.append(f"{med(rows, name + '_cpu_ms')} ({med(rows, name + '_wall_ms')})" if rows else "-")
                print(f"| {label} | " + " | ".join(cells) + " |", file=out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", default="P1,P2,P3")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--backend", default="sqlite", choices=targets.BACKENDS)
    p.add_argument("--n", type=int, default=200, help="P1: pipelines (default 200)")
    p.add_argument("--stages", type=int, default=200, help="P2: stages of the lone pipeline (default 200)")
    p.add_argument("--stored", type=int, default=10000, help="P3: pipelines stored, besides 100 (default 10000)")
    p.add_argument("--calls", type=int, default=CALLS, help=f"calls per batch of reads (default {CALLS})")
    p.add_argument("--count", action="store_true",
                   help="P1: count the service's SQLite statements per pipeline, per thread and kind"
                        " (bench/counted_serve.py; its CPU figures then include the counting)")
    p.add_argument("--reads", type=lambda v: [r for r in v.split(",") if r], default=[],
                   help=f"P3: the reads to time (default all): {','.join(READS)}")
    args = p.parse_args()
    if set(args.reads) - set(READS):
        raise SystemExit(f"unknown reads: {', '.join(sorted(set(args.reads) - set(READS)))}")
    workloads = [w.strip().upper() for w in args.workloads.split(",") if w.strip()]
    unknown = set(workloads) - {"P1", "P2", "P3"}
    if unknown:
        raise SystemExit(f"unknown workloads: {', '.join(sorted(unknown))}")
    header, lines, failed = _header(), [], False
    for run_no in range(1, args.runs + 1):
        p1: float | None = None
        for w in workloads:
            loadavg = round(os.getloadavg()[0], 2)
            try:
                found = run(w, args.backend, args)
            except Exception as exc:  # a run that fails reports why, and no figure
                found, failed = [{"engine": "flowli", "backend": args.backend, "workload": w, "n": None,
                                  "error": f"{type(exc).__name__}: {exc}"}], True
            failed = failed or any("error" in line for line in found)
            for line in found:
                if w == "P1" and "error" not in line:
                    p1 = line["cpu_ms"]
                if w == "P2" and "error" not in line:
                    line["ratio"] = round(line["cpu_ms"] / p1, 2) if p1 else None
                line.update(run=run_no, loadavg=loadavg, versions=header)
                print(json.dumps(line), flush=True)
                lines.append(line)
    summary(lines)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
