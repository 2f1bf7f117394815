"""``ctx.delegate`` as a frame of attempts: each attempt is its own task; a consumer renews its
lease, answers it or fails it; the retry policy decides a failed attempt as for a step; an
answer, a failure or a renewal of an attempt that is not current is refused with StaleAnswer and
changes nothing; an expired lease ends the attempt and the next one is delivered, up to a bound
(LEASE_EXPIRED); ``receive`` and ``delegate`` take a timeout (TimeoutError, journaled)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from flowli import Context, Registry
from flowli.domain import EntryKind, RetryPolicy, StaleAnswer, StepFailed, TaskKind, task_id
from flowli.testing import Clock

from ..crash import until
from .conftest import wait_status

pytestmark = pytest.mark.integration

QUEUE = "scorers"
LEASE = timedelta(seconds=10)
RETRY = RetryPolicy(max_attempts=3, backoff=timedelta(seconds=5), backoff_factor=1.0)


def app() -> Registry:
    registry = Registry()

    @registry.workflow("score")
    async def score(ctx: Context, who: str) -> Any:
        return await ctx.delegate(QUEUE, {"who": who}, key="score", retry=RETRY)

    @registry.workflow("score_once")
    async def score_once(ctx: Context, who: str) -> Any:
        return await ctx.delegate(QUEUE, {"who": who}, key="score")

    @registry.workflow("score_in_time")
    async def score_in_time(ctx: Context, who: str, seconds: float) -> Any:
        try:
            return await ctx.delegate(QUEUE, {"who": who}, key="score", timeout=timedelta(seconds=seconds))
        except TimeoutError as late:
            return f"timed out: {late}"

    @registry.workflow("wait_in_time")
    async def wait_in_time(ctx: Context, seconds: float) -> Any:
        try:
            return await ctx.receive("go", timeout=timedelta(seconds=seconds))
        except TimeoutError:
            return "no message"

    @registry.workflow("two_receives")
    async def two_receives(ctx: Context) -> Any:
        first = "late"
        try:
            first = await ctx.receive("go", timeout=timedelta(minutes=1))
        except TimeoutError:
            pass
        second = await ctx.receive("go")  # the message that came after the timeout is still there
        return [first, second]

    return registry


def attempt(eid: str, n: int) -> str:
    return task_id(TaskKind.DELEGATE, eid, f"root/delegate:score@{n}")


async def open_attempt(engine: Any, eid: str, n: int) -> None:
    """Attempt ``n`` is on the queue, and the execution suspended behind it (its own lease released:
    a test may move the clock now without the sweeper recovering it, however slow the machine)."""
    async def there() -> bool:
        return attempt(eid, n) in {t.id for t in await engine.tasks(eid=eid)}

    await until(there, 40, f"attempt {n} of {eid} on the queue")
    await engine.wait_suspended(eid)


def frame_entries(journal: list[Any]) -> list[tuple[str, int | None, Any]]:
    return [(e.kind.value, e.attempt, (e.error or {}).get("type") if e.error else e.value)
            for e in journal if e.fid == "root/delegate:score"]


async def test_a_failed_attempt_is_retried_by_the_policy_and_each_attempt_is_its_own_task(open_engine):
    clock = Clock()
    async with open_engine(app(), clock=clock) as engine:
        eid = await engine.start("score", "ann")
        await open_attempt(engine, eid, 1)
        bot = engine.consumer(QUEUE, "bot", lease=LEASE)
        [first] = await bot.dequeue()
        assert (first.attempt, first.frame["fid"], first.frame["tries"]) == (1, "root/delegate:score", 1)
        await bot.fail(first, "UPSTREAM_ERROR", "the model server answered 502")
        # the retry waits out its backoff on a timer
        timers = await until(lambda: engine.timers(eid), 40, "the retry's timer")
        assert [(t.fid, t.at) for t in timers] == [("root/delegate:score", clock.now() + timedelta(seconds=5))]
        assert await bot.dequeue() == []
        await clock.advance(timedelta(seconds=5))
        await open_attempt(engine, eid, 2)
        [second] = await bot.dequeue()
        assert (second.id, second.attempt, second.payload) == (attempt(eid, 2), 2, {"who": "ann"})
        await bot.answer(second, {"score": 0.7}, by="bot@example.com")
        assert await engine.result(eid, timeout=30) == {"score": 0.7}
        journal = await engine.journal(eid)
        assert frame_entries(journal) == [
            ("frame.started", 1, {"queue": QUEUE, "task": attempt(eid, 1)}),
            ("frame.failed", 1, "UPSTREAM_ERROR"),
            ("frame.started", 2, {"queue": QUEUE, "task": attempt(eid, 2)}),
            ("frame.completed", 2, {"score": 0.7}),
        ]
        [completed] = [e for e in journal if e.kind is EntryKind.FRAME_COMPLETED]
        assert str(completed.provenance.actor) == "human:bot@example.com"


async def test_a_non_retryable_failure_or_the_last_attempt_raises_step_failed(open_engine):
    async with open_engine(app()) as engine:
        eid = await engine.start("score", "bob")
        await open_attempt(engine, eid, 1)
        bot = engine.consumer(QUEUE, "bot", lease=LEASE)
        [task] = await bot.dequeue()
        await bot.fail(task, "VALIDATION_FAILED", "no such applicant", retryable=False)
        with pytest.raises(StepFailed, match="VALIDATION_FAILED: no such applicant") as failed:
            await engine.result(eid, timeout=30)
        assert (failed.value.fid, failed.value.attempts) == ("root/delegate:score", 1)

        once = await engine.start("score_once", "cy")  # no retry policy: one attempt
        await open_attempt(engine, once, 1)
        [task] = await bot.dequeue()
        await bot.fail(task, "TIMEOUT", "upstream took too long")
        with pytest.raises(StepFailed, match="TIMEOUT"):
            await engine.result(once, timeout=30)


async def test_a_renewal_keeps_the_attempt_and_an_answer_after_the_lease_expired_is_stale(open_engine):
    clock = Clock()
    async with open_engine(app(), clock=clock) as engine:
        eid = await engine.start("score_once", "dee")
        await open_attempt(engine, eid, 1)
        bot = engine.consumer(QUEUE, "bot", lease=LEASE)
        [task] = await bot.dequeue()
        for _ in range(3):  # 30 s of work, renewing every 8 s: the attempt stays this one
            await clock.advance(timedelta(seconds=8))
            renewed = await bot.renew(task)
            assert renewed.visible_at == clock.now() + LEASE and renewed.lease_owner == "bot"
        await engine.sweep()
        assert {t.id for t in await engine.tasks(eid=eid)} == {attempt(eid, 1)}
        await clock.advance(LEASE)  # no renewal in time: the lease expires
        # (the sweeper, which runs in the background, may end the attempt meanwhile: then it is
        # withdrawn; stale either way)
        with pytest.raises(StaleAnswer, match=f"task {attempt(eid, 1)} is stale: (the lease of bot expired|it was"
                                              " withdrawn already)"):
            await bot.renew(task)
        with pytest.raises(StaleAnswer, match="the lease of bot expired|withdrawn already"):
            await bot.answer(task, {"score": 1})
        with pytest.raises(StaleAnswer, match="the lease of bot expired|withdrawn already"):
            await bot.fail(task, "X", "y")
        # nothing of the stale answer or failure reached the journal (the expiry and the next
        # attempt are the engine's own, and may land meanwhile)
        written = await engine.journal(eid)
        assert not [e for e in written if e.kind is EntryKind.FRAME_COMPLETED or (e.error or {}).get("type") == "X"]
        await open_attempt(engine, eid, 2)  # the sweeper ended attempt 1; attempt 2 is on the queue
        [second] = await bot.dequeue()
        with pytest.raises(StaleAnswer, match="withdrawn already"):
            await bot.answer(task, {"score": 1})
        other = engine.consumer(QUEUE, "other", lease=LEASE)
        with pytest.raises(StaleAnswer, match="not held by other but by bot"):
            await other.answer(second, {"score": 2})
        await bot.answer(second, {"score": 3})
        assert await engine.result(eid, timeout=30) == {"score": 3}
        [expired] = [e for e in await engine.journal(eid) if e.kind is EntryKind.FRAME_FAILED]
        assert (expired.attempt, expired.error["type"], expired.value["expired"]) == (1, "LEASE_EXPIRED", True)


async def test_repeated_lease_expiries_end_in_lease_expired(open_engine):
    clock = Clock()
    async with open_engine(app(), clock=clock, delegate_expiries=3) as engine:
        eid = await engine.start("score", "eve")
        bot = engine.consumer(QUEUE, "poisoned", lease=LEASE)
        for n in (1, 2, 3):
            await open_attempt(engine, eid, n)
            [task] = await bot.dequeue()
            assert task.frame["expiries"] == n - 1
            await clock.advance(LEASE)  # the consumer dies with it, every time
        with pytest.raises(StepFailed, match="LEASE_EXPIRED") as failed:
            await engine.result(eid, timeout=30)
        assert failed.value.attempts == 3
        assert await engine.tasks(eid=eid) == []
        # expiries do not use up the retry policy's attempts: none was a failure of the work
        assert [v for k, _, v in frame_entries(await engine.journal(eid)) if k == "frame.failed"] == ["LEASE_EXPIRED"] * 3


async def test_engine_answer_reads_the_task_and_refuses_an_unknown_or_ended_one(open_engine):
    from flowli.domain import UnknownTaskError

    async with open_engine(app()) as engine:
        eid = await engine.start("score_once", "fay")
        await open_attempt(engine, eid, 1)
        task = await engine.task(attempt(eid, 1))
        assert (task.state, task.kind, task.attempt, task.application) == ("ready", TaskKind.DELEGATE, 1, None)
        await engine.answer(attempt(eid, 1), {"score": 0.5}, by="ops@example.com")
        assert await engine.result(eid, timeout=30) == {"score": 0.5}
        assert (await engine.task(attempt(eid, 1))).state == "acked"
        for tid in (attempt(eid, 1), "DELEGATE:nope:root/delegate#0@1", "not a task id"):
            with pytest.raises(UnknownTaskError, match="no open task"):
                await engine.answer(tid, 1)


# ---- timeouts ------------------------------------------------------------------------------


async def test_receive_with_a_timeout_raises_timeout_error_when_no_message_comes_with_the_test_clock(open_engine):
    clock = Clock()
    async with open_engine(app(), clock=clock) as engine:
        eid = await engine.start("wait_in_time", 3600.0)
        await wait_status(engine, eid, "suspended")
        assert [t.at for t in await engine.timers(eid)] == [clock.now() + timedelta(hours=1)]
        assert engine.running() == []  # the wait holds no worker
        await clock.advance(timedelta(hours=1))
        assert await engine.result(eid, timeout=30) == "no message"
        [failed] = [e for e in await engine.journal(eid) if e.kind is EntryKind.FRAME_FAILED]
        assert (failed.fid, failed.error["type"], failed.value) == ("root/receive#0", "TimeoutError", {"final": True})

        answered = await engine.start("wait_in_time", 3600.0)
        await wait_status(engine, answered, "suspended")
        await engine.signal(answered, "go", "in time")
        assert await engine.result(answered, timeout=30) == "in time"
        assert await engine.timers(answered) == []


async def test_receive_with_a_timeout_in_real_time(open_engine):
    async with open_engine(app()) as engine:
        eid = await engine.start("wait_in_time", 0.3)
        loop = asyncio.get_running_loop()
        began = loop.time()
        assert await engine.result(eid, timeout=30) == "no message"
        assert 0.3 <= loop.time() - began < 10


async def test_a_timed_out_receive_consumes_nothing_and_replays_as_timed_out(open_engine):
    clock = Clock()
    async with open_engine(app(), clock=clock) as engine:
        eid = await engine.start("two_receives")
        await wait_status(engine, eid, "suspended")
        await clock.advance(timedelta(minutes=1))
        await until(lambda: _second_waits(engine, eid), 40, "the second receive to wait")
        await engine.signal(eid, "go", "after")
        assert await engine.result(eid, timeout=30) == ["late", "after"]
        journal = await engine.journal(eid)
        assert [(e.fid, e.kind.value) for e in journal if e.fid and e.fid.startswith("root/receive")] == [
            ("root/receive#0", "frame.started"), ("root/receive#0", "frame.failed"),
            ("root/receive#1", "frame.started"), ("root/receive#1", "frame.completed")]


async def _second_waits(engine: Any, eid: str) -> bool:
    return any(e.fid == "root/receive#1" and e.kind is EntryKind.FRAME_STARTED for e in await engine.journal(eid))


async def test_a_delegate_with_a_timeout_withdraws_its_attempt_and_a_late_answer_is_stale(open_engine):
    clock = Clock()
    async with open_engine(app(), clock=clock) as engine:
        eid = await engine.start("score_in_time", "gus", 60.0)
        await open_attempt(engine, eid, 1)
        bot = engine.consumer(QUEUE, "slow-bot", lease=timedelta(minutes=10))
        [task] = await bot.dequeue()
        await clock.advance(timedelta(seconds=60))
        value = await engine.result(eid, timeout=30)
        assert value.startswith("timed out: delegate on queue scorers at frame root/delegate:score")
        with pytest.raises(StaleAnswer, match="withdrawn already"):
            await bot.answer(task, {"score": 9})
        assert await engine.tasks(eid=eid) == []
        assert frame_entries(await engine.journal(eid))[-1] == ("frame.failed", 1, "TimeoutError")


async def test_a_delegate_answered_in_time_cancels_its_timer(open_engine):
    clock = Clock()
    async with open_engine(app(), clock=clock) as engine:
        eid = await engine.start("score_in_time", "hal", 60.0)
        await open_attempt(engine, eid, 1)
        bot = engine.consumer(QUEUE, "bot", lease=LEASE)
        [task] = await bot.dequeue()
        await bot.answer(task, {"score": 4})
        assert await engine.result(eid, timeout=30) == {"score": 4}
        assert await engine.timers(eid) == []


async def test_timeouts_take_a_positive_timedelta(open_engine):
    registry = Registry()

    @registry.workflow("bad")
    async def bad(ctx: Context) -> None:
        await ctx.receive("x", timeout=5)  # type: ignore[arg-type]

    async with open_engine(registry) as engine:
        eid = await engine.start("bad")
        with pytest.raises(Exception, match="positive timedelta as timeout, got 5"):
            await engine.result(eid, timeout=30)
