"""Frame ids, memo and replay: the rules of the reference's "Frame" and "Memo and replay"."""

from __future__ import annotations

import asyncio

import pytest

from flowli import Context, Registry
from flowli.domain import DuplicateFrameError, EntryKind, StepFailed

from .conftest import kinds, wait_status

pytestmark = pytest.mark.integration

RUNS: dict[str, int] = {}


def fetch(i: int) -> dict:
    RUNS[f"fetch{i}"] = RUNS.get(f"fetch{i}", 0) + 1
    return {"i": i}


async def afetch(i: int) -> int:
    await asyncio.sleep(0)
    RUNS[f"afetch{i}"] = RUNS.get(f"afetch{i}", 0) + 1
    return i * 10


async def test_frame_ids_follow_the_reference(open_engine):
    registry = Registry()

    @registry.workflow("ids")
    async def ids(ctx: Context) -> list:
        a = await ctx.step(fetch, 1)
        b = await ctx.step(fetch, 2)
        c = await ctx.step(fetch, 3, key="orders")
        d = await ctx.step(afetch, 4)
        return [a, b, c, d]

    async with open_engine(registry) as engine:
        eid = await engine.start("ids")
        assert await engine.result(eid, timeout=30) == [{"i": 1}, {"i": 2}, {"i": 3}, 40]
        fids = [e.fid for e in await engine.journal(eid) if e.kind is EntryKind.FRAME_COMPLETED]
        assert fids == ["root/fetch#0", "root/fetch#1", "root/fetch:orders", "root/afetch#0"]


async def test_gather_gives_stable_ids_whatever_completes_first(open_engine):
    registry = Registry()

    async def slow(delay: float, tag: str) -> str:
        await asyncio.sleep(delay)
        return tag

    @registry.workflow("g")
    async def g(ctx: Context) -> list:
        return await ctx.gather(ctx.step(slow, 0.05, "a"), ctx.step(slow, 0.0, "b"), ctx.step(slow, 0.02, "c", key="k"))

    async with open_engine(registry) as engine:
        eid = await engine.start("g")
        assert await engine.result(eid, timeout=30) == ["a", "b", "c"]
        journal = await engine.journal(eid)
        by_fid = {e.fid: e.value for e in journal if e.kind is EntryKind.FRAME_COMPLETED}
        assert by_fid == {"root/slow#0": "a", "root/slow#1": "b", "root/slow:k": "c"}
        completed = [e for e in journal if e.kind is EntryKind.FRAME_COMPLETED]
        first = min(completed, key=lambda e: e.provenance.at)
        assert first.fid == "root/slow#1"  # b finished first, and still has the id #1


async def test_duplicate_key_under_one_parent_raises(open_engine):
    registry = Registry()

    @registry.workflow("dup")
    async def dup(ctx: Context) -> str:
        await ctx.step(fetch, 1, key="x")
        try:
            await ctx.step(fetch, 2, key="x")
        except DuplicateFrameError as exc:
            return exc.fid
        return "no error"

    async with open_engine(registry) as engine:
        eid = await engine.start("dup")
        assert await engine.result(eid, timeout=30) == "root/fetch:x"


async def test_memoized_frames_run_zero_times_on_replay(open_engine):
    registry = Registry()
    RUNS.clear()

    @registry.workflow("memo")
    async def memo(ctx: Context) -> int:
        a = await ctx.step(fetch, 7)
        b = await ctx.step(afetch, 8)
        got = await ctx.receive("go")  # suspends: the next activation replays a and b
        c = await ctx.step(fetch, 9)
        return a["i"] + b + got + c["i"]

    async with open_engine(registry) as engine:
        eid = await engine.start("memo")
        await wait_status(engine, eid, "suspended")
        await engine.signal(eid, "go", 100)
        assert await engine.result(eid, timeout=30) == 7 + 80 + 100 + 9
        assert RUNS == {"fetch7": 1, "afetch8": 1, "fetch9": 1}
        journal = await engine.journal(eid)
        assert kinds(journal).count("execution.resumed") == 1
        assert kinds(journal, "root/fetch#0") == ["frame.started", "frame.completed"]


async def test_now_random_uuid_are_memoized_steps(open_engine):
    registry = Registry()

    @registry.workflow("det")
    async def det(ctx: Context) -> list:
        t = await ctx.now()
        r = await ctx.random()
        u = await ctx.uuid()
        await ctx.receive("go")
        t2, r2, u2 = await ctx.now(), await ctx.random(), await ctx.uuid()
        return [t.isoformat(), r, u, t2.isoformat(), r2, u2]

    async with open_engine(registry) as engine:
        eid = await engine.start("det")
        await wait_status(engine, eid, "suspended")
        first = {e.fid: e.value for e in await engine.journal(eid) if e.kind is EntryKind.FRAME_COMPLETED}
        await engine.signal(eid, "go", None)
        result = await engine.result(eid, timeout=30)
        # the values before the suspension are the journaled ones, replayed
        assert result[0] == first["root/now#0"] and result[1] == first["root/random#0"] and result[2] == first["root/uuid#0"]
        assert 0 <= result[1] < 1 and len(result[2]) == 36


async def test_first_completed_entry_wins(open_engine, db_url):
    """A later frame.completed for one fid (a second worker ran it too) is ignored on replay."""
    from flowli.domain import Actor, Code, Entry, Provenance, Site
    from flowli.store import Write
    from flowli.testing import store_of

    registry = Registry()

    @registry.workflow("first")
    async def first(ctx: Context) -> int:
        v = await ctx.step(afetch, 1)
        await ctx.receive("go")
        return v

    async with open_engine(registry) as engine:
        eid = await engine.start("first")
        await wait_status(engine, eid, "suspended")
        late = Entry(
            eid=eid, kind=EntryKind.FRAME_COMPLETED, fid="root/afetch#0", attempt=1, value=999,
            provenance=Provenance(Actor("worker", "other"), Site(), Code("first", "1", "step", "afetch"), engine.clock.now()),
        )
        await store_of(engine).write(Write(entries=[late]), engine.clock.now())  # what the second worker wrote
        await engine.signal(eid, "go", None)
        assert await engine.result(eid, timeout=30) == 10


async def test_step_failed_is_raised_again_on_every_replay(open_engine):
    registry = Registry()
    seen: list[str] = []

    def boom() -> None:
        raise ValueError("no such account")

    @registry.workflow("sf")
    async def sf(ctx: Context) -> str:
        try:
            await ctx.step(boom)
        except StepFailed as exc:
            seen.append(exc.fid)
        await ctx.receive("go")
        return f"{seen[-1]}"

    # the workflow cache off: the resume replays (a kept activation would continue instead)
    async with open_engine(registry, workflow_cache=0) as engine:
        eid = await engine.start("sf")
        await wait_status(engine, eid, "suspended")
        await engine.signal(eid, "go", None)
        assert await engine.result(eid, timeout=30) == "root/boom#0"
        assert seen == ["root/boom#0", "root/boom#0"]  # first run, then the replay
        journal = await engine.journal(eid)
        assert kinds(journal, "root/boom#0") == ["frame.started", "frame.failed"]


async def test_unhandled_step_failure_fails_the_execution(open_engine):
    registry = Registry()

    def boom() -> None:
        raise ValueError("card declined")

    @registry.workflow("fails")
    async def fails(ctx: Context) -> None:
        await ctx.step(boom)

    async with open_engine(registry) as engine:
        eid = await engine.start("fails")
        with pytest.raises(StepFailed) as info:
            await engine.result(eid, timeout=30)
        assert info.value.fid == "root/boom#0" and info.value.error_type == "ValueError"
        assert "card declined" in info.value.message
        assert (await engine.status(eid)).status == "failed"


async def test_workflow_error_is_rebuilt_for_the_caller(open_engine):
    registry = Registry()

    @registry.workflow("raises")
    async def raises(ctx: Context) -> None:
        raise KeyError("missing")

    async with open_engine(registry) as engine:
        eid = await engine.start("raises")
        with pytest.raises(KeyError):
            await engine.result(eid, timeout=30)


async def test_eids_are_uuid7_sorting_by_creation_and_child_eids_uuid5(open_engine):
    import uuid

    from flowli.domain import child_eid

    registry = Registry()

    @registry.workflow("e")
    async def e(ctx: Context) -> None: ...

    async with open_engine(registry, worker=False) as engine:
        eids = [await engine.start("e") for _ in range(5)]
    assert all(uuid.UUID(x).version == 7 for x in eids)
    assert eids == sorted(eids)
    kid = child_eid(eids[0], "root/kid#0")
    assert uuid.UUID(kid).version == 5 and kid == child_eid(eids[0], "root/kid#0") != child_eid(eids[0], "root/kid#1")
