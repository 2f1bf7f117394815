"""The HTTP clients a worker could use, measured by what they cost the worker: the client process's
CPU per request against a real ``flowli serve`` on loopback (another process), for the request a
worker makes most (``POST /workers/heartbeat``: a small JSON body, a small JSON answer, the
session header).

Candidates, each on keep-alive connections:

- ``httpx``: an ``AsyncClient`` per connection, as ``HttpWorker`` uses it (one per job slot);
- ``aiohttp``: a ``ClientSession`` (when the package is installed: the ``bench`` extra);
- ``streams``: the client ``HttpWorker`` ships (``flowli.client._lean.LeanClient``): asyncio
  streams and ``httptools``' parser (uvicorn's), one request at a time per connection.

``python -m bench.clients [--url URL --key KEY] [--requests N] [--connections C] [--runs R]``:
without ``--url`` it starts ``flowli serve`` on a fresh SQLite file. Prints a JSON line per
candidate and run, and a table of medians: client CPU µs per request, requests/s.
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
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

# the worker's own client, measured as it ships (internal to flowli.client)
from flowli.client._lean import LeanClient

STATE = {"state": "ready", "inFlight": 0}
BODY = json.dumps(STATE).encode()
PATH = "/workers/heartbeat"


Post = Callable[[], Awaitable[int]]


async def _candidates(url: str, session: str, connections: int) -> dict[str, tuple[list[Post], Callable[[], Awaitable[None]]]]:
    headers = {"X-Worker-Session": session}
    out: dict[str, tuple[list[Post], Callable[[], Awaitable[None]]]] = {}
    clients = [httpx.AsyncClient(base_url=url, headers=headers, limits=httpx.Limits(max_connections=2))
               for _ in range(connections)]

    def httpx_post(c: httpx.AsyncClient) -> Post:
        async def post() -> int:
            return (await c.post(PATH, content=BODY, headers={"Content-Type": "application/json"})).status_code
        return post

    async def close_httpx() -> None:
        for c in clients:
            await c.aclose()

    out["httpx"] = ([httpx_post(c) for c in clients], close_httpx)
    streams = [LeanClient(url, timeout=30, headers=headers) for _ in range(connections)]

    def streams_post(c: LeanClient) -> Post:
        async def post() -> int:
            return (await c.post(PATH, json=STATE)).status_code
        return post

    async def close_streams() -> None:
        for c in streams:
            await c.aclose()

    out["streams"] = ([streams_post(c) for c in streams], close_streams)
    try:
        import aiohttp
    except ImportError:
        return out
    aio = aiohttp.ClientSession(base_url=url, headers=headers,
                                connector=aiohttp.TCPConnector(limit=connections))

    def aiohttp_post() -> Post:
        async def post() -> int:
            async with aio.post(PATH, data=BODY, headers={"Content-Type": "application/json"}) as r:
                await r.read()
                return r.status
        return post

    async def close_aiohttp() -> None:
        await aio.close()

    out["aiohttp"] = ([aiohttp_post() for _ in range(connections)], close_aiohttp)
    return out


async def measure(url: str, key: str, requests: int, connections: int) -> list[dict[str, Any]]:
    """Each candidate's client CPU and wall for ``requests`` heartbeats over ``connections``
    connections (each connection's requests one after another)."""
    async with httpx.AsyncClient(base_url=url) as boot:
        r = await boot.post("/workers/bootstrap", headers={"X-API-Key": key},
                            json={"workerName": "clients-bench", "supportedHandlers": ["Bench"]})
        r.raise_for_status()
        session = r.json()["workerSessionToken"]
    lines = []
    for name, (posts, close) in (await _candidates(url, session, connections)).items():
        per = requests // connections
        await asyncio.gather(*(_lane(name, p, per) for p in posts[:1]))  # warm: connections open, code loaded
        cpu0, wall0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(_lane(name, p, per) for p in posts))
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        await close()
        done = per * len(posts)
        lines.append({"bench": "clients", "client": name, "requests": done, "connections": connections,
                      "cpu_us_per_request": round(cpu / done * 1e6, 1), "rate": round(done / wall, 1)})
    return lines


async def _lane(name: str, post: Post, n: int) -> None:
    """``n`` requests one after another on one connection, each answered 200."""
    for _ in range(n):
        status = await post()
        if status != 200:
            raise RuntimeError(f"{name}: {PATH} answered {status}")


def _serve() -> tuple[subprocess.Popen[str], str, str]:
    folder = tempfile.mkdtemp(prefix="flowli-clients-")
    db = f"sqlite:///{folder}/clients.db"
    made = subprocess.run([sys.executable, "-m", "flowli.cli", "--db", db, "apps", "create", "bench", "--json"],
                          capture_output=True, text=True, check=True)
    key = json.loads(made.stdout)["apiKey"]
    proc = subprocess.Popen([sys.executable, "-m", "flowli.cli", "--db", db, "serve", "--port", "0", "--no-worker"],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("listening on "):
        proc.kill()
        raise RuntimeError(f"flowli serve: {line!r}")
    return proc, line.split("listening on ", 1)[1].strip(), key


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--url")
    p.add_argument("--key")
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--connections", type=int, default=1)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args(argv)
    proc = None
    url, key = args.url, args.key
    if url is None:
        proc, url, key = _serve()
    try:
        lines: list[dict[str, Any]] = []
        for run in range(args.runs):
            for line in asyncio.run(measure(url, key, args.requests, args.connections)):
                line["run"] = run + 1
                print(json.dumps(line), flush=True)
                lines.append(line)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(20)
    by: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        by.setdefault(line["client"], []).append(line)
    base = statistics.median(x["cpu_us_per_request"] for x in by.get("httpx", lines))
    print(f"{'client':<9} {'CPU µs/request':>15} {'× httpx':>8} {'requests/s':>11}", file=sys.stderr)
    for name, group in by.items():
        cpu = statistics.median(x["cpu_us_per_request"] for x in group)
        rate = statistics.median(x["rate"] for x in group)
        print(f"{name:<9} {cpu:>15.1f} {cpu / base:>8.2f} {rate:>11.1f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
