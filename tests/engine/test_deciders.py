"""Deciders in the engine, on both backends: an order decider (start -> a DELEGATE "charge",
retried on a timer after a failure or an expired lease -> a signal "ship" -> a child execution
-> the end) driven through crashes between writes, lease expiry, timers, signals, a child's end,
cancel, a middleware refusal and a command racing another on the state's version. After each,
folding the journal with the registered ``evolve`` gives the stored state."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

import flowli
from flowli import Context, Registry
from flowli.domain import EntryKind, StaleAnswer, Status, TaskKind, task_id
from flowli.engine.deciders import (
    Answered,
    Cancel,
    CancelRequested,
    Child,
    ChildEnded,
    Complete,
    Delegate,
    Event,
    Expired,
    Fail,
    Failed,
    Signal,
    Start,
    Timer,
    TimerFired,
    Withdraw,
)
from flowli.testing import Clock, drain, store_of

from .conftest import FAST

pytestmark = pytest.mark.integration

RETRY = timedelta(seconds=30)
MAX_ATTEMPTS = 3


def decide(state: dict[str, Any], command: Any) -> tuple[list[Event], list[Any]]:
    """An order: charge it (a DELEGATE on ``payments``, up to three attempts, each retry after a
    timer), wait for ``ship``, ship it (a child execution), end with what the child returned."""
    match command:
        case Start(input=order):
            return [Event("order.placed", order)], [Delegate("charge", "payments", order, attempt=1)]
        case Answered(key="charge", attempt=attempt, value=value) if state["status"] == "charging":
            return [Event("charge.succeeded", {"attempt": attempt, "receipt": value})], []
        case Failed(key="charge", attempt=attempt) | Expired(key="charge", attempt=attempt) \
                if state["status"] == "charging":
            why = "expired" if isinstance(command, Expired) else command.error_type
            if attempt >= MAX_ATTEMPTS:
                return [Event("charge.failed", {"attempt": attempt, "why": why, "final": True})], \
                    [Fail(f"charge failed {attempt} times", "ChargeFailed")]
            return [Event("charge.failed", {"attempt": attempt, "why": why, "final": False})], \
                [Timer("retry", after=RETRY)]
        case TimerFired(key="retry") if state["status"] == "waiting_retry":
            attempt = state["attempt"] + 1
            return [Event("charge.retried", {"attempt": attempt})], \
                [Delegate("charge", "payments", state["order"], attempt=attempt)]
        case Signal(channel="ship", payload=address) if state["status"] == "charged":
            return [Event("ship.requested", {"address": address})], \
                [Child("ship", "shipping", (state["order"]["id"], address))]
        case Signal(channel="boom"):
            raise RuntimeError("the decider's own defect")
        case Signal(channel="end_and_more"):
            return [], [Complete(None), Timer("late", after=RETRY)]
        case Signal(channel="note", payload=note):
            return [Event("note.added", note)], []
        case ChildEnded(key="ship", status="completed", result=parcel):
            return [Event("order.shipped", {"parcel": parcel})], [Complete({"order": state["order"]["id"], "parcel": parcel})]
        case ChildEnded(key="ship", error=error):
            return [Event("ship.failed", error)], [Fail("shipping failed", "ShippingFailed")]
        case CancelRequested(reason=reason):
            return [Event("order.cancelled", {"reason": reason})], [Cancel(reason)]
    return [], []  # a command this state does not expect: nothing changes


def evolve(state: dict[str, Any], event: Event) -> dict[str, Any]:
    s = dict(state)
    data = event.data
    if event.kind == "order.placed":
        s.update(order=data, status="charging", attempt=1)
    elif event.kind == "charge.succeeded":
        s.update(status="charged", receipt=data["receipt"])
    elif event.kind == "charge.failed":
        s.update(status="failed" if data["final"] else "waiting_retry", failures=s["failures"] + [data["why"]])
    elif event.kind == "charge.retried":
        s.update(status="charging", attempt=data["attempt"])
    elif event.kind == "ship.requested":
        s.update(status="shipping", address=data["address"])
    elif event.kind == "order.shipped":
        s.update(status="shipped", parcel=data["parcel"])
    elif event.kind == "ship.failed":
        s.update(status="ship_failed")
    elif event.kind == "note.added":
        s.update(notes=s["notes"] + [data])
    elif event.kind == "order.cancelled":
        s.update(status="cancelled")
    return s


INITIAL = {"status": "new", "attempt": 0, "order": None, "failures": [], "notes": []}


def make_registry() -> Registry:
    registry = Registry()
    registry.decider("order", version="1", initial=INITIAL, evolve=evolve)(decide)

    @registry.workflow("shipping")
    async def shipping(ctx: Context, order_id: str, address: str) -> str:
        return await ctx.step(lambda: f"parcel-{order_id}-{address}")

    return registry


ORDER = {"id": "o-1", "amount": 42}


async def folds(engine: flowli.Engine, eid: str, name: str = "order") -> dict[str, Any]:
    """Folding the journal with the registered evolve (of decider ``name``) gives the stored
    state; returns it."""
    decider = engine.registry.decider_of(name)
    assert decider is not None
    journal = await engine.journal(eid)
    events = [Event(e.value["event"], e.value["data"]) for e in journal if e.kind is EntryKind.EVENT]
    version, state = await engine.decider_state(eid)
    assert decider.fold(events) == state
    return state


async def until(predicate: Any, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not await predicate():
        if loop.time() > end:
            raise AssertionError("the condition never held")
        await asyncio.sleep(0.01)


async def state_is(engine: flowli.Engine, eid: str, status: str) -> None:
    async def holds() -> bool:
        return (await engine.decider_state(eid))[1] is not None and (await engine.decider_state(eid))[1]["status"] == status

    await until(holds)


async def shipped_order(engine: flowli.Engine) -> str:
    """An order taken to its end as its outside world would: charged, shipped, its result read."""
    eid = await engine.start("order", ORDER)
    consumer, task = await take(engine)
    await consumer.answer(task, "r-1")
    await state_is(engine, eid, "charged")
    await engine.signal(eid, "ship", "Main St")
    await engine.result(eid, timeout=10)
    return eid


async def take(engine: flowli.Engine, name: str = "pay", lease: timedelta = timedelta(seconds=60)) -> Any:
    consumer = engine.consumer("payments", name=name, lease=lease)
    for _ in range(500):
        tasks = await consumer.dequeue(limit=1, wait=0.05)
        if tasks:
            return consumer, tasks[0]
    raise AssertionError("no charge task came")


async def connect(url: str, tmp_path: Any, clock: Clock | None = None) -> flowli.Engine:
    return await flowli.connect(url, make_registry(), clock=clock, bucket=str(tmp_path / "bucket"), **FAST)


async def test_an_order_runs_start_charge_signal_child_end(db_url: str, tmp_path: Any) -> None:
    engine = await connect(db_url, tmp_path)
    store = store_of(engine)
    replayed: list[str] = []  # never replayed: no command reads its journal or takes its lease
    journal_of, acquire_many = store.read_journal, store.acquire_many

    async def reading(eid_: str, after: int = 0) -> Any:
        replayed.append(eid_)
        return await journal_of(eid_, after)

    async def acquiring(wanted: Any, *args: Any) -> Any:
        replayed.extend(e for e, _ in wanted)
        return await acquire_many(wanted, *args)

    store.read_journal, store.acquire_many = reading, acquiring  # type: ignore[method-assign]
    async with engine, engine.worker():
        eid = await engine.start("order", ORDER, by="alice@example.com")
        consumer, task = await take(engine)
        assert task.payload == ORDER and task.attempt == 1
        await consumer.answer(task, "r-1")
        await state_is(engine, eid, "charged")
        assert (await engine.status(eid)).status is Status.SUSPENDED
        await engine.signal(eid, "ship", "Main St", by="bob@example.com")
        assert await engine.result(eid, timeout=10) == {"order": "o-1", "parcel": "parcel-o-1-Main St"}
        # (the child, a workflow, started in this worker at once: its lease came with its record)
        assert eid not in replayed
        children = [r for r in await engine.statuses([c.eid for c in await engine.list()]) if r.parent_eid == eid]
        assert [(c.status, c.lease_epoch) for c in children] == [(Status.COMPLETED, 1)]
        assert await store.read_task(task_id(TaskKind.START, children[0].eid)) is None  # no START task went through the queue
        del store.read_journal, store.acquire_many
        state = await folds(engine, eid)
        assert state["status"] == "shipped"
        journal = await engine.journal(eid)
        assert [e.value["event"] for e in journal if e.kind is EntryKind.EVENT] == [
            "order.placed", "charge.succeeded", "ship.requested", "order.shipped"]
        # provenance: who sent each command
        by = {e.value["event"]: e.provenance for e in journal if e.kind is EntryKind.EVENT}
        assert by["ship.requested"].actor.id == "bob@example.com"
        assert by["charge.succeeded"].code.workflow == "order"
        assert journal[-1].kind is EntryKind.EXECUTION_COMPLETED
        # five commands: start, answer, signal, child's end; the version counts them
        assert (await engine.decider_state(eid))[0] == 4
        await drain(engine)  # the control log holds its lifecycle entries: verify finds it
        verification = await engine.verify(make_registry())
        assert [(c.eid, c.compatible) for c in verification.checked if c.eid == eid] == [(eid, True)]


async def test_a_failed_charge_and_an_expired_lease_retry_on_timers(db_url: str, tmp_path: Any) -> None:
    clock = Clock()
    engine = await connect(db_url, tmp_path, clock)
    async with engine, engine.worker():
        eid = await engine.start("order", ORDER)
        consumer, task = await take(engine)
        await consumer.fail(task, "DECLINED", "card declined")
        await state_is(engine, eid, "waiting_retry")
        assert [t.at for t in await engine.timers(eid)] == [clock.now() + RETRY]
        await clock.advance(RETRY)  # the sweeper fires the timer: attempt 2
        holder, second = await take(engine, "slow", lease=timedelta(seconds=10))
        assert second.attempt == 2
        await holder.renew(second)  # a renewal holds it on
        await clock.advance(timedelta(seconds=11))  # then its consumer stalls: the lease expires
        await state_is(engine, eid, "waiting_retry")
        with pytest.raises(StaleAnswer):  # its late answer is fenced out
            await holder.answer(second, "late")
        await clock.advance(RETRY)
        consumer, third = await take(engine)
        assert third.attempt == 3
        await consumer.answer(third, "r-3")
        await state_is(engine, eid, "charged")
        state = await folds(engine, eid)
        assert state["failures"] == ["DECLINED", "expired"] and state["receipt"] == "r-3"
        assert await engine.timers(eid) == []


async def test_a_charge_that_fails_every_attempt_fails_the_order(db_url: str, tmp_path: Any) -> None:
    clock = Clock()
    engine = await connect(db_url, tmp_path, clock)
    async with engine, engine.worker():
        eid = await engine.start("order", ORDER)
        for attempt in range(1, MAX_ATTEMPTS + 1):
            consumer, task = await take(engine)
            assert task.attempt == attempt
            await consumer.fail(task, "DECLINED", f"declined {attempt}")
            if attempt < MAX_ATTEMPTS:
                await state_is(engine, eid, "waiting_retry")
                await clock.advance(RETRY)
        with pytest.raises(flowli.domain.ExecutionFailed, match="charge failed 3 times"):
            await engine.result(eid, timeout=10)
        assert (await folds(engine, eid))["status"] == "failed"


async def test_a_cancel_ends_the_order_and_fences_out_the_open_attempt(db_url: str, tmp_path: Any) -> None:
    engine = await connect(db_url, tmp_path)
    async with engine, engine.worker():
        eid = await engine.start("order", ORDER)
        consumer, task = await take(engine)
        await engine.cancel(eid, by="ops@example.com", reason="customer asked")
        record = await engine.status(eid)  # the cancel is one write: the decider ended it there
        assert record.status is Status.CANCELLED
        with pytest.raises((StaleAnswer, flowli.domain.ExecutionTerminalError)):
            await consumer.answer(task, "late")
        with pytest.raises(flowli.domain.ExecutionTerminalError, match="cancelled"):
            await engine.signal(eid, "ship", "Main St")
        journal = await engine.journal(eid)
        assert journal[-1].kind is EntryKind.EXECUTION_CANCELLED
        assert journal[-1].provenance.actor.id == "ops@example.com"
        assert (await folds(engine, eid))["status"] == "cancelled"
        assert [t.state for t in await engine.tasks(eid=eid, include_acked=True) if t.kind.value == "DELEGATE"] == ["withdrawn"]


async def test_a_middleware_refusal_writes_nothing(db_url: str, tmp_path: Any) -> None:
    engine = await connect(db_url, tmp_path)
    refusing = True
    seen: list[tuple[str, str | None]] = []

    async def no_shipping(t: Any, call_next: Any) -> Any:
        seen.append((t.kind, t.workflow))
        if refusing and t.kind == "signal" and t.workflow == "order":
            raise PermissionError("no shipping today")
        return await call_next()

    engine.use(no_shipping)
    async with engine, engine.worker():
        eid = await engine.start("order", ORDER)
        consumer, task = await take(engine)
        await consumer.answer(task, "r-1")
        await state_is(engine, eid, "charged")
        before = await engine.decider_state(eid)
        with pytest.raises(PermissionError):
            await engine.signal(eid, "ship", "Main St")
        assert await engine.decider_state(eid) == before
        assert (await engine.status(eid)).status is Status.SUSPENDED
        refusing = False

        async def watch() -> list[Any]:  # watch follows its journal live, as any execution's
            seen = []
            async for entry in engine.watch(eid):
                seen.append(entry)
                if entry.kind is EntryKind.EXECUTION_COMPLETED:
                    return seen
            return seen

        watching = asyncio.ensure_future(watch())
        await engine.signal(eid, "ship", "Main St")
        assert (await engine.result(eid, timeout=10))["parcel"] == "parcel-o-1-Main St"
        await folds(engine, eid)
        assert await asyncio.wait_for(watching, 10) == await engine.journal(eid)
        # the middleware saw the decider's transitions as any execution's
        assert {("start", "order"), ("decide", "order"), ("answer", "order"), ("signal", "order")} <= set(seen)


async def test_two_commands_racing_on_one_version_are_both_applied_once(db_url: str, tmp_path: Any) -> None:
    engine = await connect(db_url, tmp_path)
    async with engine, engine.worker():
        eid = await engine.start("order", ORDER)
        await state_is(engine, eid, "charging")
        version, _ = await engine.decider_state(eid)
        # two processes (two engines on one database, neither of which advanced the execution
        # yet, so that each reads its state): the commands of one process take turns, those of
        # two race on the state's version
        first, other = await connect(db_url, tmp_path), await connect(db_url, tmp_path)
        stores = [store_of(first), store_of(other)]
        reads: list[int] = []
        both = asyncio.Event()

        def together(read: Any) -> Any:
            async def racing(eid_: str, held: Any = None) -> Any:  # the two signals read the same version
                got = await read(eid_, held)
                reads.append(got[0] if got else 0)
                if len(reads) == 2:
                    both.set()
                if len(reads) <= 2:
                    await asyncio.wait_for(both.wait(), 10)
                return got

            return racing

        for store in stores:
            store.read_state = together(store.read_state)  # type: ignore[method-assign]
        try:
            async with first, other:
                await asyncio.gather(first.signal(eid, "note", "a"), other.signal(eid, "note", "b"))
        finally:
            for store in stores:
                del store.read_state
        assert reads == [version, version, version + 1]  # the loser decided again on the fresh state
        after, state = await engine.decider_state(eid)
        assert after == version + 2 and sorted(state["notes"]) == ["a", "b"]
        journal = await engine.journal(eid)
        assert sorted(e.value["data"] for e in journal if e.kind is EntryKind.EVENT and e.value["event"] == "note.added") == ["a", "b"]
        await folds(engine, eid)


async def test_the_commands_of_one_process_take_turns_without_racing(db_url: str, tmp_path: Any) -> None:
    engine = await connect(db_url, tmp_path)
    async with engine, engine.worker():
        eid = await engine.start("order", ORDER)
        await state_is(engine, eid, "charging")
        version, _ = await engine.decider_state(eid)
        store = store_of(engine)
        write = store.write
        advances: list[int] = []

        async def counted(w: Any, now: Any) -> Any:
            if w.advance is not None:
                advances.append(w.advance.version)
            return await write(w, now)

        store.write = counted  # type: ignore[method-assign]
        try:
            await asyncio.gather(*(engine.signal(eid, "note", n) for n in "abcd"))
        finally:
            del store.write
        assert advances == [version + 1, version + 2, version + 3, version + 4]  # each decided once, none refused
        assert sorted((await engine.decider_state(eid))[1]["notes"]) == ["a", "b", "c", "d"]
        await folds(engine, eid)


async def test_a_fresh_engine_continues_after_a_crash_between_any_two_writes(db_url: str, tmp_path: Any) -> None:
    """Each command is one write; between two of them everything lives in the store. Each step
    here runs in an engine of its own, closed after it (a process that ends), and workers die
    holding a task: a fresh engine on the same store continues, and applies each command once."""
    clock = Clock()
    async with await connect(db_url, tmp_path, clock) as engine:  # no worker: only the start's write
        eid = await engine.start("order", ORDER)
        # its Start is decided in the write that creates it: no START task for a worker to take
        assert (await engine.status(eid)).status is Status.SUSPENDED
        assert (await engine.decider_state(eid))[0] == 1
        assert await store_of(engine).dequeue(["default"], [flowli.domain.TaskKind.START], "dead-worker", 1,
                                              timedelta(seconds=5), clock.now()) == []
    engine = await connect(db_url, tmp_path, clock)
    async with engine, engine.worker():
        await state_is(engine, eid, "charging")
        consumer, task = await take(engine)
    async with await connect(db_url, tmp_path, clock) as engine:  # a consumer's answer, from another process
        await engine.consumer("payments", name="pay", lease=timedelta(seconds=60)).answer(task, "r-1")
    async with await connect(db_url, tmp_path, clock) as engine:
        await engine.signal(eid, "ship", "Main St")  # the child's START is written; no worker runs it
        dead = await store_of(engine).dequeue(["default"], [flowli.domain.TaskKind.START], "dead-worker", 1,
                                              timedelta(seconds=5), clock.now())
        assert len(dead) == 1 and dead[0].eid != eid  # the child's START, taken by a worker that dies
    await clock.advance(timedelta(seconds=6))
    engine = await connect(db_url, tmp_path, clock)
    async with engine, engine.worker():
        assert (await engine.result(eid, timeout=10))["parcel"] == "parcel-o-1-Main St"
        state = await folds(engine, eid)
        events = [e.value["event"] for e in await engine.journal(eid) if e.kind is EntryKind.EVENT]
        assert events == ["order.placed", "charge.succeeded", "ship.requested", "order.shipped"]
        assert state["status"] == "shipped" and (await engine.decider_state(eid))[0] == 4


async def test_a_finished_order_is_archived_with_its_state_and_verify_tells_a_changed_evolve(
        db_url: str, tmp_path: Any) -> None:
    clock = Clock()
    engine = await flowli.connect(db_url, make_registry(), clock=clock, bucket=str(tmp_path / "bucket"),
                                  retention=timedelta(days=30), **FAST)
    committed: list[str] = []
    engine.observe(lambda t, result: committed.append(t.kind) if t.workflow == "order" else None)
    async with engine, engine.worker():
        eid = await shipped_order(engine)
        assert {"start", "decide", "answer", "signal"} <= set(committed)  # observers see its commits
        state = await folds(engine, eid)
        await drain(engine)

        changed = Registry()  # a new evolve that forgets the receipt: its fold differs
        changed.decider("order", version="1", initial=INITIAL,
                        evolve=lambda s, e: {k: v for k, v in evolve(s, e).items() if k != "receipt"})(decide)
        [checked] = [c for c in (await engine.verify(changed)).checked if c.eid == eid]
        assert not checked.compatible and checked.difference is not None
        assert "another state" in checked.difference.detail

        journal = await engine.journal(eid)
        await clock.advance(timedelta(days=30, seconds=1))
        assert await engine.retain() == 2  # the order and its child
        assert await engine.statuses([eid]) == []
        assert await engine.journal(eid) == journal  # from the archive
        archived = await engine.archived(eid)
        assert archived is not None and archived["decider_state"] == {"version": 4, "state": state}
        assert await store_of(engine).read_state(eid) is None  # the live state went with the execution
        [row] = [r for r in (await engine.list()).items if r.eid == eid]
        assert row.status is Status.COMPLETED


def batch_decide(state: dict[str, Any], command: Any) -> tuple[list[Event], list[Any]]:
    """A decider whose children are deciders: one order per input, ended when all have."""
    match command:
        case Start(input=orders):
            return [Event("batch.started", [o["id"] for o in orders])], [Child(o["id"], "order", (o,)) for o in orders]
        case ChildEnded(key=key, status=status, result=result):
            events = [Event("order.ended", {"key": key, "status": status, "result": result})]
            if len(state["ended"]) + 1 < len(state["orders"]):
                return events, []
            return events, [Complete(sorted([*state["ended"], key]))]
    return [], []


def batch_evolve(state: dict[str, Any], event: Event) -> dict[str, Any]:
    if event.kind == "batch.started":
        return {**state, "orders": event.data}
    return {**state, "ended": [*state["ended"], event.data["key"]]}


async def test_a_workflow_and_a_decider_start_deciders_as_children(db_url: str, tmp_path: Any) -> None:
    registry = make_registry()
    registry.decider("batch", initial={"orders": [], "ended": []}, evolve=batch_evolve)(batch_decide)

    @registry.workflow("checkout")
    async def checkout(ctx: Context, order: dict[str, Any]) -> Any:
        return await ctx.child("order", order)

    engine = await flowli.connect(db_url, registry, bucket=str(tmp_path / "bucket"), **FAST)
    async with engine, engine.worker():
        parent = await engine.start("checkout", {"id": "o-9", "amount": 1})
        batch = await engine.start("batch", [{"id": "o-7", "amount": 2}, {"id": "o-8", "amount": 3}])
        for _ in range(3):  # each order's charge, answered; then each order is shipped
            consumer, task = await take(engine)
            await consumer.answer(task, f"r-{task.payload['id']}")
            await state_is(engine, task.eid, "charged")
            await engine.signal(task.eid, "ship", "Dock 4")
        assert await engine.result(parent, timeout=10) == {"order": "o-9", "parcel": "parcel-o-9-Dock 4"}
        assert await engine.result(batch, timeout=10) == ["o-7", "o-8"]
        batch_decider = engine.registry.decider_of("batch")
        assert batch_decider is not None
        journal = await engine.journal(batch)
        events = [Event(e.value["event"], e.value["data"]) for e in journal if e.kind is EntryKind.EVENT]
        assert batch_decider.fold(events) == (await engine.decider_state(batch))[1]


async def test_explain_tells_what_an_order_has_open_and_a_replay_is_refused(db_url: str, tmp_path: Any) -> None:
    clock = Clock()
    engine = await connect(db_url, tmp_path, clock)
    async with engine, engine.worker():
        eid = await engine.start("order", ORDER)
        await state_is(engine, eid, "charging")
        explained = await engine.explain(eid)
        assert [(w["kind"], w["fid"], w["queue"]) for w in explained.waits] == [("delegate", "decider/charge", "payments")]
        consumer, task = await take(engine)
        await consumer.fail(task, "DECLINED", "no")
        await state_is(engine, eid, "waiting_retry")
        assert [(w["kind"], w["fid"]) for w in (await engine.explain(eid)).waits] == [("timer", "decider/timer:retry")]
        with pytest.raises(flowli.domain.OperationRefused, match="never replayed"):
            await engine.migrate(eid, "1")
        with pytest.raises(flowli.domain.ExecutionStateError, match="it must be failed"):
            await engine.retry(eid)  # a failed decider is retried with the command Retried (test_decider_retry)


async def test_a_traced_order_writes_a_span_per_command_its_delegate_and_its_end(db_url: str, tmp_path: Any) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    engine = await flowli.connect(db_url, make_registry(), bucket=str(tmp_path / "bucket"), tracer_provider=provider,
                                  **FAST)
    async with engine, engine.worker():
        eid = await shipped_order(engine)
    spans = [s for s in exporter.get_finished_spans() if (s.attributes or {}).get("flowli.eid") == eid]
    names = sorted(s.name for s in spans)
    assert names == ["decide order"] * 4 + ["delegate payments", "workflow order"]
    [execution] = [s for s in spans if s.name == "workflow order"]
    assert execution.context is not None and {s.context.trace_id for s in spans if s.context} == {execution.context.trace_id}
    assert all(s.parent is not None and s.parent.span_id == execution.context.span_id for s in spans if s is not execution)
    assert sorted((s.attributes or {}).get("flowli.command") for s in spans if s.name == "decide order") == \
        ["Answered", "ChildEnded", "Signal", "Start"]


@pytest.mark.parametrize("channel", ["boom", "end_and_more"])
async def test_a_decider_that_raises_or_decides_the_impossible_fails_its_execution(
        db_url: str, tmp_path: Any, channel: str) -> None:
    engine = await connect(db_url, tmp_path)
    async with engine, engine.worker():
        eid = await engine.start("order", ORDER)
        await state_is(engine, eid, "charging")
        version, before = await engine.decider_state(eid)
        await engine.signal(eid, channel, None)
        # its error, as its own (built-in) type
        with pytest.raises(RuntimeError if channel == "boom" else ValueError,
                           match="defect" if channel == "boom" else "an end comes alone"):
            await engine.result(eid, timeout=10)
        assert await engine.decider_state(eid) == (version + 1, before)  # the command counted, no event
        assert await engine.timers(eid) == [] and await folds(engine, eid) == before
        assert [t.state for t in await engine.tasks(eid=eid, include_acked=True)
                if t.kind.value == "DELEGATE"] == ["withdrawn"]


def job_decide(state: dict[str, Any], command: Any) -> tuple[list[Event], list[Any]]:
    """A job with a deadline per attempt: past it, the attempt is withdrawn and the next one sent."""
    match command:
        case Start():
            return [Event("job.sent", 1)], [Delegate("job", "jobs", attempt=1), Timer("deadline", after=RETRY)]
        case TimerFired(key="deadline"):
            return [Event("job.sent", state["attempt"] + 1)], [
                Withdraw("job", state["attempt"]), Delegate("job", "jobs", attempt=state["attempt"] + 1)]
        case Answered(key="job", attempt=attempt, value=value) if attempt == state["attempt"]:
            return [Event("job.done", value)], [Complete(value)]
    return [], []


async def test_a_deadline_withdraws_an_attempt_and_its_late_answer_is_stale(db_url: str, tmp_path: Any) -> None:
    registry = Registry()
    registry.decider("job", initial={"attempt": 0},
                     evolve=lambda s, e: {"attempt": e.data} if e.kind == "job.sent" else {**s, "done": e.data})(job_decide)
    clock = Clock()
    engine = await flowli.connect(db_url, registry, clock=clock, bucket=str(tmp_path / "bucket"), **FAST)
    async with engine, engine.worker():
        eid = await engine.start("job", None)
        consumer = engine.consumer("jobs", name="slow", lease=timedelta(minutes=5))
        [first] = await consumer.dequeue(wait=5)
        await clock.advance(RETRY)  # the deadline: attempt 1 withdrawn, attempt 2 sent
        [second] = await consumer.dequeue(wait=5)
        assert (first.attempt, second.attempt) == (1, 2)
        with pytest.raises(StaleAnswer):
            await consumer.answer(first, "late")
        await consumer.answer(second, "done")
        assert await engine.result(eid, timeout=10) == "done"
        decider = engine.registry.decider_of("job")
        assert decider is not None
        events = [Event(e.value["event"], e.value["data"]) for e in await engine.journal(eid) if e.kind is EntryKind.EVENT]
        assert decider.fold(events) == (await engine.decider_state(eid))[1] == {"attempt": 2, "done": "done"}
