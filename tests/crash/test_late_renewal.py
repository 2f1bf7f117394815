"""A worker stalled past its lease renews it late, then dies: its execution is still recovered.

The chaos test found this on PostgreSQL (renewals that failed left leases to expire under live
workers); here the same sequence is played step by step, on a controlled clock: worker X holds
the lease; X stalls past it; a sweep enqueues the RESUME that recovers the execution; X renews
late; a worker dequeues the RESUME; X dies. Whether the late renewal is refused (X lost the
lease) or accepted (X kept it), the execution must not be left running under a dead lease.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest

import flowli
from flowli.domain import TaskKind
from flowli.testing import Clock, drain, store_of

from . import until
from .app import registry

pytestmark = pytest.mark.integration

LEASE = timedelta(seconds=10)


async def test_a_late_renewal_then_death_leaves_the_execution_recoverable(tmp_path: Path, db_url: str) -> None:
    clock = Clock()
    engine = await flowli.connect(db_url, registry, clock=clock, lease_ttl=LEASE, poll_interval=0.02)
    async with engine:
        store = store_of(engine)
        eid = await engine.start("crash.steps", str(tmp_path), ["s0"])
        await drain(engine)  # the second append is done: the sweep below repairs nothing
        (start,) = await store.read_tasks(eid=eid)
        x = "crash-test:stalled-worker"
        acquired = await store.acquire(eid, x, LEASE, clock.now(), ack=start.id)
        assert acquired.epoch == 1

        await clock.advance(LEASE + timedelta(seconds=1))  # X stalls past its lease
        assert await engine.sweep() == 1
        (recover,) = await store.read_tasks(eid=eid)
        assert recover.kind is TaskKind.RESUME and "recover:" in recover.id
        renewal = await store.renew(x, [(eid, 1)], LEASE, clock.now())  # X runs again: it renews
        print(f"the late renewal: lost={renewal.lost}")

        async with engine.worker(concurrency=4, sweeper=False):
            await until(lambda: _not_ready(engine, recover.id), 10, f"a worker to take {recover.id}")
            await clock.advance(LEASE + timedelta(seconds=1))  # X dies; whatever lease it kept expires

            async def recoverable() -> bool:
                # a sweep that ran while the worker's acquisition was in flight saw X's lease, whose
                # recovery was taken already; the sweeps after it see the lease the worker took
                await engine.sweep()
                record = await engine.status(eid)
                live = record.lease_expires_at is not None and record.lease_expires_at > clock.now()
                return record.terminal or live or bool(await store.read_tasks(eid=eid))

            for _ in range(5):
                if await recoverable():
                    break
            else:
                record = await engine.status(eid)
                raise AssertionError(
                    f"execution {eid} is {record.status.value} under the expired lease of {record.lease_owner}"
                    f" (epoch {record.lease_epoch}), and no task will ever resume it: {recover.id} was acked"
                    f" by a worker that found the lease renewed, and a sweep enqueues the same id again")
            assert await engine.result(eid, timeout=10) == [f"s0:{os.getpid()}"]


async def _not_ready(engine: flowli.Engine, task_id: str) -> bool:
    return task_id not in {t.id for t in await engine.tasks()}
