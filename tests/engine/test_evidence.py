"""Evidence: attempt logs and attachments, keyed by attempt, best effort, never written on replay."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

import flowli
from flowli import Context, Registry
from flowli.domain import RetryPolicy
from flowli.log import attach, get_logger

from .conftest import wait_status

pytestmark = pytest.mark.integration

# --- reference (engine-concepts.md, "Evidence") ---
log = get_logger("myapp")


def fetch_invoice(invoice_id: str) -> dict:
    log.info("fetched", invoice=invoice_id, rows=3)
    return {"id": invoice_id}
# --- end of reference ---

CALLS: list[int] = []


def flaky_upload(doc: str) -> str:
    CALLS.append(1)
    log.warning("uploading", doc=doc, try_=len(CALLS))
    attach("request.txt", f"PUT /docs/{doc} try {len(CALLS)}")
    if len(CALLS) == 1:
        raise ConnectionError("reset by peer")
    return "stored"


async def test_one_log_per_attempt_and_none_on_replay(open_engine, tmp_path):
    registry = Registry()
    CALLS.clear()

    @registry.workflow("ev")
    async def ev(ctx: Context, invoice_id: str) -> str:
        invoice = await ctx.step(fetch_invoice, invoice_id)
        log.info("in the workflow: not evidence")  # workflow code runs again on every replay
        stored = await ctx.step(flaky_upload, invoice["id"], retry=RetryPolicy(max_attempts=2, backoff=timedelta(0)))
        await ctx.receive("go")
        return stored

    bucket = tmp_path / "bucket"
    async with open_engine(registry, bucket=str(bucket)) as engine:
        eid = await engine.start("ev", "inv-42")
        await wait_status(engine, eid, "suspended")
        first = await engine.evidence(eid)
        await engine.signal(eid, "go", None)  # a replay: both steps are memoized
        assert await engine.result(eid, timeout=30) == "stored"
        after = await engine.evidence(eid)
    assert after == first  # the replay wrote nothing
    events = [(e.fid, e.attempt, e.event["event"]) for e in first if e.event]
    assert events == [
        ("root/fetch_invoice#0", 1, "fetched"),
        ("root/flaky_upload#0", 1, "uploading"),
        ("root/flaky_upload#0", 2, "uploading"),
    ]
    fetched = next(e.event for e in first if e.event and e.event["event"] == "fetched")
    assert fetched["eid"] == eid and fetched["invoice"] == "inv-42" and fetched["rows"] == 3 and fetched["level"] == "info"
    attachments = [(e.attempt, Path(e.attachment).read_text()) for e in first if e.attachment]
    assert attachments == [(1, "PUT /docs/inv-42 try 1"), (2, "PUT /docs/inv-42 try 2")]


async def test_a_frame_never_fails_because_evidence_could_not_be_written(open_engine, tmp_path):
    registry = Registry()

    @registry.workflow("ev2")
    async def ev2(ctx: Context) -> dict:
        return await ctx.step(fetch_invoice, "inv-1")

    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the bucket directory should be")
    async with open_engine(registry, bucket=str(blocked)) as engine:
        eid = await engine.start("ev2")
        assert await engine.result(eid, timeout=30) == {"id": "inv-1"}
        assert await engine.evidence(eid) == []


async def test_the_bucket_sits_beside_a_sqlite_file(tmp_path):
    registry = Registry()

    @registry.workflow("ev3")
    async def ev3(ctx: Context) -> dict:
        return await ctx.step(fetch_invoice, "inv-3")

    engine = await flowli.connect(f"sqlite:///{tmp_path}/app.db", registry)
    async with engine, engine.worker():
        eid = await engine.start("ev3")
        await engine.result(eid, timeout=30)
    assert (tmp_path / "app.db-bucket" / eid).is_dir()


def logs_fields_named_as_flowlis(order: str) -> str:
    log.info("shipping", attempt="the user's own", eid="an order id", fid=7, level="gold", order=order)
    return order


async def test_a_field_named_as_one_of_flowlis_is_kept_beside_it(open_engine, tmp_path):
    registry = Registry()

    @registry.workflow("fields")
    async def fields(ctx: Context) -> str:
        return await ctx.step(logs_fields_named_as_flowlis, "o-1")

    async with open_engine(registry, bucket=str(tmp_path / "bucket")) as engine:
        eid = await engine.start("fields")
        assert await engine.result(eid, timeout=30) == "o-1"
        [written] = [e for e in await engine.evidence(eid) if e.event]
    event = written.event
    assert (event["eid"], event["fid"], event["attempt"], event["level"]) == (eid, "root/logs_fields_named_as_flowlis#0",
                                                                               1, "info")
    assert (event["user.attempt"], event["user.eid"], event["user.fid"], event["user.level"]) == (
        "the user's own", "an order id", 7, "gold")
    assert event["order"] == "o-1"
