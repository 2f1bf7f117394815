"""A workflow's name that becomes a decider's (its older executions finish as they began), a
failure's details and the instant of each command reaching the decider, and a decider's failed
execution reopened by ``engine.retry`` with a signal. Both backends."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import flowli
from flowli import Context, Registry
from flowli.domain import RegistrationError, Status
from flowli.engine.deciders import Delegate, Event, Fail, Failed, Retried, Start

from .conftest import FAST

pytestmark = pytest.mark.integration


def decide(state: dict[str, Any], command: Any) -> tuple[list[Event], list[Any]]:
    match command:
        case Start():
            return [Event("started", {"at": command.at})], [Delegate("job", "jobs", None)]
        case Failed(details=details):
            return [Event("failed", {"details": details, "at": command.at})], [Fail("the job failed", "JobFailed")]
        case Retried(channel="again"):  # a retry with its message
            return [Event("again", {"at": command.at})], [Delegate("job", "jobs", None, attempt=2)]
    return [], []


def evolve(state: dict[str, Any], event: Event) -> dict[str, Any]:
    return {**state, "events": [*state["events"], event.kind], "last": event.data}


def registry() -> Registry:
    r = Registry()

    @r.workflow("job")  # version 1: a workflow
    async def job(ctx: Context, n: int) -> int:
        return await ctx.step(lambda: n + 1)

    r.decider("job", version="2", initial={"events": [], "last": None}, evolve=evolve)(decide)
    return r


def test_a_name_has_workflow_and_decider_versions_but_not_one_version_twice() -> None:
    r = registry()
    assert r.decider_of("job") is not None and r.decider_of("job", "1") is None
    assert r.get("job", "1").version == "1"
    with pytest.raises(RegistrationError):
        r.decider("job", version="1", initial={}, evolve=evolve)(decide)


async def test_both_versions_run_and_a_failed_decider_reopens_with_a_signal(db_url: str, tmp_path: Any) -> None:
    engine = await flowli.connect(db_url, registry(), bucket=str(tmp_path / "bucket"), **FAST)
    async with engine, engine.worker(queues=("default",)):
        old = await engine.start("job", 1, version="1")
        assert await engine.result(old, timeout=10) == 2
        eid = await engine.start("job", None)  # the highest version: the decider
        consumer = engine.consumer("jobs", name="w", lease=timedelta(seconds=30))
        tasks: list[Any] = []
        while not tasks:
            tasks = await consumer.dequeue(limit=1, wait=0.05)
        await consumer.fail(tasks[0], "BROKEN", "no", details={"fingerprint": "abc"})
        record = await engine.status(eid)
        assert record.status is Status.FAILED
        _, state = await engine.decider_state(eid)
        assert state["events"] == ["started", "failed"] and state["last"]["details"] == {"fingerprint": "abc"}
        assert isinstance(state["last"]["at"], str)  # each command reaches decide with its instant
        await engine.retry(eid, reason="again", signal=("again", None))
        assert (await engine.status(eid)).status is Status.SUSPENDED
        _, state = await engine.decider_state(eid)
        assert state["events"] == ["started", "failed", "again"]
        tasks = []
        while not tasks:
            tasks = await consumer.dequeue(limit=1, wait=0.05)
        assert tasks[0].attempt == 2
        kinds = [e.kind.value for e in await engine.journal(eid)]
        assert "execution.retried" in kinds and kinds.count("execution.failed") == 1
