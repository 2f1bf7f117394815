"""The one transition path: a middleware sees every change to an execution once, with its kind,
eid, workflow, principal and application; a middleware that raises refuses the change and
nothing is written; observers see the fast lane's appends too; every write the engine builds
with an intent has that intent's shape."""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
import weakref
from datetime import timedelta
from typing import Any

import pytest

from flowli import Context, Registry
from flowli.domain import Principal, RetryPolicy, Status
from flowli.store import fits
from flowli.testing import Clock, drain, store_of

from ..crash import until
from ..rows import dump
from .conftest import wait_status

pytestmark = pytest.mark.integration

RETRY = RetryPolicy(max_attempts=2, backoff=timedelta(milliseconds=10))


def upper(x: str) -> str:
    return x.upper()


FLAKY: dict[str, int] = {}


def flaky_once(name: str) -> str:
    """Fails on its first attempt, then returns ok."""
    FLAKY[name] = FLAKY.get(name, 0) + 1
    if FLAKY[name] == 1:
        raise ConnectionError("once")
    return "ok"


class Recorder:
    """A middleware that records what it sees and lets every transition through."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    async def __call__(self, transition: Any, call_next: Any) -> Any:
        self.seen.append(transition)
        return await call_next()

    def of(self, eid: str) -> list[tuple[str, str, str]]:
        """What changed ``eid``: its own transitions, and the sweeper's that name it among several."""
        def names(t: Any) -> bool:
            payload = t.payload if isinstance(t.payload, dict) else {}
            return t.eid == eid or eid in payload.get("executions", ()) or \
                eid in [e for e, _ in payload.get("timers", ())]

        return [(t.kind, t.principal.kind, t.principal.id) for t in self.seen if names(t)]


def app() -> Registry:
    registry = Registry()

    @registry.workflow("greet")
    async def greet(ctx: Context, name: str) -> str:
        decision = await ctx.receive("go")
        return await ctx.step(upper, f"{name}:{decision}")

    @registry.workflow("nap")
    async def nap(ctx: Context) -> str:
        await ctx.sleep(timedelta(hours=1))
        return "rested"

    @registry.workflow("versions", version="1")
    async def v1(ctx: Context) -> str:
        await ctx.receive("go")
        return "one"

    @registry.workflow("versions", version="2")
    async def v2(ctx: Context) -> str:
        await ctx.receive("go")
        return "two"

    @registry.workflow("remote")
    async def remote(ctx: Context) -> str:
        return await ctx.step(upper, "far", queue="far")

    return registry


async def test_a_middleware_sees_each_transition_of_an_execution_once_with_its_principal(open_engine):
    recorder = Recorder()
    async with open_engine(app()) as engine:
        engine.use(recorder)
        eid = await engine.start("greet", "ada", by="alice@example.com")
        await wait_status(engine, eid, "suspended")
        await engine.signal(eid, "go", "yes", by="bob@example.com")
        assert await engine.result(eid, timeout=30) == "ADA:YES"
        seen = recorder.of(eid)
        assert [(k, kind) for k, kind, _ in seen] == [
            ("start", "human"), ("suspend", "worker"), ("signal", "human"), ("end", "worker")]
        assert [who for *_, who in seen[::2]] == ["alice@example.com", "bob@example.com"]
        start = recorder.seen[0]
        assert (start.workflow, start.application, start.payload["args"]) == ("greet", None, ["ada"])
        end = [t for t in recorder.seen if t.kind == "end"][0]
        assert end.payload == {"status": "completed", "result": "ADA:YES", "error": None}


async def test_a_middleware_of_some_kinds_sees_only_those(open_engine):
    every, starts = Recorder(), Recorder()
    async with open_engine(app()) as engine:
        engine.use(every)
        engine.use(starts, kinds={"start", "signal"})
        eid = await engine.start("greet", "ada", by="alice@example.com")
        await wait_status(engine, eid, "suspended")
        await engine.signal(eid, "go", "yes", by="bob@example.com")
        assert await engine.result(eid, timeout=30) == "ADA:YES"
    assert [k for k, *_ in every.of(eid)] == ["start", "suspend", "signal", "end"]
    assert [k for k, *_ in starts.of(eid)] == ["start", "signal"]


async def test_a_cancel_a_migration_and_a_broadcast_each_pass_once(open_engine):
    recorder = Recorder()
    async with open_engine(app()) as engine:
        engine.use(recorder)
        first = await engine.start("versions", version="1")
        second = await engine.start("greet", "bo")
        await wait_status(engine, first, "suspended")
        await wait_status(engine, second, "suspended")
        await engine.migrate(first, "2", by="erin@example.com")
        await engine.cancel(second, by=Principal("dave@example.com", roles=("operator",)))
        await engine.broadcast("news", {"n": 1}, by="system:newsroom")
        await wait_status(engine, second, "cancelled")
        migrated = [t for t in recorder.seen if t.kind == "migrate"]
        cancelled = [t for t in recorder.seen if t.kind == "cancel"]
        broadcasts = [t for t in recorder.seen if t.kind == "broadcast"]
        assert [(t.eid, t.principal.id, t.payload["to"]) for t in migrated] == [(first, "erin@example.com", "2")]
        assert [(t.eid, t.principal.id, t.principal.roles) for t in cancelled] == [
            (second, "dave@example.com", ("operator",))]
        assert [(t.eid, t.principal.kind, t.principal.id, t.payload) for t in broadcasts] == [
            (None, "system", "newsroom", {"channel": "news", "payload": {"n": 1}})]
        assert [k for k, *_ in recorder.of(second)][-1] == "end"


async def test_the_sweepers_transitions_fire_and_recover_and_fold_pass_with_its_principal(open_engine):
    recorder = Recorder()
    clock = Clock()
    async with open_engine(app(), clock=clock, worker=False, retention=timedelta(days=1)) as engine:
        engine.use(recorder)
        eid = await engine.start("nap")
        leased = await store_of(engine).acquire(eid, "dead-worker", timedelta(seconds=5), clock.now(), ack=f"START:{eid}")
        assert leased.epoch == 1
        async with engine.worker():
            await clock.advance(timedelta(seconds=6))  # the lease expires: the sweeper recovers it
            await wait_status(engine, eid, "suspended")
            await clock.advance(timedelta(hours=1))  # the timer is due: the sweeper fires it
            assert await engine.result(eid, timeout=30) == "rested"
            await clock.advance(timedelta(days=2))
            assert await engine.retain() == 1
        assert [k for k, *_ in recorder.of(eid)] == ["start", "recover", "suspend", "fire", "end", "fold"]
        for t in recorder.seen:
            if t.kind in ("recover", "fire", "fold"):
                assert (t.principal.kind, t.principal.id) == ("system", "sweeper"), t


async def test_the_recover_and_fire_transitions_name_their_executions(open_engine):
    recorder = Recorder()
    clock = Clock()
    async with open_engine(app(), clock=clock) as engine:
        engine.use(recorder)
        eids = [await engine.start("nap") for _ in range(3)]
        for eid in eids:
            await wait_status(engine, eid, "suspended")
        await clock.advance(timedelta(hours=1))
        assert [await engine.result(eid, timeout=30) for eid in eids] == ["rested"] * 3
        fired = [t for t in recorder.seen if t.kind == "fire"]
        assert sorted(e for t in fired for e, _ in t.payload["timers"]) == sorted(eids)


async def test_a_step_on_another_queue_comes_back_as_one_step_outcome(open_engine):
    recorder = Recorder()
    async with open_engine(app(), worker=False) as engine:
        engine.use(recorder)
        async with engine.worker(queues=["default", "far"]):
            eid = await engine.start("remote")
            assert await engine.result(eid, timeout=30) == "FAR"
        outcomes = [t for t in recorder.seen if t.kind == "step_outcome"]
        assert [(t.eid, t.payload) for t in outcomes] == [(eid, {"fid": "root/upper#0", "attempt": 1})]


async def test_a_worker_stopped_mid_run_hands_back_through_the_path(open_engine):
    recorder = Recorder()
    gate = asyncio.Event()
    registry = Registry()

    async def hold() -> str:
        await gate.wait()
        return "held"

    @registry.workflow("holds")
    async def holds(ctx: Context) -> str:
        return await ctx.step(hold)

    async with open_engine(registry, worker=False) as engine:
        engine.use(recorder)
        async with engine.worker() as worker:
            worker.grace = 0.1
            eid = await engine.start("holds")
            await wait_status(engine, eid, "running")
            await asyncio.sleep(0.1)
        handed = [t for t in recorder.seen if t.kind == "hand_back"]
        assert [(t.eid, t.principal.kind, t.payload) for t in handed] == [(eid, "worker", {"reason": "worker stopped"})]
        assert (await engine.status(eid)).status is Status.SUSPENDED
        gate.set()


async def _suspended_announced(engine: Any, eid: str) -> bool:
    return any(e.eid == eid and e.kind.value == "execution.suspended" for e in await engine.control_log())


@pytest.mark.parametrize("refused", ["start", "signal", "cancel", "migrate", "broadcast"])
async def test_a_refusing_middleware_leaves_the_store_unchanged_row_for_row(open_engine, db_url, refused):
    async with open_engine(app()) as engine:
        eid = await engine.start("versions", version="1")
        await wait_status(engine, eid, "suspended")
        # the status is stored a moment before the activation hands its entry to the second
        # append: wait for the entry on the control log, so the snapshot below holds all of it
        await until(lambda: _suspended_announced(engine, eid), 10, "execution.suspended on the control log")
        await drain(engine)

        async def refuse(transition: Any, call_next: Any) -> Any:
            if transition.kind == refused:
                raise PermissionError(f"no {transition.kind} for {transition.principal.id}")
            return await call_next()

        engine.use(refuse)
        before = await dump(db_url)
        action = {
            "start": lambda: engine.start("greet", "x", by="mallory@example.com"),
            "signal": lambda: engine.signal(eid, "go", "now", by="mallory@example.com"),
            "cancel": lambda: engine.cancel(eid, by="mallory@example.com"),
            "migrate": lambda: engine.migrate(eid, "2", by="mallory@example.com"),
            "broadcast": lambda: engine.broadcast("news", 1, by="mallory@example.com"),
        }[refused]
        with pytest.raises(PermissionError, match=f"no {refused} for mallory@example.com"):
            await action()
        await asyncio.sleep(0.2)  # nothing goes on behind the refusal either
        await drain(engine)
        assert await dump(db_url) == before


async def test_call_next_twice_is_refused(open_engine):
    async def twice(transition: Any, call_next: Any) -> Any:
        await call_next()
        return await call_next()

    async with open_engine(app(), worker=False) as engine:
        engine.use(twice)
        with pytest.raises(RuntimeError, match="called call_next twice for one start transition"):
            await engine.start("greet", "x")


async def test_a_committed_transition_is_freed_without_the_cyclic_collector(open_engine):
    """The middleware chain holds a transition only while it runs: once committed, its write is
    freed by reference counting alone. (A reference cycle there kept every write of a busy
    service, with its entries and items, alive until the cyclic collector ran, and made it run
    every few hundred commits.)"""
    writes: list[weakref.ref[Any]] = []

    async def watch(transition: Any, call_next: Any) -> Any:
        writes.append(weakref.ref(transition.write))
        return await call_next()

    async def passing(transition: Any, call_next: Any) -> Any:
        return await call_next()

    async with open_engine(app(), worker=False) as engine:
        engine.use(watch)
        engine.use(passing)  # two of them: the chain's walk goes through a call_next
        gc.collect()
        gc.disable()
        try:
            eid = await engine.start("greet", "ada")
            await engine.signal(eid, "go", "yes")
            await engine.cancel(eid)
            kept = [w for w in (ref() for ref in writes) if w is not None]
        finally:
            gc.enable()
        assert len(writes) == 3
        assert kept == [], f"{len(kept)} committed writes still alive: {[w.entries for w in kept]}"


async def test_a_write_is_freed_before_its_caller_resumes_while_threads_contend(open_engine):
    """The store lets go of a write before it wakes the caller, not just after: a writer thread
    that woke its callers first and was then held off the interpreter (another thread busy, a
    switch every microsecond) still held the batch when the caller looked (some 30 of 400 were
    alive on a SQLite file)."""
    writes: list[weakref.ref[Any]] = []

    async def watch(transition: Any, call_next: Any) -> Any:
        writes.append(weakref.ref(transition.write))
        return await call_next()

    stop = threading.Event()

    def busy() -> None:
        while not stop.is_set():
            sum(range(100))

    async with open_engine(app(), worker=False) as engine:
        engine.use(watch)
        other = threading.Thread(target=busy)
        other.start()
        switch = sys.getswitchinterval()
        gc.collect()
        gc.disable()
        sys.setswitchinterval(1e-6)
        alive = 0
        try:
            for i in range(400):
                await engine.start("greet", f"x{i}")
                alive += writes[-1]() is not None
        finally:
            sys.setswitchinterval(switch)
            gc.enable()
            stop.set()
            other.join()
        assert len(writes) == 400
        assert alive == 0, f"{alive} of 400 writes alive when their start returned"


async def test_observers_see_the_fast_lane_and_every_intent_fits_its_write(open_engine):
    """The fast lane (frame appends) skips the middleware but not the observers, and the intent
    the engine gives each write is one its shape fits (the store trusts it)."""
    seen: list[Any] = []
    recorder = Recorder()
    registry = app()

    @registry.workflow("busy")
    async def busy(ctx: Context) -> list[str]:
        a = await ctx.step(upper, "a")
        b, c = await ctx.gather(ctx.step(upper, "b"), ctx.step(flaky_once, ctx.eid, retry=RETRY))
        await ctx.sleep(timedelta(milliseconds=10))
        await ctx.send("note", 1)
        return [a, b, c, await ctx.child("child")]

    @registry.workflow("child")
    async def child(ctx: Context) -> str:
        return await ctx.step(upper, "kid")

    async with open_engine(registry) as engine:
        engine.use(recorder)
        engine.observe(lambda t, result: seen.append((t, result)))
        eid = await engine.start("busy")
        assert await engine.result(eid, timeout=30) == ["A", "B", "ok", "KID"]
        other = await engine.start("greet", "z")
        await wait_status(engine, other, "suspended")
        await engine.signal(other, "go", "y")
        await engine.result(other, timeout=30)
    appends = [t for t, _ in seen if t.kind == "append"]
    assert appends and {t.eid for t in appends} >= {eid, other}
    assert not [t for t in recorder.seen if t.kind == "append"], "the fast lane skips the middleware"
    assert {t.kind for t, _ in seen} >= {"start", "append", "suspend", "end", "signal"}
    for t, _ in seen:
        if t.write.intent is not None:
            assert fits(t.write.intent, t.write), (t.kind, t.write.intent, t.write)
