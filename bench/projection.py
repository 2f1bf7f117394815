"""The projection on PostgreSQL: with N executions stored (default 100 000, each with its
execution.started and execution.completed on the control log), how long the first
``engine.list`` takes in a process that starts after another one caught the projection up.

    python -m bench.projection [--n 100000] [--runs 3]

The executions and their control-log entries are written with SQL (``generate_series``), as if
that many had run; a first engine catches the projection up (timed: the one replay of the
control log there is); then, for each run, a new process opens an engine and times its first
``engine.list(limit=50)`` (which reads the control log past the persisted cursor, counts per
status and reads the first page). Prints one JSON line per run and the median.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import uuid

import asyncpg

import flowli

SERVER = os.environ.get("FLOWLI_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
PROV = '{"actor":{"kind":"system","id":"bench"},"at":"2026-01-01T00:00:00+00:00"}'


async def fill(url: str, schema: str, n: int) -> None:
    """N completed executions and their two lifecycle entries each, on the control log."""
    conn = await asyncpg.connect(SERVER, server_settings={"search_path": schema})
    try:
        await conn.execute(
            "INSERT INTO executions (eid, workflow, version, status, args, queue, created_at, updated_at, next_seq)"
            " SELECT 'e-' || lpad(i::text, 8, '0'), 'bench.sequential', '1', 'completed', '[]', 'default',"
            " 1.7e9 + i, 1.7e9 + i, 3 FROM generate_series(1, $1) i", n)
        await conn.execute(
            "INSERT INTO control_log (seq, eid, kind, fid, value, provenance, journal_seq)"
            " SELECT 2 * i - 1, 'e-' || lpad(i::text, 8, '0'), 'execution.started', 'root',"
            " '{\"workflow\":\"bench.sequential\",\"version\":\"1\"}', $2, 1 FROM generate_series(1, $1) i"
            " UNION ALL SELECT 2 * i, 'e-' || lpad(i::text, 8, '0'), 'execution.completed', 'root', NULL, $2, 2"
            " FROM generate_series(1, $1) i", n, PROV)
        await conn.execute("UPDATE counters SET n = $1 WHERE name = 'control_log'", 2 * n)
        await conn.execute("ANALYZE")
    finally:
        await conn.close()


async def first_list(url: str) -> dict[str, float]:
    began = time.perf_counter()
    engine = await flowli.connect(url, flowli.Registry())
    opened = time.perf_counter()
    async with engine:
        page = await engine.list(limit=50)
        listed = time.perf_counter()
    assert len(page) == 50 and page.next is not None
    return {"open_s": opened - began, "first_list_s": listed - opened, "completed": page.counts["completed"]}


async def main_async(n: int, runs: int) -> int:
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(SERVER)
    await admin.execute(f'CREATE SCHEMA "{schema}"')
    url = f"{SERVER}{'&' if '?' in SERVER else '?'}schema={schema}"
    try:
        engine = await flowli.connect(url, flowli.Registry())  # creates the schema
        await engine.close()
        t = time.perf_counter()
        await fill(url, schema, n)
        filled = time.perf_counter() - t
        t = time.perf_counter()
        first = await first_list(url)  # the first catch-up: the whole control log, once
        catch_up = time.perf_counter() - t
        print(json.dumps({"workload": "projection-catch-up", "n": n, "fill_s": round(filled, 3),
                          "catch_up_s": round(catch_up, 3), **{k: round(v, 4) for k, v in first.items()}}), flush=True)
        times = []
        for run in range(runs):
            out = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "bench.projection", "--child", url],
                                          capture_output=True, text=True, check=True)
            line = json.loads(out.stdout)
            times.append(line["first_list_s"])
            print(json.dumps({"workload": "projection-first-list", "n": n, "run": run + 1, **line}), flush=True)
        print(f"a new process's first engine.list with {n} executions: median {statistics.median(times):.3f} s "
              f"(runs {', '.join(f'{x:.3f}' for x in times)})", file=sys.stderr)
        return 0
    finally:
        await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await admin.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--child", metavar="URL", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps({k: round(v, 4) for k, v in asyncio.run(first_list(args.child)).items()}))
        return 0
    return asyncio.run(main_async(args.n, args.runs))


if __name__ == "__main__":
    sys.exit(main())
