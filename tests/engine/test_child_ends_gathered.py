"""The ends of a decider parent's children that come together are one command of the parent, on
both backends: children whose steps finish at the same instant end in one store write that holds
every child's end and the parent's command (``Write.then`` chained); the parent's journal folds
to its state; a refused command leaves every end to its RESUME; and ends that come after the
parent ended with an earlier one of them are written alone, none lost."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import flowli
from flowli import Context, Registry
from flowli.domain import EntryKind, Status
from flowli.engine.deciders import Child, ChildEnded, Complete, Event, Start
from flowli.store import Write
from flowli.testing import store_of

from .conftest import FAST
from .test_deciders import folds

pytestmark = pytest.mark.integration

WIDTH = 4


def make_registry(barrier: threading.Barrier, first_wins: bool = False) -> Registry:
    """``fan``: starts WIDTH ``leaf`` children and completes with their results when all ended
    (``first_wins``: with the first one). A leaf's step waits at ``barrier`` for the others, so
    that all of them finish at the same instant."""
    reg = Registry()

    def meet(i: int) -> int:
        barrier.wait(timeout=10)
        return i

    @reg.workflow("leaf")
    async def leaf(ctx: Context, i: int) -> int:
        return await ctx.step(meet, i)

    def decide(state: dict[str, Any], command: Any) -> tuple[list[Event], list[Any]]:
        match command:
            case Start(input=n):
                return [Event("fan.started", {"n": n})], [Child(f"c{i}", "leaf", (i,)) for i in range(n)]
            case ChildEnded(key=key, status=status, result=result):
                events = [Event("child.ended", {"key": key, "status": status, "result": result})]
                ended = {**state["results"], key: result}
                if first_wins or len(ended) == state["n"]:
                    return events, [Complete(sorted(ended.values()))]
                return events, []
        return [], []

    def evolve(state: dict[str, Any], event: Event) -> dict[str, Any]:
        if event.kind == "fan.started":
            return {**state, "n": event.data["n"]}
        return {**state, "results": {**state["results"], event.data["key"]: event.data["result"]}}

    reg.decider("fan", initial={"n": 0, "results": {}}, evolve=evolve)(decide)
    return reg


async def connect(url: str, tmp_path: Any, first_wins: bool = False) -> flowli.Engine:
    return await flowli.connect(url, make_registry(threading.Barrier(WIDTH), first_wins),
                                bucket=str(tmp_path / "bucket"), **FAST)


def chain(write: Write) -> list[Write]:
    out = [write]
    while out[-1].then is not None:
        out.append(out[-1].then)  # type: ignore[arg-type]
    return out


def ends_in(writes: list[Write]) -> list[str]:
    """The executions whose end a store write (``writes``: it and those joined to it) holds."""
    return [e.eid for w in writes for e in w.entries if e.kind is EntryKind.EXECUTION_COMPLETED]


async def children_of(engine: flowli.Engine, eid: str) -> list[Any]:
    return [r for r in await engine.statuses([c.eid for c in await engine.list()]) if r.parent_eid == eid]


async def test_ends_that_come_together_are_one_write_with_the_parents_command(db_url: str, tmp_path: Any) -> None:
    engine = await connect(db_url, tmp_path)
    store = store_of(engine)
    writes: list[list[Write]] = []  # each store write, with the writes joined to it then
    write_of = store.write

    async def recording(write: Write, now: Any) -> Any:
        writes.append(chain(write))
        return await write_of(write, now)

    store.write = recording  # type: ignore[method-assign]  # the instance's, to see each write and its chain
    seen: list[tuple[str, str | None]] = []
    engine.observe(lambda t, result: seen.append((t.kind, t.workflow)))
    async with engine, engine.worker(concurrency=16):
        eids = [await engine.start("fan", WIDTH) for _ in range(3)]
        for eid in eids:
            assert await engine.result(eid, timeout=20) == list(range(WIDTH))
        del store.write
        gathered = 0
        for eid in eids:
            children = {c.eid for c in await children_of(engine, eid)}
            assert len(children) == WIDTH
            # each child's end written once, in a write that carried its parent's command
            carried = [w for w in writes if any(x.advance is not None and x.advance.eid == eid for x in w)
                       and set(ends_in(w)) & children]
            ended = [c for w in carried for c in ends_in(w) if c in children]
            assert sorted(ended) == sorted(children)
            # the ends that came together went in one write: fewer writes than children
            assert len(carried) < WIDTH, [len(ends_in(w)) for w in carried]
            gathered += len(carried)
            state = await folds(engine, eid, "fan")
            assert state["results"] == {f"c{i}": i for i in range(WIDTH)}
            journal = await engine.journal(eid)
            assert [e.value["event"] for e in journal if e.kind is EntryKind.EVENT].count("child.ended") == WIDTH
        # every transition of a gathered write went through the observers, one each: a child's
        # end each, and one command of the parent each write
        assert seen.count(("end", "leaf")) == 3 * WIDTH
        assert seen.count(("decide", "fan")) == gathered


async def test_a_refused_command_of_gathered_ends_leaves_each_end_to_its_resume(db_url: str, tmp_path: Any) -> None:
    engine = await connect(db_url, tmp_path)
    refused: list[Any] = []

    async def once(t: Any, call_next: Any) -> Any:
        if t.kind == "decide" and t.workflow == "fan" and (t.payload or {}).get("command") == "ChildEnded" \
                and not refused:
            refused.append(t.payload)
            raise PermissionError("not now")
        return await call_next()

    engine.use(once)
    async with engine, engine.worker(concurrency=16):
        eid = await engine.start("fan", WIDTH)
        assert await engine.result(eid, timeout=20) == list(range(WIDTH))
        assert len(refused) == 1
        children = await children_of(engine, eid)
        assert [c.status for c in children] == [Status.COMPLETED] * WIDTH
        state = await folds(engine, eid, "fan")
        assert state["results"] == {f"c{i}": i for i in range(WIDTH)}
        journal = await engine.journal(eid)
        assert [e.value["event"] for e in journal if e.kind is EntryKind.EVENT].count("child.ended") == WIDTH


async def test_ends_after_the_one_that_ended_the_parent_are_written_alone(db_url: str, tmp_path: Any) -> None:
    engine = await connect(db_url, tmp_path, first_wins=True)
    async with engine, engine.worker(concurrency=16):
        eid = await engine.start("fan", WIDTH)
        winner = await engine.result(eid, timeout=20)
        assert len(winner) == 1
        for _ in range(400):  # the other children end too, each written alone
            children = await children_of(engine, eid)
            if [c.status for c in children] == [Status.COMPLETED] * WIDTH:
                break
            await asyncio.sleep(0.02)
        assert [c.status for c in children] == [Status.COMPLETED] * WIDTH
        for c in children:  # each end is in its own journal once
            assert [e.kind for e in await engine.journal(c.eid)].count(EntryKind.EXECUTION_COMPLETED) == 1
        state = await folds(engine, eid, "fan")
        assert len(state["results"]) == 1  # the parent took the first end only
        journal = await engine.journal(eid)
        assert [e.value["event"] for e in journal if e.kind is EntryKind.EVENT].count("child.ended") == 1
        assert [e.kind for e in journal].count(EntryKind.EXECUTION_COMPLETED) == 1
