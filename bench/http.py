"""The HTTP workloads: pipelines through a real ``flowli serve`` and ``HttpWorker`` processes.

- H1: ``n`` one-stage pipelines (default 1 000), created by a client 32 at a time, worked by one
  HttpWorker process (concurrency 32) on the reference routes alone (one call each: pull,
  acquire, result, ack): stages/s, first create to last Completed.
- H1B: the same with the batch routes: created 100 to a request (``POST
  /pipelines/idempotent/batch``, 4 requests at a time), and the HttpWorker takes the batch routes
  the service offers (``POST /jobs/pull-batch``, ``POST /stages/results``).
- H2: a lone one-stage pipeline, created and awaited (Completed) ``n`` times (default 100): p50
  and p99 latency in ms. The worker long-polls: no polling on the hot path.
- H3: ``n`` pipelines (default 200) of the reference's dispatch-invoice shape (load, then email and
  archive): stages/s.

``python -m bench.http [--workloads H1,H2,H3] [--backend sqlite] [--runs 3]`` prints one JSON line
per run; ``bench.run`` runs the same functions when its ``--workloads`` name them. The service and
the worker are processes of their own; the bench counts completions in the store directly (a
list through HTTP would measure the list).

``--backend postgresql`` runs on a fresh schema of ``FLOWLI_BENCH_POSTGRES``'s server (dropped
after), ``--serve-workers N`` as ``flowli serve --workers N``. A throughput line carries the CPU
milliseconds per stage of each part of the machine (``cpu_ms_per_stage``: ``service``, the serve
processes; ``worker``, the HttpWorker; ``client``, this process; ``postgresql``; ``other``), read
with psutil over the timed part.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# the worker's own client (internal to flowli.client), the creators' too
from flowli.client._lean import LeanClient

HERE = Path(__file__).resolve().parent
DEFAULT_N = {"H1": 1000, "H1B": 1000, "H2": 100, "H3": 200}
UNIT = {"H1": "stages/s", "H1B": "stages/s", "H2": "ms", "H3": "stages/s"}
STAGES = {"H1": 1, "H1B": 1, "H2": 1, "H3": 3}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _flowli(db: str, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "flowli.cli", "--db", db, *args], capture_output=True, text=True,
                          check=True, timeout=120)
    return done.stdout


class Running:
    """``flowli serve`` and an HttpWorker process on a fresh database (``worker=False``: the
    service alone, for a bench that works the jobs through the routes itself)."""

    def __init__(self, db: str, concurrency: int = 32, worker: bool = True, batch: bool = False,
                 serve_workers: int = 1):
        self.db = db
        self.serve_workers = serve_workers
        self.concurrency = concurrency
        self.worker = worker
        self.batch = batch
        """The worker takes the batch routes (else the reference routes alone)."""
        self.procs: list[subprocess.Popen[str]] = []

    def __enter__(self) -> Running:
        made = json.loads(_flowli(self.db, "apps", "create", "bench", "--json"))
        self.key = made["apiKey"]
        port = _free_port()
        launcher = os.environ.get("FLOWLI_BENCH_SERVE", "").split() or ["-m", "flowli.cli"]
        several = ["--workers", str(self.serve_workers)] if self.serve_workers > 1 else []
        serve = subprocess.Popen([sys.executable, *launcher, "--db", self.db, "serve", "--port", str(port), *several],
                                 stdout=subprocess.PIPE, text=True)
        self.procs.append(serve)
        assert serve.stdout is not None
        line = serve.stdout.readline()
        while line and not line.startswith("listening on "):  # --workers N says its processes first
            line = serve.stdout.readline()
        assert line.startswith("listening on "), line
        self.url = line.split("listening on ", 1)[1].strip()
        if not self.worker:
            return self
        worker = subprocess.Popen([sys.executable, "-m", "bench.http_worker", self.url, self.key, str(self.concurrency),
                                   *([] if self.batch else ["reference"])], cwd=HERE.parent, text=True)
        self.procs.append(worker)
        return self

    def __exit__(self, *exc: object) -> None:
        for p in reversed(self.procs):
            p.terminate()
        for p in self.procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()


_CONNECTIONS: dict[str, Any] = {}


def _completed(db: str) -> int:
    """Completed pipelines, read from the store (one connection per database, kept)."""
    conn = _CONNECTIONS.get(db)
    if conn is None:
        if db.startswith("sqlite"):
            import sqlite3

            conn = sqlite3.connect(db.removeprefix("sqlite:///"), timeout=5, isolation_level=None)
        else:
            import psycopg

            server, schema = db.split("?schema=")
            conn = psycopg.connect(server, autocommit=True)
            conn.execute(f"SET search_path TO {schema}")
        _CONNECTIONS[db] = conn
    return int(conn.execute("SELECT COUNT(*) FROM executions WHERE workflow = 'flowli.pipeline'"
                            " AND status = 'completed'").fetchone()[0])


def _commits(db: str) -> int | None:
    """Transactions committed so far in the PostgreSQL database (None on SQLite)."""
    if db.startswith("sqlite"):
        return None
    _completed(db)
    return int(_CONNECTIONS[db].execute(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()").fetchone()[0])


def _cpu(r: Running) -> dict[int, tuple[str, float]]:
    """CPU seconds so far of every process psutil may read, each with its part of the machine."""
    import psutil

    from .w5 import process_cpu

    serve = {r.procs[0].pid}
    with contextlib.suppress(psutil.Error):
        serve |= {c.pid for c in psutil.Process(r.procs[0].pid).children(recursive=True)}
    worker = {p.pid for p in r.procs[1:]}
    return process_cpu(lambda pid: "service" if pid in serve else "worker" if pid in worker else None)


def _per_stage(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], stages: int) -> dict[str, float]:
    parts: dict[str, float] = {}
    for pid, (part, t) in after.items():
        if pid in before:
            parts[part] = parts.get(part, 0.0) + t - before[pid][1]
    return {k: round(v * 1000 / stages, 3) for k, v in sorted(parts.items())}


def _body(workload: str, i: int) -> dict[str, Any]:
    if workload == "H3":
        return {"name": "dispatch-invoice", "stages": [
            {"stageName": "load", "stageHandlerName": "LoadInvoiceHandler", "input": f'{{"invoiceId":"inv-{i}"}}'},
            {"stageName": "email", "stageHandlerName": "EmailInvoiceHandler", "options": {"dependsOn": ["load"]}},
            {"stageName": "archive", "stageHandlerName": "ArchiveInvoiceHandler", "options": {"dependsOn": ["load"]}}]}
    return {"name": "one-stage", "stages": [{"stageName": "s", "stageHandlerName": "BenchHandler", "input": str(i)}]}


def _ok(r: Any) -> Any:
    """An answer of the lean client that says the request was taken (else AssertionError)."""
    assert r.status_code < 400, (r.status_code, r.text[:300])
    return r


async def _warm(client: LeanClient, db: str) -> None:
    """One pipeline end to end first: the worker has bootstrapped and every path is warm."""
    before = _completed(db)
    _ok(await client.post("/pipelines", json=_body("H1", -1)))
    deadline = time.monotonic() + 60
    while _completed(db) <= before:
        assert time.monotonic() < deadline, "the warm-up pipeline did not complete"
        await asyncio.sleep(0.02)


async def _throughput(workload: str, n: int, r: Running) -> dict[str, Any]:
    # 32 creators, each a client of one connection: the lean client HttpWorker ships (httpx cost
    # the load generator 0.9 ms of CPU a create, on the two cores the service needs)
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(LeanClient(r.url, headers={"X-API-Key": r.key}, timeout=120))
                   for _ in range(32)]
        await _warm(clients[0], r.db)
        base = _completed(r.db)

        async def creator(client: LeanClient, numbers: range) -> None:
            for i in numbers:
                _ok(await client.post("/pipelines", json=_body(workload, i)))

        async def batches(client: LeanClient, numbers: range) -> None:
            for start in numbers:
                bodies = [{**_body(workload, i), "idempotencyKey": f"h1b-{i}"} for i in range(start, min(n, start + 100))]
                got = _ok(await client.post("/pipelines/idempotent/batch", json={"pipelines": bodies}))
                assert all(x["status"] == 201 for x in got.json()["results"]), got.text[:300]

        cpu0, commits0 = _cpu(r), _commits(r.db)
        t0 = time.perf_counter()
        if workload == "H1B":
            starts = range(0, n, 100)
            await asyncio.gather(*(batches(c, starts[k::4]) for k, c in enumerate(clients[:4])))
        else:
            await asyncio.gather(*(creator(c, range(k, n, len(clients))) for k, c in enumerate(clients)))
        created = time.perf_counter() - t0
        while _completed(r.db) < base + n:
            await asyncio.sleep(0.05)
        wall = time.perf_counter() - t0
        cpu1, commits1 = _cpu(r), _commits(r.db)
    stages = n * STAGES[workload]
    commits = {} if commits0 is None or commits1 is None else \
        {"commits_per_stage": round((commits1 - commits0) / stages, 3)}  # the database's, reads included
    return {"wall_s": round(wall, 3), "rate": round(stages / wall, 1), "create_s": round(created, 3), "stages": stages,
            "cpu_ms_per_stage": _per_stage(cpu0, cpu1, stages), **commits}


async def _latency(n: int, r: Running) -> dict[str, Any]:
    async with LeanClient(r.url, headers={"X-API-Key": r.key}, timeout=60) as client:
        await _warm(client, r.db)
        samples = []
        for i in range(n):
            base = _completed(r.db)
            t0 = time.perf_counter()
            _ok(await client.post("/pipelines", json=_body("H2", i)))
            while _completed(r.db) <= base:
                await asyncio.sleep(0.0005)
            samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    return {"p50_ms": round(statistics.median(samples), 2), "p99_ms": round(samples[int(len(samples) * 0.99) - 1], 2),
            "rate": round(statistics.median(samples), 2)}


def run(workload: str, n: int | None = None, backend: str = "sqlite", serve_workers: int = 1) -> dict[str, Any]:
    n = n or DEFAULT_N[workload]
    with tempfile.TemporaryDirectory(prefix=f"flowli-bench-{workload}-") as tmp, _database(backend, tmp) as db:
        with Running(db, batch=workload == "H1B", serve_workers=serve_workers) as r:
            try:
                figures = asyncio.run(_latency(n, r) if workload == "H2" else _throughput(workload, n, r))
            finally:
                conn = _CONNECTIONS.pop(db, None)
                if conn is not None:
                    conn.close()
    return {"engine": "flowli", "backend": backend, "workload": workload, "n": n, "unit": UNIT[workload],
            "serve_workers": serve_workers, **figures}


@contextlib.contextmanager
def _database(backend: str, folder: str) -> Any:
    """A fresh database: a SQLite file in ``folder``, or a schema of its own on the server of
    ``FLOWLI_BENCH_POSTGRES`` (dropped after)."""
    if backend == "sqlite":
        yield f"sqlite:///{folder}/flowli.db"
        return
    if backend != "postgresql":
        raise SystemExit(f"unknown backend {backend!r}: sqlite or postgresql")
    import psycopg

    server = os.environ.get("FLOWLI_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
    schema = f"bench_http_{os.urandom(4).hex()}"
    try:
        yield f"{server}?schema={schema}"
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", default="H1,H2,H3")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--n", type=int, default=None)
    p.add_argument("--engines", default="flowli", help="flowli, temporal, or both")
    p.add_argument("--backend", default="sqlite", help="sqlite or postgresql (FLOWLI_BENCH_POSTGRES's server)")
    p.add_argument("--serve-workers", type=int, default=1, help="flowli serve --workers N (PostgreSQL)")
    p.add_argument("--temporal-tuning", default="worker,eager,unsandboxed,wal",
                   help="what the Temporal peer changes from its defaults: a comma-separated subset of worker, eager,"
                        " unsandboxed, memory ('' for none; see bench/peer_temporal.py)")
    args = p.parse_args()
    lines = []
    for _ in range(args.runs):
        for w in args.workloads.split(","):
            for engine in args.engines.split(","):
                if engine == "temporal":
                    from .peer_temporal import run as run_temporal

                    line = run_temporal(w, args.n, args.temporal_tuning)
                else:
                    line = run(w, args.n, args.backend, args.serve_workers)
                line["loadavg"] = round(os.getloadavg()[0], 2)
                print(json.dumps(line), flush=True)
                lines.append(line)
    summary(lines)


def summary(lines: list[dict[str, Any]]) -> None:
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for line in lines:
        groups.setdefault((line["workload"], line["engine"]), []).append(line)
    for (w, engine), runs in sorted(groups.items()):
        med = statistics.median(r["rate"] for r in runs)
        extra = ""
        if w == "H2":
            extra = f" p50 {statistics.median(r['p50_ms'] for r in runs)} ms, p99 {statistics.median(r['p99_ms'] for r in runs)} ms"
        print(f"{w} {engine}: median {med} {runs[0]['unit']} over {len(runs)} runs{extra}", file=sys.stderr)
    for w in ("H1", "H3"):
        f = groups.get((w, "flowli"))
        t = groups.get((w, "temporal"))
        if f and t:
            ratio = statistics.median(r["rate"] for r in f) / statistics.median(r["rate"] for r in t)
            print(f"{w}: flowli / temporal = {ratio:.1f}x", file=sys.stderr)


if __name__ == "__main__":
    main()
