"""M1 and M2: the MCP server over streamable HTTP, on a real ``flowli serve`` (SQLite file), driven
by the official SDK's client.

- M1: one session; ``start_workflow`` + ``watch_workflow`` of the one-step type ``bench.work``,
  ``n`` times one after the other (default 100): p50 and p99 of the round trip in ms.
- M2: 50 concurrent sessions, each starting and watching 20 runs one after the other: runs/s,
  first start to last answer.

``python -m bench.assistants [--runs 3] [--n 100] [--sessions 50] [--per-session 20]`` prints one JSON
line per run and the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from .http import _flowli, _free_port

HERE = Path(__file__).resolve().parent


class Served:
    """``flowli serve --app bench.catalog:registry`` on a fresh SQLite file, and a key."""

    def __init__(self, folder: str):
        self.db = f"sqlite:///{folder}/mcp.db"

    def __enter__(self) -> Served:
        self.key = json.loads(_flowli(self.db, "apps", "create", "bench", "--json"))["apiKey"]
        port = _free_port()
        self.proc = subprocess.Popen([sys.executable, "-m", "flowli.cli", "--db", self.db, "--app", "bench.catalog:registry",
                                      "serve", "--port", str(port)], stdout=subprocess.PIPE, text=True, cwd=HERE.parent)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.startswith("listening on "), line
        self.url = line.split("listening on ", 1)[1].strip() + "/mcp"
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(30)


async def _round_trip(client: Client, i: int) -> float:
    t0 = time.perf_counter()
    started = await client.call_tool("start_workflow", {"workflow_type": "bench.work", "inputs": {"i": i}})
    wid = started.structured_content["workflow_id"]
    done = await client.call_tool("watch_workflow", {"workflow_id": wid, "timeout_seconds": 60})
    if done.structured_content.get("status") != "COMPLETED":
        raise RuntimeError(f"run {wid} ended {done.structured_content}")
    return time.perf_counter() - t0


async def _session(url: str, key: str, runs: int, offset: int) -> list[float]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=120) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            return [await _round_trip(client, offset + i) for i in range(runs)]


async def m1(url: str, key: str, n: int) -> dict[str, Any]:
    await _session(url, key, 5, 10_000_000)  # warm up: imports, the first connection
    times = sorted(await _session(url, key, n, 0))
    return {"workload": "M1", "n": n, "p50_ms": round(statistics.median(times) * 1000, 1),
            "p99_ms": round(times[min(len(times) - 1, int(len(times) * 0.99))] * 1000, 1)}


async def m2(url: str, key: str, sessions: int, per_session: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    done = await asyncio.gather(*(_session(url, key, per_session, s * per_session) for s in range(sessions)))
    elapsed = time.perf_counter() - t0
    total = sum(len(d) for d in done)
    return {"workload": "M2", "sessions": sessions, "runs": total, "runs_per_s": round(total / elapsed, 1)}


def one_run(n: int, sessions: int, per_session: int) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as folder, Served(folder) as served:
        return [asyncio.run(m1(served.url, served.key, n)),
                asyncio.run(m2(served.url, served.key, sessions, per_session))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--n", type=int, default=100)
    p.add_argument("--sessions", type=int, default=50)
    p.add_argument("--per-session", type=int, default=20)
    args = p.parse_args(argv)
    lines: list[list[dict[str, Any]]] = []
    for _ in range(args.runs):
        got = one_run(args.n, args.sessions, args.per_session)
        for line in got:
            print(json.dumps(line), flush=True)
        lines.append(got)
    print(json.dumps({"workload": "M1", "median_of": len(lines), "p50_ms": statistics.median(r[0]["p50_ms"] for r in lines),
                      "p99_ms": statistics.median(r[0]["p99_ms"] for r in lines)}))
    print(json.dumps({"workload": "M2", "median_of": len(lines),
                      "runs_per_s": statistics.median(r[1]["runs_per_s"] for r in lines)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
