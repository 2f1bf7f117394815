"""The peer: the workloads of BENCH.md on DBOS Transact (``pip install -e '.[bench]'``).

Each workload uses DBOS's documented API for async code: ``@DBOS.workflow()`` and
``@DBOS.step()`` on coroutine functions, ``DBOS.start_workflow_async`` to start (the workflow
runs on the caller's event loop, in the same process: DBOS has no separate worker, and no
concurrency limit on workflows started this way), ``handle.get_result()`` to wait,
``asyncio.gather`` of steps for W2, ``DBOS.sleep_async`` for W4, ``DBOS.recv_async`` and
``DBOS.send_async`` for W6. The step is the same trivial function as flowli's, as an async
step: ``step(i) -> {"i": i}``.

DBOS keeps one global instance per process, so each run is a process of its own
(:mod:`bench.child`): ``DBOS(config=...)`` on a fresh system database, ``DBOS.launch()``, the
workload, ``DBOS.destroy()``. The configuration is DBOS's as shipped but for what a bench must
switch off: no admin server (its port would clash between runs) and log level WARNING. On
SQLite, DBOS opens its file with its own settings (rollback journal, SQLite's default
``synchronous=FULL``); on PostgreSQL it gets a database of its own (see :mod:`bench.targets`).
W5 (worker processes) does not run on DBOS here.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import math
import time
from collections.abc import Iterator
from typing import Any

from dbos import DBOS

from .targets import backend_of

RESULT_TIMEOUT = 600.0
RECV_TIMEOUT = 3600.0
"""``DBOS.recv_async`` gives up after ``timeout_seconds`` (60 by default): W6 waits longer."""


class BenchError(RuntimeError):
    """A DBOS run did not complete all its workflows as expected."""


def version() -> str | None:
    try:
        return importlib.metadata.version("dbos")
    except importlib.metadata.PackageNotFoundError:
        return None


# ---- the step and the workflows --------------------------------------------------------------


@DBOS.step()
async def step(i: int) -> dict[str, int]:
    """The trivial step of BENCH.md."""
    return {"i": i}


@DBOS.workflow()
async def sequential(steps: int) -> int:
    """W1: ``steps`` sequential steps."""
    total = 0
    for i in range(steps):
        total += (await step(i))["i"]
    return total


@DBOS.workflow()
async def fan_out(width: int) -> int:
    """W2: ``width`` steps gathered concurrently; returns their count."""
    values = await asyncio.gather(*(step(i) for i in range(width)))
    return len(values)


@DBOS.workflow()
async def one_step(i: int) -> int:
    """W3: one step."""
    return (await step(i))["i"]


@DBOS.workflow()
async def sleep_then_step(seconds: float, i: int) -> int:
    """W4: a durable sleep, then one step."""
    await DBOS.sleep_async(seconds)
    return (await step(i))["i"]


ARRIVED: set[int] = set()
"""W6: the workflows that reached ``recv`` in this process (a bench-side count, not durable)."""


@DBOS.workflow()
async def wait_signal(i: int) -> int:
    """W6: wait for one message on topic ``go``; return its ``i``."""
    ARRIVED.add(i)
    message = await DBOS.recv_async("go", timeout_seconds=RECV_TIMEOUT)
    if message is None:  # recv's timeout
        raise BenchError(f"workflow {i}: no message within {RECV_TIMEOUT} s")
    return int(message["i"])


# ---- the runs -------------------------------------------------------------------------------


@contextlib.contextmanager
def launched(url: str) -> Iterator[None]:
    """The global DBOS instance on ``url`` (its system database), launched; destroyed on exit."""
    DBOS(config={
        "name": "flowli-bench",
        "system_database_url": url,
        "run_admin_server": False,
        "log_level": "WARNING",
    })
    try:
        DBOS.launch()
        yield
    finally:
        DBOS.destroy(destroy_registry=False)


def _line(url: str, workload: str, n: int, wall: float, rate: float | None, unit: str, **extra: Any) -> dict[str, Any]:
    return {
        "engine": "dbos", "backend": backend_of(url), "workload": workload, "n": n,
        "wall_s": round(wall, 4), "rate": None if rate is None else round(rate, 1), "unit": unit,
        "dbos": version(), **extra,
    }


async def _check(handles: list[Any], values: list[Any], expected: list[Any]) -> None:
    """Every workflow returned the expected value and is SUCCESS in the system database."""
    if values != expected:
        bad = [(h.get_workflow_id(), v, e) for h, v, e in zip(handles, values, expected) if v != e][:3]
        raise BenchError(f"unexpected results (workflow id, got, expected): {bad}")
    for h in handles:
        status = await h.get_status()
        if status.status != "SUCCESS":
            raise BenchError(f"workflow {h.get_workflow_id()} is {status.status}, not SUCCESS")


async def _results(handles: list[Any]) -> list[Any]:
    return list(await asyncio.wait_for(asyncio.gather(*(h.get_result() for h in handles)), RESULT_TIMEOUT))


async def run_w1(url: str, n: int = 200, *, steps: int = 10) -> dict[str, Any]:
    t0 = time.perf_counter()
    handles = [await DBOS.start_workflow_async(sequential, steps) for _ in range(n)]
    started = time.perf_counter()
    values = await _results(handles)
    wall = time.perf_counter() - t0
    await _check(handles, values, [sum(range(steps))] * n)
    total = n * steps
    return _line(url, "W1", n, wall, total / wall, "steps/s", steps=total, start_s=round(started - t0, 4))


async def run_w2(url: str, n: int = 500) -> dict[str, Any]:
    t0 = time.perf_counter()
    handle = await DBOS.start_workflow_async(fan_out, n)
    values = await _results([handle])
    wall = time.perf_counter() - t0
    await _check([handle], values, [n])
    return _line(url, "W2", n, wall, n / wall, "steps/s", steps=n)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


async def run_w3(url: str, n: int = 100) -> dict[str, Any]:
    latencies: list[float] = []
    handles: list[Any] = []
    values: list[Any] = []
    t0 = time.perf_counter()
    for i in range(n):
        s = time.perf_counter()
        handle = await DBOS.start_workflow_async(one_step, i)
        values.append(await asyncio.wait_for(handle.get_result(), RESULT_TIMEOUT))
        latencies.append(time.perf_counter() - s)
        handles.append(handle)
    wall = time.perf_counter() - t0
    await _check(handles, values, list(range(n)))
    ms = [x * 1000 for x in latencies]
    return _line(url, "W3", n, wall, n / wall, "workflows/s", p50_ms=round(percentile(ms, 50), 2),
                 p99_ms=round(percentile(ms, 99), 2), max_ms=round(max(ms), 2))


async def run_w4(url: str, n: int = 200, *, sleep_s: float = 1.0) -> dict[str, Any]:
    t0 = time.perf_counter()
    handles = [await DBOS.start_workflow_async(sleep_then_step, sleep_s, i) for i in range(n)]
    started = time.perf_counter()
    values = await _results(handles)
    wall = time.perf_counter() - t0
    await _check(handles, values, list(range(n)))
    return _line(url, "W4", n, wall, None, "s", sleep_s=sleep_s, overhead_s=round(wall - sleep_s, 4),
                 start_s=round(started - t0, 4))


def _waiting() -> int | None:
    """The receivers DBOS has registered and not yet woken (its internal map; None if it moved)."""
    try:
        from dbos._dbos import _get_dbos_instance

        return len(_get_dbos_instance()._sys_db.notifications_map.snapshot())
    except (ImportError, AttributeError):
        return None


async def run_w6(url: str, n: int = 10_000) -> dict[str, Any]:
    """W6: ``n`` workflows wait in ``recv``, then each gets one ``send``. A workflow counts as
    suspended once it has entered ``recv`` and DBOS lists it among its registered receivers."""
    from .w6 import rss_mb, w6_line

    ARRIVED.clear()
    base = rss_mb()
    t0 = time.perf_counter()
    handles = [await DBOS.start_workflow_async(wait_signal, i) for i in range(n)]
    started = time.perf_counter()
    deadline = time.monotonic() + RESULT_TIMEOUT
    while True:
        waiting = _waiting()
        if len(ARRIVED) >= n and (waiting is None or waiting >= n):
            break
        if time.monotonic() > deadline:
            raise BenchError(f"{n - len(ARRIVED)} of {n} workflows not in recv after {RESULT_TIMEOUT} s "
                             f"({waiting} receivers registered)")
        await asyncio.sleep(0.1)
    suspended_at = time.perf_counter()
    suspended = rss_mb()
    receivers = _waiting()
    t1 = time.perf_counter()
    for i, h in enumerate(handles):
        await DBOS.send_async(h.get_workflow_id(), {"i": i}, "go")
    signalled = time.perf_counter()
    values = await _results(handles)
    wall = time.perf_counter() - t1
    await _check(handles, values, list(range(n)))
    end = rss_mb()
    return w6_line("dbos", backend_of(url), n, wall, base=base, suspended=suspended, end=end,
                   start_s=started - t0, suspend_s=suspended_at - t0, signal_s=signalled - t1,
                   dbos=version(), receivers_when_suspended=receivers)


WORKLOADS = {"W1": run_w1, "W2": run_w2, "W3": run_w3, "W4": run_w4, "W6": run_w6}


async def run(workload: str, url: str, n: int, **options: Any) -> dict[str, Any]:
    """One run of ``workload`` on a launched DBOS (call inside :func:`launched`)."""
    if workload not in WORKLOADS:
        raise BenchError(f"{workload} does not run on DBOS here (known: {', '.join(WORKLOADS)})")
    if workload != "W4":
        options.pop("sleep_s", None)
    return await WORKLOADS[workload](url, n, **options)
