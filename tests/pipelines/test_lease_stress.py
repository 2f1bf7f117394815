"""Many short one-stage pipelines under CPU contention: none waits out an execution's lease.

A pipeline's execution runs in this process's worker; its stage's result resumes it at once (a
direct resume: the result's write leases the execution to the worker). The worker renews the
leases it holds in the background. A renewal that asked for an activation which then ended
(its execution suspended) answered "lost" for that execution, and the worker took it for the
activation of the direct resume that followed at the next epoch: that one stopped ("lease lost
... at epoch 2"), holding a lease nobody renewed, and its pipeline finished only when the
lease ran out. Busy cores widen the window between the renewal's question and its answer.

The engine's lease is short here (renewed every 1.3 s), so that a run of a few seconds holds a few
renewals; a pipeline that finishes later than the lease is a late finisher (one that waited out
a lease: the others take a fraction of it, even on a loaded machine).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta

import pytest

from flowli import Registry
from flowli.pipelines import Applications, Pipelines, Workers, install

pytestmark = pytest.mark.e2e  # it keeps every core of the machine busy with processes of its own

LEASE = 4.0
"""The executions' lease (seconds): renewed every 1.3 s; a pipeline that lost it waits it out."""
LATE = LEASE
"""A pipeline that takes longer than this from its create to its end finished late."""
RUN_SECONDS = 10.0
CREATORS = 12
POLLERS = 8


@contextlib.contextmanager
def busy_cores() -> Iterator[None]:
    """A busy-loop process per core, for the block (the machine is busy with other work)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(10)


async def test_many_short_pipelines_under_busy_cores_never_wait_out_a_lease(open_engine, caplog):
    caplog.set_level(logging.WARNING, logger="flowli.worker")
    registry = Registry()
    install(registry)
    async with open_engine(registry, worker=False, lease_ttl=timedelta(seconds=LEASE)) as engine:
        apps = Applications(engine)
        _, key = await apps.create("stress")
        access = await apps.authenticate(key)
        pipelines = Pipelines(engine)
        workers = Workers(engine, pipelines, lease_ttl=30.0)
        boot = await workers.bootstrap(access, {"workerName": "raw", "supportedHandlers": ["Echo"]})
        session = await workers.session(boot["workerSessionToken"])
        loop = asyncio.get_running_loop()
        finished: dict[int, asyncio.Future[float]] = {}
        latencies: dict[int, float] = {}
        stop = asyncio.Event()

        def ended(pid: int) -> asyncio.Future[float]:
            return finished.setdefault(pid, loop.create_future())

        async def until_ended(pid: int, eid: str) -> None:
            await engine.result(eid, timeout=60)
            if not ended(pid).done():
                ended(pid).set_result(loop.time())

        waiters: set[asyncio.Task[None]] = set()

        async def poller() -> None:  # a lean raw worker: pull, answer at once
            while not stop.is_set():
                job = await workers.pull(session, {"waitSeconds": 0.5})
                if job is None:
                    continue
                task = await engine.task(job["token"], application="stress")
                assert task is not None and task.eid is not None
                status, answer = await workers.result(session, job["stageId"], {
                    "executionId": job["executionId"], "attempt": job["attempt"], "isSuccess": True, "output": "ok"})
                assert status == 202, answer
                waiter = asyncio.create_task(until_ended(job["pipelineId"], task.eid))
                waiters.add(waiter)
                waiter.add_done_callback(waiters.discard)

        async def creator(deadline: float) -> None:  # a lean client: create, await its end, again
            while loop.time() < deadline:
                t0 = loop.time()
                view, _ = await pipelines.create(access, {"name": "one-stage", "stages": [
                    {"stageName": "s", "stageHandlerName": "Echo", "input": "x"}]}, idempotent=False)
                latencies[view["id"]] = await asyncio.wait_for(ended(view["id"]), 60) - t0

        with busy_cores():
            async with engine.worker(concurrency=64, queues=("pipelines",)):
                polling = [asyncio.create_task(poller()) for _ in range(POLLERS)]
                try:
                    deadline = loop.time() + RUN_SECONDS
                    await asyncio.gather(*(creator(deadline) for _ in range(CREATORS)))
                finally:
                    stop.set()
                    died = [o for o in await asyncio.gather(*polling, return_exceptions=True) if o is not None]
                    for w in list(waiters):
                        w.cancel()
    late = sorted(round(s, 2) for s in latencies.values() if s > LATE)
    lost = [r.getMessage() for r in caplog.records if "lease lost" in r.getMessage()]
    # a poller that fails holds its job until the job's lease (30 s) runs out: its error, not the lateness, is the finding
    assert not died, f"{len(died)} of {POLLERS} pollers failed, the first with {died[0]!r}"
    assert len(latencies) >= 100, f"only {len(latencies)} pipelines ran: the test proves little"
    assert not late, (f"{len(late)} of {len(latencies)} pipelines finished late (seconds: {late});"
                      f" the worker logged: {lost[:5]}")
