"""Attempts and retries: a delay suspends the frame on a timer; NonRetryableError stops at once."""

from __future__ import annotations

from datetime import timedelta

import pytest

from flowli import Context, Registry
from flowli.domain import EntryKind, NonRetryableError, RetryPolicy, StepFailed
from flowli.testing import Clock

from .conftest import kinds, wait_idle, wait_status

pytestmark = pytest.mark.integration


async def test_retry_delay_suspends_on_a_timer_and_frees_the_worker(open_engine):
    registry = Registry()
    attempts: list[int] = []

    def flaky() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise ConnectionError("bank unreachable")
        return "paid"

    policy = RetryPolicy(max_attempts=5, backoff=timedelta(seconds=2), backoff_factor=2.0, max_backoff=timedelta(minutes=5))

    @registry.workflow("pay")
    async def pay(ctx: Context) -> str:
        return await ctx.step(flaky, retry=policy)

    clock = Clock()
    async with open_engine(registry, clock=clock) as engine:
        eid = await engine.start("pay")
        await wait_status(engine, eid, "suspended")
        timers = await engine.timers(eid)
        assert [(t.fid, t.at - clock.now()) for t in timers] == [("root/flaky#0", timedelta(seconds=2))]
        await wait_idle(engine)
        assert engine.running() == []  # no activation holds the waiting execution
        await clock.advance(timedelta(seconds=2))
        await _until_failures(engine, eid, 2)
        await wait_status(engine, eid, "suspended")
        timers = await engine.timers(eid)
        assert [t.at - clock.now() for t in timers] == [timedelta(seconds=4)]
        await clock.advance(timedelta(seconds=4))
        assert await engine.result(eid, timeout=30) == "paid"
        journal = await engine.journal(eid)
        outcomes = [(str(e.kind), e.attempt) for e in journal if e.fid == "root/flaky#0" and e.kind is not EntryKind.FRAME_STARTED]
        assert outcomes == [("frame.failed", 1), ("frame.failed", 2), ("frame.completed", 3)]
        assert [e.attempt for e in journal if e.kind is EntryKind.FRAME_STARTED] == [1, 2, 3]
        assert await engine.timers(eid) == []


async def _until_failures(engine, eid, n):
    import asyncio

    for _ in range(500):
        if kinds(await engine.journal(eid)).count("frame.failed") >= n:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"fewer than {n} failed attempts")


async def test_non_retryable_error_stops_at_once(open_engine):
    registry = Registry()
    calls: list[int] = []

    def refuse() -> None:
        calls.append(1)
        raise NonRetryableError("account closed")

    @registry.workflow("nr")
    async def nr(ctx: Context) -> None:
        await ctx.step(refuse, retry=RetryPolicy(max_attempts=10, backoff=timedelta(0)))

    async with open_engine(registry) as engine:
        eid = await engine.start("nr")
        with pytest.raises(StepFailed) as info:
            await engine.result(eid, timeout=30)
        assert info.value.error_type == "NonRetryableError" and info.value.attempts == 1
        assert calls == [1]


async def test_zero_backoff_retries_in_place_until_attempts_run_out(open_engine):
    registry = Registry()
    calls: list[int] = []

    def always() -> None:
        calls.append(1)
        raise RuntimeError(f"attempt {len(calls)}")

    @registry.workflow("z")
    async def z(ctx: Context) -> None:
        await ctx.step(always, retry=RetryPolicy(max_attempts=3, backoff=timedelta(0)))

    async with open_engine(registry) as engine:
        eid = await engine.start("z")
        with pytest.raises(StepFailed) as info:
            await engine.result(eid, timeout=30)
        assert info.value.attempts == 3 and "attempt 3" in info.value.message
        assert len(calls) == 3
        journal = await engine.journal(eid)
        assert kinds(journal, "root/always#0").count("frame.failed") == 3
        last = [e for e in journal if e.kind is EntryKind.FRAME_FAILED][-1]
        assert last.value == {"final": True} and last.error["type"] == "RuntimeError"


def test_retry_policy_delays_and_validation():
    p = RetryPolicy(max_attempts=6, backoff=timedelta(seconds=2), backoff_factor=3.0, max_backoff=timedelta(seconds=30))
    assert [p.delay_after(a).total_seconds() for a in range(1, 5)] == [2, 6, 18, 30]
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError, match="backoff_factor"):
        RetryPolicy(backoff_factor=0.5)
