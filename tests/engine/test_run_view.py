"""``engine.run_view``: the frames of a run as a tree, with kind, status, attempts, timing and
waits, for the example workflows: the demo's invoice approval, the patterns, a delegate."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest

from flowli import Context, Registry
from flowli.cli import _demo
from flowli.domain import RetryPolicy, StepFailed, UnknownExecutionError
from flowli.patterns import Action, fan_out, review, saga
from flowli.testing import Clock

from ..crash import until
from .conftest import wait_status

pytestmark = pytest.mark.integration


def check_consistent(view: Any, journal: list[Any]) -> None:
    """Every frame of the journal is in the view once, in the order of its first entry, and each
    completed frame's value is its memo."""
    fids: list[str] = []
    for e in journal:
        if e.fid and e.fid != "root" and e.kind.value.startswith("frame.") and e.fid not in fids:
            fids.append(e.fid)
    assert [f.fid for f in view.frames] == fids
    for f in view.frames:
        if f.status == "completed":
            memo = next(e for e in journal if e.fid == f.fid and e.kind.value == "frame.completed")
            assert f.value == memo.value
            assert f.started_at is not None and f.ended_at is not None and f.started_at <= f.ended_at


async def test_the_demos_invoice_approval_seen_waiting_then_done(open_engine):
    clock = Clock()
    async with open_engine(_demo.registry, clock=clock) as engine:
        invoice = f"INV-{uuid.uuid4().hex[:8]}"  # the demo's fraud service fails the first call per invoice
        eid = await engine.start("invoice_approval", invoice, 100.0, by="alice@example.com")
        await until(lambda: engine.timers(eid), 40, "the retry's timer")
        view = await engine.run_view(eid)
        fraud = view.frame("root/check_fraud#0")
        assert (fraud.kind, fraud.status, [a.outcome for a in fraud.attempts]) == ("step", "retrying", ["failed"])
        assert fraud.attempts[0].error["type"] == "ConnectionError"
        await clock.advance(timedelta(seconds=0.2))
        await until(lambda: _waits_on(engine, eid, "root/sleep#0"), 40, "the cooling-off sleep")
        await clock.advance(timedelta(seconds=1))
        await until(lambda: _waits_on(engine, eid, "root/receive#0"), 40, "the decision")
        view = await engine.run_view(eid)
        assert view.status == "suspended" and view.lease is None
        assert [w["fid"] for w in view.waits] == ["root/receive#0"]
        receive = view.frame("root/receive#0")
        assert (receive.kind, receive.status, receive.wait["channel"]) == ("receive", "waiting", f"{eid}.decision")
        assert [a.outcome for a in view.frame("root/check_fraud#0").attempts] == ["failed", "completed"]
        await engine.signal(eid, "decision", {"approved": True}, by="carol@example.com")
        result = await engine.result(eid, timeout=30)
        view = await engine.run_view(eid)
        assert view.status == "completed" and view.root.value == result and view.root.ended_at is not None
        assert {f.status for f in view.frames} == {"completed"}
        child = view.frame("root/notify_accounting#0")
        assert child.kind == "child" and child.child is not None
        assert (await engine.run_view(child.child)).frame("root/post_to_ledger#0").status == "completed"
        assert view.frame("root/receive#0").attempts[0].by == "human:carol@example.com"
        check_consistent(view, await engine.journal(eid))


async def _waits_on(engine: Any, eid: str, fid: str) -> bool:
    view = await engine.run_view(eid)
    return view.status == "suspended" and any(w["fid"] == fid for w in view.waits)


def reserve(x: str) -> str:
    return f"reserved {x}"


def cancel(value: str) -> str:
    return f"undone {value}"


def charge(x: str) -> str:
    raise ValueError("card declined")


def resize(n: int) -> int:
    return n * 10


def patterns() -> Registry:
    registry = Registry()

    @registry.workflow("trip")
    async def trip(ctx: Context) -> Any:
        return await saga(ctx, [Action(reserve, ("hotel",), undo=cancel), Action(charge, ("card",))])

    @registry.workflow("resize")
    async def resize_one(ctx: Context, n: int) -> int:
        return await ctx.step(resize, n)

    @registry.workflow("resize_all")
    async def resize_all(ctx: Context, items: list[int]) -> Any:
        return await fan_out(ctx, "resize", items)

    @registry.workflow("expense")
    async def expense(ctx: Context) -> Any:
        return await review(ctx, "expense 7", {"amount": 80})

    @registry.workflow("scored")
    async def scored(ctx: Context) -> Any:
        return await ctx.delegate("models", {"x": 1}, key="score",
                                  retry=RetryPolicy(max_attempts=2, backoff=timedelta(0)))

    return registry


async def test_a_failed_saga_shows_the_failed_action_and_its_compensation(open_engine):
    async with open_engine(patterns()) as engine:
        eid = await engine.start("trip")
        with pytest.raises(StepFailed):
            await engine.result(eid, timeout=30)
        view = await engine.run_view(eid)
        assert [(f.fid, f.status) for f in view.frames] == [
            ("root/reserve:0", "completed"), ("root/charge:1", "failed"), ("root/cancel:undo-0", "completed")]
        assert view.frame("root/charge:1").error["message"] == "card declined"
        assert {f.group for f in view.frames} == {"saga"}  # the pattern's frames, under its name
        assert view.status == "failed" and view.root.error["fid"] == "root/charge:1"
        check_consistent(view, await engine.journal(eid))


async def test_a_fan_out_shows_one_child_frame_per_item(open_engine):
    async with open_engine(patterns()) as engine:
        eid = await engine.start("resize_all", [1, 2, 3])
        assert await engine.result(eid, timeout=30) == [10, 20, 30]
        view = await engine.run_view(eid)
        assert [(f.fid, f.kind, f.status) for f in view.frames] == [
            (f"root/resize:{i}", "child", "completed") for i in range(3)]
        assert len({f.child for f in view.frames}) == 3


async def test_a_review_and_a_delegate_wait_on_their_queues_with_their_attempts(open_engine):
    async with open_engine(patterns()) as engine:
        eid = await engine.start("expense")
        await until(lambda: _waits_on(engine, eid, "root/delegate#0"), 40, "the review to wait")
        view = await engine.run_view(eid)
        frame = view.frame("root/delegate#0")
        assert (frame.kind, frame.status, frame.queue, frame.wait["queue"]) == ("delegate", "waiting", "humans", "humans")
        assert [(f.fid, f.group) for f in view.frames] == [
            ("root/delegate#0", "review expense 7"), ("root/announce#0", "review expense 7")]

        scored = await engine.start("scored")
        await until(lambda: _waits_on(engine, scored, "root/delegate:score"), 40, "the delegate to wait")
        bot = engine.consumer("models", "bot")
        [task] = await bot.dequeue()
        await bot.fail(task, "UPSTREAM", "502")
        await until(lambda: engine.tasks(queue="models"), 40, "the second attempt")
        [task] = await bot.dequeue()
        await bot.answer(task, {"score": 1})
        await engine.result(scored, timeout=30)
        frame = (await engine.run_view(scored)).frame("root/delegate:score")
        assert [(a.number, a.outcome, a.by) for a in frame.attempts] == [
            (1, "failed", "system:bot"), (2, "completed", "system:bot")]
        assert frame.status == "completed" and frame.value == {"score": 1}


async def test_a_running_execution_shows_its_lease(open_engine):
    import asyncio

    gate = asyncio.Event()
    registry = Registry()

    async def hold() -> str:
        await gate.wait()
        return "done"

    @registry.workflow("holds")
    async def holds(ctx: Context) -> str:
        return await ctx.step(hold)

    async with open_engine(registry) as engine:
        eid = await engine.start("holds")
        await wait_status(engine, eid, "running")
        await until(lambda: _running(engine, eid), 40, "the step to run")
        view = await engine.run_view(eid)
        assert view.lease is not None and view.lease["epoch"] == 1 and view.lease["expires_at"] is not None
        assert view.frame("root/hold#0").status == "running"
        gate.set()
        await engine.result(eid, timeout=30)
        with pytest.raises(UnknownExecutionError):
            await engine.run_view(eid, application="other")


async def _running(engine: Any, eid: str) -> bool:
    view = await engine.run_view(eid)
    return bool(view.frames)


def _grouped(with_groups: bool) -> Registry:
    registry = Registry()

    def pack(item: str) -> str:
        return f"packed {item}"

    @registry.workflow("shipment")
    async def shipment(ctx: Context, item: str) -> str:
        if with_groups:
            with ctx.group("packing"):
                packed = await ctx.step(pack, item)
                with ctx.group("labels"):
                    await ctx.step(pack, "label")
        else:
            packed = await ctx.step(pack, item)
            await ctx.step(pack, "label")
        go = await ctx.receive("go")
        return f"{packed} {go}"

    return registry


async def test_a_workflows_own_groups_label_its_frames_and_change_no_frame_id(db_url, tmp_path):
    import flowli

    from .conftest import FAST

    async def run(registry: Registry, body: Any) -> Any:
        engine = await flowli.connect(db_url, registry, bucket=str(tmp_path / "bucket"), **FAST)
        async with engine, engine.worker(concurrency=4):
            return await body(engine)

    async def started(engine: Any) -> str:
        eid = await engine.start("shipment", "box")
        await wait_status(engine, eid, "suspended")
        view = await engine.run_view(eid)
        assert [(f.fid, f.group) for f in view.frames] == [
            ("root/pack#0", "packing"), ("root/pack#1", "labels"), ("root/receive#0", None)]
        return eid

    eid = await run(_grouped(True), started)

    async def resumed(engine: Any) -> None:
        # the same workflow without its groups replays the recorded frames: no divergence
        await engine.signal(eid, "go", "now")
        assert await engine.result(eid, timeout=30) == "packed box now"

    await run(_grouped(False), resumed)
