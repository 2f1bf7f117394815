"""W6 of BENCH.md on flowli: ``n`` executions suspended on ``ctx.receive``, then each signalled once.

The run (client and worker in one process, as W1–W4) starts the ``n`` executions back to back,
waits until every one is ``suspended`` in the store (its ``receive`` found no message), then
signals each once (``engine.signal``, back to back) and waits until all have completed with
the value of their message. The figures: the wall seconds to drain (first signal to last
completion, ``wall_s``), and the memory of the process: its RSS after the engine opened
(``rss_base_mb``), once all are suspended (``rss_suspended_mb``) and its peak (``peak_rss_mb``,
the kernel's high-water mark, ``VmHWM``). :mod:`bench.child` runs it in a subprocess of the
bench, so that the peak is this run's alone, and samples the subprocess's RSS from outside too.

Waiting reads the executions not yet in the awaited state, in chunks, every ``POLL`` seconds
(as W5 does), not ``engine.result`` per execution, whose fallback poll (every 0.5 s for each of
10 000 executions) would load the store it measures.
"""

from __future__ import annotations

import asyncio
import resource
import time
from typing import Any

import flowli
from flowli.domain import Status

from .targets import backend_of
from .workloads import RESULT_TIMEOUT, BenchError, registry

POLL = 0.1
CHUNK = 500
DEFAULT_N = 10_000


@registry.workflow("bench.wait_signal", version="1")
async def wait_signal(ctx: flowli.Context, i: int) -> int:
    """W6: wait for one message on ``go``; return its ``i``."""
    message = await ctx.receive("go")
    return int(message["i"])


def rss_mb() -> float:
    """This process's resident set now, in MiB (psutil)."""
    import psutil

    return round(psutil.Process().memory_info().rss / 2**20, 1)


def peak_rss_mb() -> float:
    """This process's peak resident set so far, in MiB: ``VmHWM`` of ``/proc/self/status`` (Linux),
    the high-water mark of this program's memory. Not ``ru_maxrss``, which on Linux carries the
    resident set of the parent at the fork that preceded the exec: a child of an 80 MiB bench
    reports at least 80 MiB. The kernel updates ``VmHWM`` lazily (it may lag ``VmRSS``): the larger
    of the two."""
    try:
        with open("/proc/self/status") as f:
            kib = {k: int(v.split()[0]) for k, _, v in (row.partition(":") for row in f) if k in ("VmHWM", "VmRSS")}
        return round(max(kib.values()) / 1024, 1)
    except (OSError, ValueError):
        return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


async def wait_for(engine: flowli.Engine, eids: list[str], done: Any, what: str,
                   timeout: float = RESULT_TIMEOUT) -> dict[str, Any]:
    """Wait until ``done(record)`` holds for every execution; returns the records by eid."""
    reached: dict[str, Any] = {}
    deadline = time.monotonic() + timeout
    while True:
        remaining = [eid for eid in eids if eid not in reached]
        for at in range(0, len(remaining), CHUNK):
            for record in await engine.statuses(remaining[at:at + CHUNK]):
                if done(record):
                    reached[record.eid] = record
                elif record.terminal:
                    raise BenchError(f"execution {record.eid} ended {record.status.value} while waiting for {what}")
        if len(reached) == len(eids):
            return reached
        if time.monotonic() > deadline:
            raise BenchError(f"{len(eids) - len(reached)} of {len(eids)} executions not {what} after {timeout} s")
        await asyncio.sleep(POLL)


async def run_w6(url: str, n: int = DEFAULT_N, *, concurrency: int = 64, opener: Any = None) -> dict[str, Any]:
    """W6: ``n`` executions suspended on ``receive``, then each signalled once (see the module)."""
    engine = await (opener(url) if opener else flowli.connect(url, registry))
    async with engine, engine.worker(concurrency=concurrency):
        base = rss_mb()
        t0 = time.perf_counter()
        eids = [await engine.start(wait_signal, i) for i in range(n)]
        started = time.perf_counter()
        await wait_for(engine, eids, lambda r: r.status is Status.SUSPENDED, "suspended")
        suspended_at = time.perf_counter()
        suspended = rss_mb()
        t1 = time.perf_counter()
        for i, eid in enumerate(eids):
            await engine.signal(eid, "go", {"i": i})
        signalled = time.perf_counter()
        records = await wait_for(engine, eids, lambda r: r.terminal, "ended")
        wall = time.perf_counter() - t1
        bad = [(eid, records[eid].status.value, records[eid].result) for i, eid in enumerate(eids)
               if records[eid].status is not Status.COMPLETED or records[eid].result != i]
        if bad:
            raise BenchError(f"{len(bad)} executions did not complete with their message: {bad[:3]}")
        end = rss_mb()
    return w6_line("flowli", backend_of(url), n, wall, base=base, suspended=suspended, end=end,
                   start_s=started - t0, suspend_s=suspended_at - t0, signal_s=signalled - t1,
                   concurrency=concurrency)


def w6_line(engine: str, backend: str, n: int, wall: float, *, base: float, suspended: float, end: float,
            start_s: float, suspend_s: float, signal_s: float, **extra: Any) -> dict[str, Any]:
    """The JSON line of W6, the same for both engines."""
    return {
        "engine": engine, "backend": backend, "workload": "W6", "n": n, "wall_s": round(wall, 4),
        "rate": round(n / wall, 1), "unit": "executions/s", "drain_s": round(wall, 4),
        "start_s": round(start_s, 4), "suspend_s": round(suspend_s, 4), "signal_s": round(signal_s, 4),
        "rss_base_mb": base, "rss_suspended_mb": suspended, "rss_end_mb": end,
        "peak_rss_mb": max(peak_rss_mb(), base, suspended, end),  # VmHWM may lag an RSS read earlier
        "kb_per_suspended": round((suspended - base) * 1024 / n, 2),
        "rss_of": "the bench's subprocess running client and worker (VmHWM for the peak)", **extra,
    }
