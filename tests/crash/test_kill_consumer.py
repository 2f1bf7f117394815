"""A consumer SIGKILLed while it holds a DELEGATE task: once its lease expires, the sweeper ends
that attempt (LEASE_EXPIRED), the execution makes the next one, and another consumer answers it;
the dead consumer's attempt stays ended (an answer to it would be stale)."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

import flowli
from flowli.domain import EntryKind, StaleAnswer, TaskKind, task_id

from . import Workers, until
from .app import registry

pytestmark = pytest.mark.e2e

CONSUMER = Path(__file__).resolve().parent / "consumer_main.py"
QUEUE = "crash-consumers"


async def test_a_consumer_killed_holding_its_task_gives_the_work_to_the_next_attempt(
    tmp_path: Path, workers: Workers
) -> None:
    engine = await flowli.connect(workers.url, registry, sweep_interval=0.2, poll_interval=0.05)
    async with engine, engine.worker():
        eid = await engine.start("crash.delegated", "invoice-7", by="crash-test@example.com")
        held = tmp_path / "held.txt"
        with open(tmp_path / "consumer.log", "wb") as log:
            proc = subprocess.Popen([sys.executable, str(CONSUMER), workers.url, QUEUE, str(held), "--lease", "1.5"],
                                    stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
        try:
            await until(held.exists, 30, "the consumer process to hold the task")
            first_id, first_attempt = held.read_text().split()
            assert (first_id, first_attempt) == (task_id(TaskKind.DELEGATE, eid, "root/delegate:work@1"), "1")
            proc.kill()  # SIGKILL: no answer, no nack, its lease simply runs out
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
        second = task_id(TaskKind.DELEGATE, eid, "root/delegate:work@2")

        async def second_open() -> bool:
            return second in {t.id for t in await engine.tasks(eid=eid)}

        await until(second_open, 30, "the second attempt after the dead consumer's lease expired")
        survivor = engine.consumer(QUEUE, "survivor", lease=timedelta(seconds=30))
        [task] = await until(survivor.dequeue, 10, "the second attempt on the queue")
        assert (task.id, task.attempt, task.payload) == (second, 2, {"subject": "invoice-7"})
        await survivor.answer(task, {"approved": True}, by="carol@example.com")
        assert await engine.result(eid, timeout=30) == {"approved": True}

        dead = await engine.task(first_id)
        assert dead is not None and dead.state == "withdrawn"
        with pytest.raises(StaleAnswer):
            await survivor.answer(dead, {"approved": False})
        journal = await engine.journal(eid)
        frame = [(e.kind, e.attempt, (e.error or {}).get("type")) for e in journal if e.fid == "root/delegate:work"]
        assert frame == [
            (EntryKind.FRAME_STARTED, 1, None), (EntryKind.FRAME_FAILED, 1, "LEASE_EXPIRED"),
            (EntryKind.FRAME_STARTED, 2, None), (EntryKind.FRAME_COMPLETED, 2, None),
        ]
