"""Operations on runs: ``engine.retry`` reopens a failed run from its last good point,
``engine.explain`` says what a run waits on, ``engine.terminate`` fails a run confirmed stale."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest

from flowli import Context, Registry
from flowli.domain import (
    EntryKind,
    ExecutionStateError,
    ExecutionTerminalError,
    LeaseLost,
    OperationRefused,
    RetryPolicy,
    StepFailed,
)
from flowli.store import Fence, Write
from flowli.testing import Clock, store_of

from ..crash import until
from .conftest import wait_status

pytestmark = pytest.mark.integration

BROKEN: dict[str, bool] = {}
RAN: dict[str, int] = {}


def once(name: str) -> str:
    RAN[name] = RAN.get(name, 0) + 1
    return f"{name} done"


def upstream(name: str) -> str:
    RAN[name] = RAN.get(name, 0) + 1
    if BROKEN.get(name, True):
        raise ConnectionError(f"{name} is down")
    return f"{name} answered"


def app() -> Registry:
    registry = Registry()

    @registry.workflow("pay")
    async def pay(ctx: Context, key: str) -> list[str]:
        first = await ctx.step(once, f"{key}-prepare")
        second = await ctx.step(upstream, key, retry=RetryPolicy(max_attempts=2, backoff=timedelta(0)))
        return [first, second]

    @registry.workflow("pay_child")
    async def pay_child(ctx: Context, key: str) -> Any:
        prepared = await ctx.step(once, f"{key}-parent")
        return [prepared, await ctx.child("pay", key)]

    @registry.workflow("raises")
    async def raises(ctx: Context, key: str) -> str:
        if BROKEN.get(key, True):
            raise ValueError("the workflow itself failed")
        return "fixed"

    @registry.workflow("naps")
    async def naps(ctx: Context) -> None:
        await ctx.sleep(timedelta(hours=2))

    @registry.workflow("listens")
    async def listens(ctx: Context) -> Any:
        return await ctx.receive("go")

    @registry.workflow("asks")
    async def asks(ctx: Context) -> Any:
        return await ctx.delegate("clerks", {"q": 1}, key="ask")

    @registry.workflow("parents")
    async def parents(ctx: Context) -> Any:
        return await ctx.child("listens")

    return registry


async def test_retry_reopens_a_failed_run_and_runs_only_the_failed_frame_again(open_engine):
    key = f"k{uuid.uuid4().hex}"
    seen: list[Any] = []

    async def record(transition: Any, call_next: Any) -> Any:
        seen.append((transition.kind, transition.principal.id))
        return await call_next()

    async with open_engine(app()) as engine:
        engine.use(record)
        eid = await engine.start("pay", key)
        with pytest.raises(StepFailed, match="is down"):
            await engine.result(eid, timeout=30)
        assert RAN[key] == 2 and RAN[f"{key}-prepare"] == 1
        BROKEN[key] = False  # the upstream is fixed
        assert await engine.retry(eid, by="ops@example.com", reason="upstream fixed") == "root/upstream#0"
        assert await engine.result(eid, timeout=30) == [f"{key}-prepare done", f"{key} answered"]
        assert RAN[key] == 3 and RAN[f"{key}-prepare"] == 1, "the memoized step ran zero times"
        journal = await engine.journal(eid)
        [retried] = [e for e in journal if e.kind is EntryKind.EXECUTION_RETRIED]
        assert retried.value["fid"] == "root/upstream#0" and retried.value["reason"] == "upstream fixed"
        assert str(retried.provenance.actor) == "human:ops@example.com"
        attempts = [e.attempt for e in journal if e.fid == "root/upstream#0" and e.kind is EntryKind.FRAME_STARTED]
        assert attempts == [1, 2, 3]  # the numbers go on; the policy counted afresh
        assert [k for k, who in seen if k == "retry"] == ["retry"]
        with pytest.raises(ExecutionStateError, match="cannot retry .* it is completed, it must be failed"):
            await engine.retry(eid)


async def test_retry_after_a_fresh_attempt_count_fails_again_as_the_policy_says(open_engine):
    key = f"again{uuid.uuid4().hex}"
    async with open_engine(app()) as engine:
        eid = await engine.start("pay", key)
        with pytest.raises(StepFailed):
            await engine.result(eid, timeout=30)
        await engine.retry(eid)
        with pytest.raises(StepFailed, match=r"after 4 attempt\(s\)"):  # in all, two of them since the retry
            await engine.result(eid, timeout=30)
        assert RAN[key] == 4  # two attempts before the retry, two after it


async def test_retry_of_a_parent_reopens_its_failed_child_first(open_engine):
    key = f"child{uuid.uuid4().hex}"
    async with open_engine(app()) as engine:
        eid = await engine.start("pay_child", key)
        with pytest.raises(StepFailed, match="child execution"):
            await engine.result(eid, timeout=30)
        BROKEN[key] = False
        await engine.retry(eid, by="ops@example.com")
        result = await engine.result(eid, timeout=30)
        assert result == [f"{key}-parent done", [f"{key}-prepare done", f"{key} answered"]]
        assert RAN[f"{key}-parent"] == 1 and RAN[f"{key}-prepare"] == 1


async def test_retry_of_a_run_whose_workflow_raised_replays_it_from_its_start(open_engine):
    key = f"raise{uuid.uuid4().hex}"
    async with open_engine(app()) as engine:
        eid = await engine.start("raises", key)
        with pytest.raises(ValueError, match="the workflow itself failed"):
            await engine.result(eid, timeout=30)
        BROKEN[key] = False
        assert await engine.retry(eid) is None
        assert await engine.result(eid, timeout=30) == "fixed"


async def test_retry_of_a_run_that_is_not_failed_is_refused(open_engine):
    async with open_engine(app()) as engine:
        eid = await engine.start("listens")
        await wait_status(engine, eid, "suspended")
        with pytest.raises(ExecutionStateError, match="it is suspended, it must be failed"):
            await engine.retry(eid)


# ---- explain -------------------------------------------------------------------------------


async def test_explain_names_each_wait(open_engine):
    clock = Clock()
    async with open_engine(app(), clock=clock) as engine:
        napping, listening, asking, parent = [await engine.start(w) for w in ("naps", "listens", "asks", "parents")]
        for eid in (napping, listening, asking, parent):
            await wait_status(engine, eid, "suspended")
        nap = await engine.explain(napping)
        assert [(w["kind"], w["at"]) for w in nap.waits] == [("timer", (clock.now() + timedelta(hours=2)).isoformat())]
        listen = await engine.explain(listening)
        assert [(w["kind"], w["channel"]) for w in listen.waits] == [("message", f"{listening}.go")]
        await until(lambda: engine.tasks(queue="clerks"), 40, "the clerk's task")
        ask = await engine.explain(asking)
        assert [(w["kind"], w["queue"], w["attempt"]) for w in ask.waits] == [("delegate", "clerks", 1)]
        assert "waits for a consumer to take its task on queue 'clerks'" in ask.summary
        [task] = await engine.consumer("clerks", "clerk-1").dequeue()
        held = await engine.explain(asking)
        assert held.waits[0]["held_by"] == "clerk-1" and "waits for clerk-1 to answer" in held.summary
        await wait_status(engine, (await engine.explain(parent)).waits[0]["child"], "suspended")  # its own activation too
        child = await engine.explain(parent)
        assert child.waits[0]["kind"] == "child" and child.waits[0]["child_status"] == "suspended"
        assert "waits for child execution" in child.summary and child.last_seq > 0
        await engine.signal(listening, "go", 1)
        await engine.result(listening, timeout=30)
        assert (await engine.explain(listening)).summary == "it ended completed; it waits on nothing"


async def test_explain_names_a_queue_that_no_live_worker_serves_and_an_expired_lease(open_engine):
    clock = Clock()
    async with open_engine(app(), clock=clock) as engine:
        stranded = await engine.start("listens", queue="nobody")
        await until(lambda: _kinds(engine, stranded), 40, "the workers' rows")
        why = await engine.explain(stranded)
        assert [w["kind"] for w in why.waits] == ["task", "queue"]
        assert why.waits[1]["message"] == "no live worker serves queue 'nobody'"
        dead = await engine.start("listens", queue="nobody")
        await store_of(engine).acquire(dead, "dead-worker", timedelta(seconds=5), clock.now(), ack=f"START:{dead}")
        assert (await engine.explain(dead)).waits[0]["kind"] == "running"
        await clock.advance(timedelta(seconds=6))
        lease = (await engine.explain(dead)).waits[0]
        assert (lease["kind"], lease["owner"]) == ("lease", "dead-worker") and "presumed dead" in lease["message"]


async def _kinds(engine: Any, eid: str) -> bool:
    return bool(await engine.workers()) and bool((await engine.explain(eid)).waits)


# ---- terminate -----------------------------------------------------------------------------


async def test_terminate_is_refused_while_the_run_progressed_lately_or_its_journal_moved_on(open_engine):
    clock = Clock()
    async with open_engine(app(), clock=clock) as engine:
        eid = await engine.start("listens")
        await wait_status(engine, eid, "suspended")
        with pytest.raises(OperationRefused, match="progressed 0 s ago, within min_idle of 600 s"):
            await engine.terminate(eid, "stuck", by="ops@example.com")
        await clock.advance(timedelta(minutes=11))
        last = (await engine.journal(eid))[-1].seq
        with pytest.raises(OperationRefused, match=f"its journal ends at seq {last}, not at the expected {last - 1}"):
            await engine.terminate(eid, "stuck", by="ops@example.com", expected_last_seq=last - 1)
        with pytest.raises(ValueError, match="needs a reason"):
            await engine.terminate(eid, " ", by="ops@example.com")
        assert (await engine.status(eid)).status.value == "suspended"
        await engine.terminate(eid, "stuck for good", by="ops@example.com", expected_last_seq=last)
        record = await engine.status(eid)
        assert record.status.value == "failed"
        assert (record.error["type"], record.error["code"], record.error["message"], record.error["by"]) == (
            "Terminated", "TERMINATED", "stuck for good", "human:ops@example.com")
        assert await engine.timers(eid) == [] and await store_of(engine).waiters(f"{eid}.go") == []
        with pytest.raises(ExecutionTerminalError):
            await engine.terminate(eid, "again", min_idle=timedelta(0))


async def test_terminate_is_refused_while_a_live_worker_holds_the_lease_and_fences_a_paused_one(open_engine):
    clock = Clock()
    async with open_engine(app(), clock=clock, worker=False) as engine:
        eid = await engine.start("listens")
        held = await store_of(engine).acquire(eid, "paused-worker", timedelta(minutes=30), clock.now(), ack=f"START:{eid}")
        with pytest.raises(OperationRefused, match=r"a live worker holds its lease \(paused-worker\)"):
            await engine.terminate(eid, "stuck", min_idle=timedelta(0))
        await clock.advance(timedelta(minutes=31))  # its lease expired: it is presumed dead
        await engine.terminate(eid, "its worker died", min_idle=timedelta(0))
        with pytest.raises(LeaseLost):  # the worker was only paused: it writes nothing more
            await store_of(engine).write(Write(fence=Fence(eid, "paused-worker", held.epoch), release=True), clock.now())
        assert (await engine.status(eid)).status.value == "failed"


async def test_a_terminated_child_fails_its_parent_and_an_open_delegation_is_withdrawn(open_engine):
    clock = Clock()
    async with open_engine(app(), clock=clock) as engine:
        parent = await engine.start("parents")
        asking = await engine.start("asks")
        await wait_status(engine, parent, "suspended")
        await until(lambda: engine.tasks(queue="clerks"), 40, "the clerk's task")
        [child_frame] = (await engine.run_view(parent)).frames
        await wait_status(engine, child_frame.child, "suspended")  # its task is written before its suspension
        await clock.advance(timedelta(minutes=11))
        await engine.terminate(child_frame.child, "abandoned")
        with pytest.raises(StepFailed, match="abandoned"):
            await engine.result(parent, timeout=30)
        await engine.terminate(asking, "nobody answers")
        assert await engine.tasks(queue="clerks") == []
