"""What an activation leaves behind is freed by reference counting alone: a workflow that waits
and is signalled, one whose child retries a step and which then sleeps, one whose step fails for
good, each with the workflow cache off, small enough to evict, and at its default size. (An
activation used to keep its ended task, whose exception's traceback holds the workflow's frames,
which hold the activation: a cycle per suspension and per failure; and a failed step kept its
exception in a local of the frame that its traceback holds.)"""

from __future__ import annotations

from datetime import timedelta

import pytest

from flowli import Context, Registry
from flowli.domain import RetryPolicy

from ..garbage import Garbage
from .conftest import wait_status

pytestmark = pytest.mark.integration

TRIES: dict[str, int] = {}


def flaky(key: str) -> str:
    """Fails on its first attempt of ``key``."""
    TRIES[key] = TRIES.get(key, 0) + 1
    if TRIES[key] == 1:
        raise ConnectionError("once")
    return key


def broken(key: str) -> str:
    raise ValueError(f"no {key}")


def app() -> Registry:
    registry = Registry()

    @registry.workflow("waits")
    async def waits(ctx: Context, i: int) -> int:
        message = await ctx.receive("go")
        return int(message["i"]) + i

    @registry.workflow("retries")
    async def retries(ctx: Context, key: str) -> str:
        return await ctx.step(flaky, key, retry=RetryPolicy(max_attempts=3, backoff=timedelta(milliseconds=5)))

    @registry.workflow("parent")
    async def parent(ctx: Context, key: str) -> str:
        got = await ctx.child("retries", key)
        await ctx.sleep(timedelta(milliseconds=10))
        return got

    @registry.workflow("fails")
    async def fails(ctx: Context, key: str) -> str:
        return await ctx.step(broken, key)

    return registry


@pytest.mark.parametrize("cache", [0, 2, 512])
async def test_waits_children_retries_sleeps_and_failures_leave_no_cycle(open_engine, cache, tmp_path):
    async with open_engine(app(), workflow_cache=cache) as engine:
        with Garbage() as garbage:
            waiting = [await engine.start("waits", i) for i in range(6)]
            parents = [await engine.start("parent", f"{tmp_path.name}-{cache}-{i}") for i in range(3)]
            failing = [await engine.start("fails", str(i)) for i in range(2)]
            for eid in waiting:
                await wait_status(engine, eid, "suspended")
                await engine.signal(eid, "go", {"i": 10})
            assert [await engine.result(eid, timeout=30) for eid in waiting] == [10, 11, 12, 13, 14, 15]
            assert [await engine.result(eid, timeout=30) for eid in parents] == [
                f"{tmp_path.name}-{cache}-{i}" for i in range(3)]
            for eid in failing:
                await wait_status(engine, eid, "failed")
        if cache == 2:
            assert engine.workflow_cache.evictions > 0  # the case it is for
        assert dict(garbage.found) == {}
