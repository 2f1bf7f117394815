"""A replay whose code diverged from the journal: a frame inserted before frames that the journal
holds (before, between), a renamed function, a reordered gather of one function, a removed frame:
each blocks the execution with NondeterminismError naming the frames, and runs nothing of the new
code. Appending frames after everything recorded stays compatible, and so does a gather whose
frames the journal holds out of their code order (the earlier run wrote them as they finished)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from flowli import Context, Registry

from .conftest import wait_status

pytestmark = pytest.mark.integration

EFFECTS: list[str] = []
CODE: dict[str, str] = {}
"""What each test's workflow does on this run: the tests change it between runs, as a deploy would."""


def effect(what: str) -> str:
    EFFECTS.append(what)
    return what


def other_effect(what: str) -> str:
    EFFECTS.append(f"other {what}")
    return what


def app() -> Registry:
    registry = Registry()

    @registry.workflow("ship")
    async def ship(ctx: Context, tag: str) -> list[str]:
        done = []
        if CODE.get(tag) == "inserted before":
            done.append(await ctx.step(effect, f"{tag} audit"))
        if CODE.get(tag) == "renamed":
            done.append(await ctx.step(other_effect, f"{tag} label"))
        else:
            done.append(await ctx.step(effect, f"{tag} label"))
        if CODE.get(tag) == "inserted between":
            done.append(await ctx.step(effect, f"{tag} fraud-check"))
        await ctx.receive("go")
        done.append(await ctx.step(effect, f"{tag} dispatch"))
        if CODE.get(tag) == "appended":
            done.append(await ctx.step(effect, f"{tag} receipt"))
        return done

    @registry.workflow("pair")
    async def pair(ctx: Context, tag: str) -> list[str]:
        first, second = (f"{tag} a", f"{tag} b") if CODE.get(tag) != "swapped" else (f"{tag} b", f"{tag} a")
        got = await ctx.gather(ctx.step(effect, first), ctx.step(effect, second))
        await ctx.receive("go")
        return got

    return registry


async def run_until_waiting(open_engine: Any, tag: str, workflow: str = "ship") -> str:
    async with open_engine(app()) as engine:
        eid = await engine.start(workflow, tag)
        await wait_status(engine, eid, "suspended")
    return eid


async def blocked(engine: Any, eid: str) -> Any:
    for _ in range(500):
        record = await engine.status(eid)
        if record.blocked:
            return record
        await asyncio.sleep(0.01)
    raise AssertionError(f"{eid} is {record.status.value}, not blocked")


@pytest.mark.parametrize(("change", "new", "ahead"), [
    ("inserted between", "root/effect#1", "root/receive#0"),
    ("inserted before", "root/effect#0", None),  # effect#0 is now the audit: its argument changed
    ("renamed", "root/other_effect#0", "root/effect#0"),
])
async def test_a_frame_inserted_or_renamed_ahead_of_recorded_frames_blocks_and_runs_nothing(
    open_engine, change, new, ahead
):
    tag = f"{change}-{uuid.uuid4().hex}"
    eid = await run_until_waiting(open_engine, tag)
    CODE[tag] = change  # the deploy: same version, other code
    before = list(EFFECTS)
    async with open_engine(app()) as engine:
        await engine.signal(eid, "go", True)
        record = await blocked(engine, eid)
        assert record.blocked["reason"] == "nondeterminism"
        if ahead is not None:
            assert record.blocked["fid"] == new
            assert f"creates frame {new}, which the journal does not hold, before frame {ahead}" in record.blocked["detail"]
        else:
            assert record.blocked["fid"] == "root/effect#0" and "arguments changed" in record.blocked["detail"]
        assert EFFECTS == before, "nothing of the diverged code ran"
        [suspended] = [e for e in await engine.journal(eid) if e.error and e.error["type"] == "NondeterminismError"]
        assert record.blocked["fid"] in suspended.error["message"]
        await engine.cancel(eid)
        await wait_status(engine, eid, "cancelled")


async def test_frames_appended_after_everything_recorded_are_compatible(open_engine):
    tag = f"appended-{uuid.uuid4().hex}"
    eid = await run_until_waiting(open_engine, tag)
    CODE[tag] = "appended"
    async with open_engine(app()) as engine:
        await engine.signal(eid, "go", True)
        assert await engine.result(eid, timeout=30) == [f"{tag} label", f"{tag} dispatch", f"{tag} receipt"]


async def test_a_gather_of_one_function_reordered_changes_the_arguments_of_its_frames(open_engine):
    tag = f"swapped-{uuid.uuid4().hex}"
    eid = await run_until_waiting(open_engine, tag, "pair")
    CODE[tag] = "swapped"
    async with open_engine(app()) as engine:
        await engine.signal(eid, "go", True)
        record = await blocked(engine, eid)
        assert record.blocked["fid"] == "root/effect#0" and "arguments changed" in record.blocked["detail"]


async def test_a_removed_frame_leaves_the_journal_with_frames_the_replay_never_met(open_engine):
    registry = Registry()
    tag = f"trim-{uuid.uuid4().hex}"

    @registry.workflow("trim")
    async def trim(ctx: Context) -> str:
        if CODE.get(tag) != "removed":
            await ctx.step(effect, "trim first")
            await ctx.step(effect, "trim second")
        await ctx.receive("go")
        return "done"

    async with open_engine(registry) as engine:
        eid = await engine.start("trim")
        await wait_status(engine, eid, "suspended")
    CODE[tag] = "removed"
    async with open_engine(registry) as engine:
        await engine.signal(eid, "go", True)
        record = await blocked(engine, eid)
        assert "never created" in record.blocked["detail"] and record.blocked["fid"] == "root/effect#0"


async def test_a_gather_whose_later_frame_was_recorded_first_replays_without_divergence(open_engine, monkeypatch):
    """The earlier run: gather(slow, fast); fast finished and was journaled, slow was still running
    (its frame.started not written yet: a step writes it with its outcome when it is quick) when
    the worker stopped. The replay creates slow, which the journal does not hold, before fast,
    which it holds: they were concurrent, so slow runs once the replay met fast."""
    from flowli.engine import _steps

    monkeypatch.setattr(_steps, "STARTED_AFTER", 60.0)  # slow's frame.started is not written while it runs
    gate = asyncio.Event()
    registry = Registry()

    async def slow() -> str:
        await gate.wait()
        return "slow"

    def fast() -> str:
        return "fast"

    @registry.workflow("race")
    async def race(ctx: Context) -> list[str]:
        return await ctx.gather(ctx.step(slow), ctx.step(fast))

    async with open_engine(registry, worker=False) as engine:
        async with engine.worker() as worker:
            worker.grace = 0.1
            eid = await engine.start("race")
            for _ in range(500):
                if any(e.fid == "root/fast#0" and e.kind.value == "frame.completed" for e in await engine.journal(eid)):
                    break
                await asyncio.sleep(0.01)
        journal = await engine.journal(eid)
        assert [e.fid for e in journal if e.kind.value == "frame.started"] == ["root/fast#0"]
        gate.set()
        async with engine.worker():
            assert await engine.result(eid, timeout=30) == ["slow", "fast"]
        assert (await engine.status(eid)).blocked is None


async def test_a_blocked_run_is_listed_as_blocked_with_what_changed_and_logged_once(open_engine, caplog):
    import logging

    caplog.set_level(logging.WARNING, logger="flowli.worker")
    tag = f"visible-{uuid.uuid4().hex}"
    eid = await run_until_waiting(open_engine, tag)
    CODE[tag] = "inserted before"  # effect#0 is now called with other arguments
    async with open_engine(app()) as engine:
        await engine.signal(eid, "go", True)
        record = await blocked(engine, eid)
        assert (record.blocked["recorded"], record.blocked["current"]) == (
            {"args": [f"{tag} label"]}, {"args": [f"{tag} audit"]})
        page = await engine.list(status="blocked")
        assert [(r.eid, r.blocked["fid"]) for r in page] == [(eid, "root/effect#0")]
        assert page.counts["blocked"] == 1 and page.counts["suspended"] >= 1
        assert eid in {r.eid for r in await engine.list(status="suspended")}  # its status is suspended
        lines = [r for r in caplog.records if "is blocked" in r.getMessage()]
        assert len(lines) == 1 and eid in lines[0].getMessage() and "migrate it" in lines[0].getMessage()
        await engine.cancel(eid)
        await wait_status(engine, eid, "cancelled")
        assert await engine.list(status="blocked") == []


def versions_app() -> Registry:
    registry = Registry()

    @registry.workflow("order", version="1")
    async def order_v1(ctx: Context, tag: str) -> list[str]:
        label = await ctx.step(effect, f"{tag} label")
        await ctx.receive("go")
        return [label, await ctx.step(effect, f"{tag} dispatch")]

    @registry.workflow("order", version="2")  # compatible: a new step after everything recorded
    async def order_v2(ctx: Context, tag: str) -> list[str]:
        label = await ctx.step(effect, f"{tag} label")
        await ctx.receive("go")
        return [label, await ctx.step(effect, f"{tag} dispatch"), await ctx.step(effect, f"{tag} receipt")]

    @registry.workflow("order", version="3")  # incompatible: a check inserted before the receive
    async def order_v3(ctx: Context, tag: str) -> list[str]:
        label = await ctx.step(effect, f"{tag} label")
        await ctx.step(effect, f"{tag} fraud-check")
        await ctx.receive("go")
        return [label, await ctx.step(effect, f"{tag} dispatch")]

    @registry.workflow("order", version="4")  # incompatible: another label
    async def order_v4(ctx: Context, tag: str) -> list[str]:
        label = await ctx.step(effect, f"{tag} LABEL")
        await ctx.receive("go")
        return [label]

    return registry


async def test_migrate_replays_the_target_version_first_and_refuses_one_that_diverges(open_engine):
    from flowli.domain import OperationRefused

    tag = f"migrate-{uuid.uuid4().hex}"
    async with open_engine(versions_app()) as engine:
        eid = await engine.start("order", tag, version="1")
        await wait_status(engine, eid, "suspended")
        before = list(EFFECTS)
        assert await engine.replays(eid) is None and await engine.replays(eid, "2") is None
        inserted = await engine.replays(eid, "3")
        assert inserted is not None and inserted.fid == "root/effect#1" and "before frame root/receive#0" in inserted.detail
        changed = await engine.replays(eid, "4")
        assert changed.fid == "root/effect#0" and (changed.recorded, changed.current) == (
            {"args": [f"{tag} label"]}, {"args": [f"{tag} LABEL"]})
        assert EFFECTS == before, "a dry replay runs no step"
        with pytest.raises(OperationRefused, match=r"version 3 does not replay it: at frame root/effect#1"):
            await engine.migrate(eid, "3", by="ops@example.com")
        with pytest.raises(OperationRefused, match="version 4 does not replay it.*recorded"):
            await engine.migrate(eid, "4")
        assert (await engine.status(eid)).version == "1"  # nothing changed
        await engine.migrate(eid, "2", by="ops@example.com")
        await engine.signal(eid, "go", True)
        assert await engine.result(eid, timeout=30) == [f"{tag} label", f"{tag} dispatch", f"{tag} receipt"]


async def test_migrate_with_force_migrates_a_version_that_does_not_replay(open_engine):
    tag = f"force-{uuid.uuid4().hex}"
    async with open_engine(versions_app()) as engine:
        eid = await engine.start("order", tag, version="1")
        await wait_status(engine, eid, "suspended")
        await engine.migrate(eid, "4", force=True)
        assert (await engine.status(eid)).version == "4"
        await engine.signal(eid, "go", True)
        record = await blocked(engine, eid)  # it blocks on the nondeterminism, as it was told
        assert record.blocked["fid"] == "root/effect#0"
