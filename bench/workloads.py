"""Workloads W1–W4 and W7 of BENCH.md and of the issues, on the database of a URL (fresh for each run, see :mod:`bench.targets`).

Each ``run_*`` function opens its own engine on ``url`` (``flowli.connect``, or ``opener`` when
given: :mod:`bench.drivers` passes one that builds the store on another driver), runs the worker
in the same process as the client, and returns the JSON-ready result line of BENCH.md (without
the versions and machine, which :mod:`bench.run` adds). Every run checks that all executions it
started completed with the expected value, and raises :class:`BenchError` otherwise. W5 (worker
processes on PostgreSQL) is in :mod:`bench.w5`.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Awaitable, Callable

import flowli
from flowli.domain import Status

from .targets import backend_of

registry = flowli.Registry()

RESULT_TIMEOUT = 600.0
"""Seconds a run waits for its executions at most (a hang fails the run instead of the bench)."""


class BenchError(RuntimeError):
    """A run did not complete all its executions as expected."""


# ---- the step and the workflows (module level: the engine imports steps by reference) ------


def step(i: int) -> dict[str, int]:
    """The trivial step of BENCH.md."""
    return {"i": i}


@registry.workflow("bench.sequential", version="1")
async def sequential(ctx: flowli.Context, steps: int) -> int:
    """W1: ``steps`` sequential steps."""
    total = 0
    for i in range(steps):
        total += (await ctx.step(step, i))["i"]
    return total


@registry.workflow("bench.fan_out", version="1")
async def fan_out(ctx: flowli.Context, width: int) -> int:
    """W2: ``width`` steps gathered concurrently; returns their count."""
    values = await ctx.gather(*(ctx.step(step, i) for i in range(width)))
    return len(values)


@registry.workflow("bench.one_step", version="1")
async def one_step(ctx: flowli.Context, i: int) -> int:
    """W3: one step."""
    return (await ctx.step(step, i))["i"]


@registry.workflow("bench.sleep", version="1")
async def sleep_then_step(ctx: flowli.Context, seconds: float, i: int) -> int:
    """W4: a durable sleep, then one step."""
    await ctx.sleep(timedelta(seconds=seconds))
    return (await ctx.step(step, i))["i"]


_ROUNDS: dict[str, asyncio.Queue[int]] = {}
"""W7: the rounds each ping-pong workflow has reached (its step tells the client, in this process)."""


async def reached(key: str, k: int) -> int:
    """W7's step: tell the client that the workflow ``key`` waits for round ``k``'s message."""
    _ROUNDS[key].put_nowait(k)
    return k


@registry.workflow("bench.ping_pong", version="1")
async def ping_pong(ctx: flowli.Context, key: str, rounds: int) -> int:
    """W7: ``rounds`` rounds of a step, then a receive the client answers with a signal."""
    total = 0
    for k in range(rounds):
        await ctx.step(reached, key, k)
        total += int(await ctx.receive("go"))
    return total


# ---- the runs ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    id: str
    title: str
    default_n: int
    unit: str
    run: Callable[..., Awaitable[dict[str, Any]]]


Opener = Callable[[str], Awaitable[flowli.Engine]]


async def _open(url: str, opener: Opener | None = None) -> flowli.Engine:
    return await (opener or _connect)(url)


async def _connect(url: str) -> flowli.Engine:
    return await flowli.connect(url, registry)


async def _await_all(engine: flowli.Engine, eids: list[str]) -> list[Any]:
    return list(await asyncio.gather(*(engine.result(eid, timeout=RESULT_TIMEOUT) for eid in eids)))


async def _check_completed(engine: flowli.Engine, eids: list[str], values: list[Any], expected: list[Any]) -> None:
    """Every execution is COMPLETED in the store and returned the expected value."""
    if values != expected:
        bad = [(eid, v, e) for eid, v, e in zip(eids, values, expected) if v != e][:3]
        raise BenchError(f"unexpected results (eid, got, expected): {bad}")
    for eid in eids:
        record = await engine.status(eid)
        if record.status is not Status.COMPLETED:
            raise BenchError(f"execution {eid} is {record.status.value}, not completed")


def _line(url: str, workload: str, n: int, wall: float, rate: float | None, unit: str, **extra: Any) -> dict[str, Any]:
    return {
        "engine": "flowli", "backend": backend_of(url), "workload": workload, "n": n,
        "wall_s": round(wall, 4), "rate": None if rate is None else round(rate, 1), "unit": unit, **extra,
    }


async def run_w1(url: str, n: int = 200, *, opener: Opener | None = None, steps: int = 10, concurrency: int = 64) -> dict[str, Any]:
    """W1: start ``n`` workflows of ``steps`` sequential steps back to back, then wait for all."""
    engine = await _open(url, opener)
    async with engine, engine.worker(concurrency=concurrency):
        t0 = time.perf_counter()
        eids = [await engine.start(sequential, steps) for _ in range(n)]
        started = time.perf_counter()
        values = await _await_all(engine, eids)
        wall = time.perf_counter() - t0
        await _check_completed(engine, eids, values, [sum(range(steps))] * n)
    total = n * steps
    return _line(url, "W1", n, wall, total / wall, "steps/s", steps=total, start_s=round(started - t0, 4),
                 concurrency=concurrency)


async def run_w2(url: str, n: int = 500, *, opener: Opener | None = None, concurrency: int = 64) -> dict[str, Any]:
    """W2: one workflow gathers ``n`` steps and returns their count."""
    engine = await _open(url, opener)
    async with engine, engine.worker(concurrency=concurrency):
        t0 = time.perf_counter()
        eid = await engine.start(fan_out, n)
        values = await _await_all(engine, [eid])
        wall = time.perf_counter() - t0
        await _check_completed(engine, [eid], values, [n])
    return _line(url, "W2", n, wall, n / wall, "steps/s", steps=n, concurrency=concurrency)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0–100), nearest rank."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


async def run_w3(url: str, n: int = 100, *, opener: Opener | None = None, concurrency: int = 64) -> dict[str, Any]:
    """W3: ``n`` one-step workflows, each started and awaited before the next starts."""
    engine = await _open(url, opener)
    latencies: list[float] = []
    eids: list[str] = []
    values: list[Any] = []
    async with engine, engine.worker(concurrency=concurrency):
        t0 = time.perf_counter()
        for i in range(n):
            s = time.perf_counter()
            eid = await engine.start(one_step, i)
            values.append(await engine.result(eid, timeout=RESULT_TIMEOUT))
            latencies.append(time.perf_counter() - s)
            eids.append(eid)
        wall = time.perf_counter() - t0
        await _check_completed(engine, eids, values, list(range(n)))
    ms = [x * 1000 for x in latencies]
    return _line(url, "W3", n, wall, n / wall, "workflows/s",
                 p50_ms=round(percentile(ms, 50), 2), p99_ms=round(percentile(ms, 99), 2),
                 max_ms=round(max(ms), 2), concurrency=concurrency)


async def run_w4(url: str, n: int = 200, *, opener: Opener | None = None, sleep_s: float = 1.0, concurrency: int = 64) -> dict[str, Any]:
    """W4: ``n`` workflows each sleep ``sleep_s`` seconds, then run one step. The figure is the wall."""
    engine = await _open(url, opener)
    async with engine, engine.worker(concurrency=concurrency):
        t0 = time.perf_counter()
        eids = [await engine.start(sleep_then_step, sleep_s, i) for i in range(n)]
        started = time.perf_counter()
        values = await _await_all(engine, eids)
        wall = time.perf_counter() - t0
        await _check_completed(engine, eids, values, list(range(n)))
    return _line(url, "W4", n, wall, None, "s", sleep_s=sleep_s, overhead_s=round(wall - sleep_s, 4),
                 start_s=round(started - t0, 4), concurrency=concurrency)


async def run_w7(url: str, n: int = 2000, *, opener: Opener | None = None, window: int = 100,
                 concurrency: int = 4) -> dict[str, Any]:
    """W7: one workflow does ``n`` rounds of ``receive``, each answered by a ``signal`` once the
    workflow reached it (its step says so) and suspended there. The figure is the time per round of the last
    ``window`` rounds over that of the first ``window``: a workflow that replays its journal on
    every resume grows with it."""
    engine = await _open(url, opener)
    key = f"w7-{time.monotonic_ns()}"
    _ROUNDS[key] = asyncio.Queue()
    took: list[float] = []
    try:
        async with engine, engine.worker(concurrency=concurrency):
            t0 = time.perf_counter()
            eid = await engine.start(ping_pong, key, n)
            for k in range(n):
                began = time.perf_counter()
                got = await asyncio.wait_for(_ROUNDS[key].get(), RESULT_TIMEOUT)
                if got != k:
                    raise BenchError(f"round {got} came where {k} was expected")
                # the message of a person comes after the workflow suspended (no worker holds it)
                while (await engine.status(eid)).status is not Status.SUSPENDED:
                    await asyncio.sleep(0.0005)
                await engine.signal(eid, "go", 1)
                took.append(time.perf_counter() - began)
            value = await engine.result(eid, timeout=RESULT_TIMEOUT)
            wall = time.perf_counter() - t0
            await _check_completed(engine, [eid], [value], [n])
    finally:
        _ROUNDS.pop(key, None)
    first = sum(took[1:window + 1]) / len(took[1:window + 1]) * 1000  # round 0 waits for the start
    last = sum(took[-window:]) / len(took[-window:]) * 1000
    return _line(url, "W7", n, wall, round(last / first, 2), "x", first_ms=round(first, 3), last_ms=round(last, 3),
                 window=window)


WORKLOADS: dict[str, Workload] = {
    "W1": Workload("W1", "sequential: n workflows x 10 steps", 200, "steps/s", run_w1),
    "W2": Workload("W2", "fan-out: one workflow gathers n steps", 500, "steps/s", run_w2),
    "W3": Workload("W3", "latency: n one-step workflows, one at a time", 100, "ms", run_w3),
    "W4": Workload("W4", "sleep: n workflows sleep 1 s then one step", 200, "s", run_w4),
    "W7": Workload("W7", "ping-pong: one workflow, n rounds of receive answered by signal", 2000, "x", run_w7),
}
