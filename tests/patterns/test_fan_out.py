"""fan_out under normal runs: one child execution per item, with a deterministic eid, and the
results in item order whatever the order in which the children end."""

from __future__ import annotations

import asyncio

import pytest

from flowli import Context, Registry
from flowli.domain import StepFailed, child_eid
from flowli.patterns import fan_out

pytestmark = pytest.mark.integration

ITEMS = ["slow.png", "medium.png", "fast.png", "instant.png"]
DELAY = {"slow.png": 0.3, "medium.png": 0.2, "fast.png": 0.1, "instant.png": 0.0}
"""The first item ends last: the results must still come in item order."""


def fan_out_registry(ended: list[str]) -> Registry:
    registry = Registry()

    async def shrink(image: str) -> str:
        if image == "broken.png":
            raise ValueError("not an image")
        await asyncio.sleep(DELAY.get(image, 0.0))
        ended.append(image)
        return f"small-{image}"

    @registry.workflow("resize")
    async def resize(ctx: Context, image: str) -> str:
        return await ctx.step(shrink, image)

    @registry.workflow("resize_all")
    async def resize_all(ctx: Context, images: list[str]) -> list[str]:
        return await fan_out(ctx, "resize", images)

    @registry.workflow("resize_all_by_function")
    async def resize_all_by_function(ctx: Context, images: list[str]) -> list[str]:
        return await fan_out(ctx, resize, images)

    return registry


@pytest.mark.parametrize("parent", ["resize_all", "resize_all_by_function"])
async def test_fan_out_runs_one_child_per_item_and_returns_results_in_item_order(open_engine, parent):
    ended: list[str] = []
    async with open_engine(fan_out_registry(ended)) as engine:
        eid = await engine.start(parent, ITEMS)
        assert await engine.result(eid, timeout=30) == [f"small-{i}" for i in ITEMS]
        children = await engine.list(workflow="resize")
        records = {c.eid: await engine.status(c.eid) for c in children}

    assert ended != ITEMS and sorted(ended) == sorted(ITEMS)  # they ran at the same time
    assert set(records) == {child_eid(eid, f"root/resize:{i}") for i in range(len(ITEMS))}
    by_item = {r.args[0]: r for r in records.values()}
    assert sorted(by_item) == sorted(ITEMS)  # one child per item
    for i, item in enumerate(ITEMS):
        record = by_item[item]
        assert record.eid == child_eid(eid, f"root/resize:{i}")
        assert (record.parent_eid, record.parent_fid) == (eid, f"root/resize:{i}")
        assert record.result == f"small-{item}"


async def test_fan_out_of_no_items_returns_an_empty_list(open_engine):
    async with open_engine(fan_out_registry([])) as engine:
        assert await engine.result(await engine.start("resize_all", []), timeout=30) == []
        assert await engine.list(workflow="resize") == []


async def test_a_failed_child_fails_the_fan_out_and_the_others_still_complete(open_engine):
    async with open_engine(fan_out_registry([])) as engine:
        eid = await engine.start("resize_all", ["fast.png", "broken.png"])
        with pytest.raises(StepFailed, match="root/resize:1"):
            await engine.result(eid, timeout=30)
        assert (await engine.status(child_eid(eid, "root/resize:1"))).status.value == "failed"
        # the parent ended at the first failure; the other child is an execution of its own
        assert await engine.result(child_eid(eid, "root/resize:0"), timeout=30) == "small-fast.png"
