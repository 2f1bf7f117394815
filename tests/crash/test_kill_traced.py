"""Tracing through a crash: worker A (its spans written to a file as they end) is SIGKILLed in
the middle of a step; worker B (this process, the SDK's in-memory exporter) recovers the
execution and replays it. Together they give exactly one span per step attempt that ran to an
outcome: B makes none for the steps A had journaled, and every span id is derived from the eid
and the journal, so nothing is duplicated."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import flowli
from flowli.domain import EntryKind

from . import Workers, lines, until
from .app import BEGUN, RELEASE, registry

pytestmark = pytest.mark.e2e

NAMES = ["s0", "s1", "s2", "s3"]
HELD = "s2"


async def test_a_crash_and_replay_give_one_span_per_step_attempt(tmp_path: Path, workers: Workers) -> None:
    spans_a = tmp_path / "spans-a.jsonl"
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    engine = await flowli.connect(
        workers.url, registry, tracer_provider=provider, lease_ttl=timedelta(seconds=1.5),
        task_ttl=timedelta(seconds=1.5), sweep_interval=0.2, poll_interval=0.05, repair_grace=timedelta(seconds=1),
        bucket=str(tmp_path / "bucket"))
    async with engine:
        a = workers.spawn("a", "--spans", str(spans_a))
        eid = await engine.start("crash.steps", str(tmp_path), NAMES, HELD)
        await until(lambda: [eid, HELD, str(a.pid)] in lines(tmp_path / BEGUN), 20, f"step {HELD} to begin in worker A")
        workers.kill("a")
        (tmp_path / RELEASE).touch()
        async with engine.worker(concurrency=4):  # worker B: recovers the execution once A's lease expires
            await engine.result(eid, timeout=30)
        journal = await engine.journal(eid)

    from_a: list[dict[str, Any]] = [json.loads(line) for line in spans_a.read_text().splitlines()]
    from_b = exporter.get_finished_spans()
    step_spans = [(s["attributes"]["flowli.fid"], s["attributes"]["flowli.attempt"], s["span_id"], "a")
                  for s in from_a if s["name"].startswith("step ")]
    step_spans += [(s.attributes["flowli.fid"], s.attributes["flowli.attempt"], s.context.span_id, "b")
                   for s in from_b if s.name.startswith("step ")]

    outcomes = {(e.fid, e.attempt) for e in journal if e.kind in (EntryKind.FRAME_COMPLETED, EntryKind.FRAME_FAILED)}
    assert Counter((fid, attempt) for fid, attempt, _, _ in step_spans) == {o: 1 for o in outcomes}, step_spans
    assert len({span_id for _, _, span_id, _ in step_spans}) == len(step_spans)
    ran_by = {fid: who for fid, _, _, who in step_spans}
    assert ran_by == {"root/effect:s0": "a", "root/effect:s1": "a", "root/hold:s2": "b", "root/effect:s3": "b"}

    # one trace, the eid's; A's activation ended without a span (it was killed), B's has one
    assert {s["trace_id"] for s in from_a} | {s.context.trace_id for s in from_b} == {uuid.UUID(eid).int}
    assert not [s for s in from_a if s["name"].startswith("activation ")]
    [b_activation] = [s for s in from_b if s.name == "activation crash.steps"]
    assert {s.parent.span_id for s in from_b if s.name.startswith("step ")} == {b_activation.context.span_id}
    assert b_activation.attributes["flowli.journal_position"] > 1  # it started from A's entries
    [run] = [s for s in from_b if s.name == "workflow crash.steps"]
    assert b_activation.parent.span_id == run.context.span_id
