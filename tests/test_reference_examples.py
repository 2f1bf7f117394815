"""The Python examples of reference/engine-concepts.md run as written, against flowli.

The code between the ``# --- reference`` marks is the reference's text, with the step functions it
leaves undefined (fetch, fetch_invoice, call_bank, a, b, other_workflow) defined around it.

Left out: the evidence example (``from flowli.log import get_logger``): flowli.log does not exist yet.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

import flowli
from flowli import Context, Registry
from flowli.domain import EntryKind, Status
from flowli.testing import Clock

pytestmark = pytest.mark.integration

FAST: dict[str, Any] = {
    "lease_ttl": timedelta(seconds=5),
    "poll_interval": 0.02,
    "sweep_interval": 0.05,
    "repair_grace": timedelta(0),
}


@contextlib.asynccontextmanager
async def running(url: str, registry: Registry, clock: Clock | None = None) -> AsyncIterator[flowli.Engine]:
    engine = await flowli.connect(url, registry, clock=clock, **FAST)
    async with engine:
        async with engine.worker(concurrency=16):
            yield engine


async def until(engine: flowli.Engine, eid: str, status: Status, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while (await engine.status(eid)).status is not status:
        assert loop.time() < end, f"execution {eid} is not {status} after {timeout} s"
        await asyncio.sleep(0.01)


async def until_failed(engine: flowli.Engine, eid: str, n: int, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while sum(e.kind is EntryKind.FRAME_FAILED for e in await engine.journal(eid)) < n:
        assert loop.time() < end, f"fewer than {n} failed attempts after {timeout} s"
        await asyncio.sleep(0.01)


def outcomes(journal: list[Any], fid: str) -> list[tuple[str, int | None]]:
    return [(str(e.kind), e.attempt) for e in journal if e.fid == fid]


# ---- Workflow and execution ---------------------------------------------------------------


async def test_invoice_approval_registration_and_the_core_contract(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # "sqlite:///flowli.db" is relative to the working directory
    registry = Registry()

    # --- reference
    @registry.workflow("invoice_approval", version="3")
    async def invoice_approval(ctx: Context, invoice_id: str) -> str: ...
    # --- reference (DESIGN.md, the core contract)
    engine = await flowli.connect("sqlite:///flowli.db", registry)    # or "postgresql://…"
    async with engine:                               # closes connections on exit
        async with engine.worker(concurrency=64):    # a worker (and sweeper) in the background
            eid = await engine.start("invoice_approval", "inv-42", by="alice@example.com")
            value = await engine.result(eid, timeout=30)
    # --- end

        record = await engine.status(eid)
        assert (record.workflow, record.version, record.status) == ("invoice_approval", "3", Status.COMPLETED)
        assert value is None  # the body is `...`
        started = (await engine.journal(eid))[0]
        assert started.kind is EntryKind.EXECUTION_STARTED and started.provenance.actor.id == "alice@example.com"
    assert (tmp_path / "flowli.db").exists()


# ---- Frame ids ----------------------------------------------------------------------------


def fetch(n: int) -> int:
    return n * 10


async def test_frame_ids_of_three_fetches(tmp_path):
    registry = Registry()

    @registry.workflow("fetches")
    async def fetches(ctx: Context) -> None:
        # --- reference
        await ctx.step(fetch, 1)                 # root/fetch#0
        await ctx.step(fetch, 2)                 # root/fetch#1
        await ctx.step(fetch, 3, key="orders")   # root/fetch:orders
        # --- end

    async with running(f"sqlite:///{tmp_path}/x.db", registry) as engine:
        eid = await engine.start("fetches")
        await engine.result(eid, timeout=10)
        journal = await engine.journal(eid)
    memo = {e.fid: e.value for e in journal if e.kind is EntryKind.FRAME_COMPLETED}
    assert memo == {"root/fetch#0": 10, "root/fetch#1": 20, "root/fetch:orders": 30}


# ---- Step -----------------------------------------------------------------------------------


def fetch_invoice(invoice_id: str) -> dict[str, Any]:
    return {"id": invoice_id, "amount": 120}


async def test_step_appends_started_runs_and_appends_completed_with_the_value(tmp_path):
    registry = Registry()

    @registry.workflow("invoice")
    async def invoice_wf(ctx: Context, invoice_id: str) -> dict[str, Any]:
        # --- reference
        invoice = await ctx.step(fetch_invoice, invoice_id)
        # --- end
        return invoice

    async with running(f"sqlite:///{tmp_path}/x.db", registry) as engine:
        eid = await engine.start("invoice", "inv-42")
        assert await engine.result(eid, timeout=10) == {"id": "inv-42", "amount": 120}
        journal = await engine.journal(eid)
    fid = "root/fetch_invoice#0"
    assert outcomes(journal, fid) == [("frame.started", 1), ("frame.completed", 1)]
    assert [e.value for e in journal if e.fid == fid][-1] == {"id": "inv-42", "amount": 120}


# ---- Attempt, failure and retry ---------------------------------------------------------------

bank_calls: list[dict[str, Any]] = []


def call_bank(payment: dict[str, Any]) -> str:
    bank_calls.append(payment)
    if len(bank_calls) < 3:
        raise ConnectionError("bank unreachable")
    return "paid"


async def test_retry_policy_on_call_bank_waits_2_then_4_seconds(tmp_path):
    bank_calls.clear()
    registry = Registry()

    @registry.workflow("pay")
    async def pay(ctx: Context, payment: dict[str, Any]) -> str:
        # --- reference
        from flowli.domain import RetryPolicy

        return await ctx.step(call_bank, payment,
                              retry=RetryPolicy(max_attempts=5, backoff=timedelta(seconds=2),
                                                backoff_factor=2.0, max_backoff=timedelta(minutes=5)))
        # --- end (with `return` added)

    clock = Clock()
    async with running(f"sqlite:///{tmp_path}/x.db", registry, clock) as engine:
        eid = await engine.start("pay", {"to": "acme", "amount": 120})
        for failed, delay in ((1, 2), (2, 4)):
            await until_failed(engine, eid, failed)
            await until(engine, eid, Status.SUSPENDED)
            timers = await engine.timers(eid)
            assert [(t.fid, t.at - clock.now()) for t in timers] == [("root/call_bank#0", timedelta(seconds=delay))]
            assert len(bank_calls) == failed
            await clock.advance(timedelta(seconds=delay))
        assert await engine.result(eid, timeout=10) == "paid"
        journal = await engine.journal(eid)
    assert outcomes(journal, "root/call_bank#0") == [
        ("frame.started", 1), ("frame.failed", 1),
        ("frame.started", 2), ("frame.failed", 2),
        ("frame.started", 3), ("frame.completed", 3),
    ]
    assert len(bank_calls) == 3


# ---- Waits ------------------------------------------------------------------------------------


def a() -> str:
    return "a"


def b() -> str:
    return "b"


async def test_gather_suspends_until_x_is_signalled(tmp_path):
    registry = Registry()

    @registry.workflow("g")
    async def g(ctx: Context) -> list[Any]:
        # --- reference
        results = await ctx.gather(ctx.step(a), ctx.step(b), ctx.receive("x"))
        # --- end
        return results

    async with running(f"sqlite:///{tmp_path}/x.db", registry) as engine:
        eid = await engine.start("g")
        await until(engine, eid, Status.SUSPENDED)
        journal = await engine.journal(eid)
        memo = {e.fid: e.value for e in journal if e.kind is EntryKind.FRAME_COMPLETED}
        assert memo == {"root/a#0": "a", "root/b#0": "b"}  # the steps ran; the receive waits
        assert journal[-1].kind is EntryKind.EXECUTION_SUSPENDED
        await engine.signal(eid, "x", "go", by="alice@example.com")
        assert await engine.result(eid, timeout=10) == ["a", "b", "go"]


async def test_the_waits_table_sleep_a_day_and_a_child(tmp_path):
    registry = Registry()

    @registry.workflow("other_workflow")
    async def other_workflow(ctx: Context, x: int) -> int:
        return x + 1

    @registry.workflow("waits")
    async def waits(ctx: Context, x: int) -> int:
        # --- reference
        await ctx.sleep(timedelta(days=1))
        return await ctx.child(other_workflow, x)
        # --- end (with `return` added)

    clock = Clock()
    async with running(f"sqlite:///{tmp_path}/x.db", registry, clock) as engine:
        eid = await engine.start("waits", 41)
        await until(engine, eid, Status.SUSPENDED)
        assert [t.at - clock.now() for t in await engine.timers(eid)] == [timedelta(days=1)]
        await clock.advance(timedelta(days=1))  # the sweeper resumes it
        assert await engine.result(eid, timeout=10) == 42


# ---- Channel and message ------------------------------------------------------------------------


async def test_engine_signal_sends_one_message_and_resumes(tmp_path):
    registry = Registry()

    @registry.workflow("payee")
    async def payee(ctx: Context) -> Any:
        return await ctx.receive("payments")

    async with running(f"sqlite:///{tmp_path}/x.db", registry) as engine:
        eid = await engine.start("payee")
        await until(engine, eid, Status.SUSPENDED)
        channel, payload = "payments", {"amount": 120}
        # --- reference
        await engine.signal(eid, channel, payload, by="alice@example.com")
        # --- end
        assert await engine.result(eid, timeout=10) == {"amount": 120}
        [message] = await engine.messages(eid, "payments")
        assert message.provenance.actor.id == "alice@example.com"


async def test_engine_broadcast_resumes_every_waiter(tmp_path):
    registry = Registry()

    @registry.workflow("listener")
    async def listener(ctx: Context) -> Any:
        return await ctx.receive("payments", scope="global")

    async with running(f"sqlite:///{tmp_path}/x.db", registry) as engine:
        eids = [await engine.start("listener") for _ in range(3)]
        for eid in eids:
            await until(engine, eid, Status.SUSPENDED)
        channel, payload = "payments", {"amount": 120}
        # --- reference
        await engine.broadcast(channel, payload, by="alice@example.com")
        # --- end
        assert [await engine.result(eid, timeout=10) for eid in eids] == [{"amount": 120}] * 3
