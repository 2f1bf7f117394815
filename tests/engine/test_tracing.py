"""OpenTelemetry tracing, read with the SDK's in-memory exporter: a span per activation and per
step attempt with the execution's attributes, ids derived from the eid and the journal (a
replay adds no span for what the journal holds), the execution's span under the caller's, and
nothing at all without a tracer provider."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from flowli import Context, Registry
from flowli.domain import EntryKind, RetryPolicy
from flowli.engine._tracing import span_id_of  # private: the span ids' derivation, which the spans must match

from .conftest import wait_status

pytestmark = pytest.mark.integration

SEEN: dict[str, Any] = {}


def traced() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def double(n: int) -> int:
    SEEN["double"] = trace.get_current_span().get_span_context()
    return n * 2


def flaky_once(n: int) -> int:
    SEEN["flaky"] = SEEN.get("flaky", 0) + 1
    if SEEN["flaky"] == 1:
        raise ConnectionError("the upstream hung up")
    return n + 1


def registry() -> Registry:
    reg = Registry()

    @reg.workflow("traced.order", version="3")
    async def order(ctx: Context, n: int) -> int:
        a = await ctx.step(double, n)
        return await ctx.step(flaky_once, a, retry=RetryPolicy(max_attempts=2, backoff=timedelta(0)))

    @reg.workflow("traced.wait")
    async def wait(ctx: Context, n: int) -> int:
        a = await ctx.step(double, n)
        more = await ctx.receive("more")
        return await ctx.step(double, a + more)

    @reg.workflow("traced.clerk")
    async def clerk(ctx: Context, note: str) -> Any:
        return await ctx.delegate("clerks", {"note": note})

    @reg.workflow("traced.parent")
    async def parent(ctx: Context, n: int) -> int:
        result: int = await ctx.child("traced.order", n)
        return result

    return reg


def by_name(spans: Any, prefix: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


async def test_a_span_per_activation_and_step_attempt_with_ids_from_the_eid(open_engine):
    SEEN.clear()
    provider, exporter = traced()
    async with open_engine(registry(), tracer_provider=provider) as engine:
        eid = await engine.start("traced.order", 5)
        assert await engine.result(eid, timeout=10) == 11
        journal = await engine.journal(eid)
    spans = exporter.get_finished_spans()
    assert {s.context.trace_id for s in spans} == {uuid.UUID(eid).int}  # one trace, the eid's

    [run] = by_name(spans, "workflow ")
    assert run.name == "workflow traced.order" and run.parent is None
    assert run.context.span_id == span_id_of("execution", eid)
    assert run.attributes["flowli.status"] == "completed"

    activations = by_name(spans, "activation ")
    assert activations and all(a.parent.span_id == run.context.span_id for a in activations)
    steps = sorted(by_name(spans, "step "), key=lambda s: s.start_time)
    assert [(s.name, s.attributes["flowli.attempt"]) for s in steps] == \
        [("step double", 1), ("step flaky_once", 1), ("step flaky_once", 2)]
    for s in steps:
        assert s.attributes["flowli.eid"] == eid and s.attributes["flowli.workflow"] == "traced.order"
        assert s.attributes["flowli.version"] == "3"
        [parent] = [a for a in activations if a.context.span_id == s.parent.span_id]
        assert s.context.span_id == span_id_of("step", eid, s.attributes["flowli.fid"], s.attributes["flowli.attempt"],
                                               parent.attributes["flowli.epoch"])
    # one span per attempt the journal holds, the failed one with the error
    attempts = {(e.fid, e.attempt) for e in journal if e.kind in (EntryKind.FRAME_COMPLETED, EntryKind.FRAME_FAILED)}
    assert {(s.attributes["flowli.fid"], s.attributes["flowli.attempt"]) for s in steps} == attempts
    assert steps[1].status.status_code is StatusCode.ERROR and steps[1].events[0].name == "exception"
    assert steps[2].status.status_code is not StatusCode.ERROR
    # the step's span is current while its function runs (the user's own spans nest under it)
    assert SEEN["double"].span_id == steps[0].context.span_id


async def test_a_replay_adds_no_span_for_what_the_journal_holds(open_engine):
    provider, exporter = traced()
    async with open_engine(registry(), tracer_provider=provider) as engine:
        eid = await engine.start("traced.wait", 1)
        await wait_status(engine, eid, "suspended")
        await engine.signal(eid, "more", 10)
        assert await engine.result(eid, timeout=10) == 24
    spans = exporter.get_finished_spans()
    activations = by_name(spans, "activation ")
    assert len(activations) == 2  # before and after the wait; the second replayed the first step
    assert len({a.context.span_id for a in activations}) == 2
    assert [a.attributes["flowli.status"] for a in activations] == ["suspended", "completed"]
    steps = by_name(spans, "step ")
    assert sorted(s.attributes["flowli.fid"] for s in steps) == ["root/double#0", "root/double#1"]
    assert steps[0].parent.span_id == activations[0].context.span_id
    assert steps[1].parent.span_id == activations[1].context.span_id
    assert len({s.context.span_id for s in spans}) == len(spans)  # no span twice


async def test_the_execution_joins_the_callers_trace_and_a_child_its_parents(open_engine):
    provider, exporter = traced()
    tracer = provider.get_tracer("the-caller")
    async with open_engine(registry(), tracer_provider=provider) as engine:
        with tracer.start_as_current_span("checkout") as caller:
            eid = await engine.start("traced.parent", 2)
        assert await engine.result(eid, timeout=10) == 5
        given = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        other = await engine.start("traced.order", 1, traceparent=given)
        await engine.result(other, timeout=10)
    spans = exporter.get_finished_spans()
    caller_ctx = caller.get_span_context()
    [parent_run] = [s for s in spans if s.name == "workflow traced.parent"]
    assert parent_run.parent.span_id == caller_ctx.span_id
    assert parent_run.context.trace_id == caller_ctx.trace_id
    [child_run] = [s for s in spans if s.name == "workflow traced.order" and s.context.trace_id == caller_ctx.trace_id]
    parent_activations = {s.context.span_id for s in spans if s.name == "activation traced.parent"}
    assert child_run.parent.span_id in parent_activations  # started by one of its parent's activations
    [given_run] = [s for s in spans if s.attributes.get("flowli.eid") == other and s.name.startswith("workflow")]
    assert f"{given_run.context.trace_id:032x}" == "0af7651916cd43dd8448eb211c80319c"
    assert given_run.parent.span_id == 0xb7ad6b7169203331


async def test_without_a_tracer_provider_nothing_is_traced(open_engine):
    SEEN.clear()
    async with open_engine(registry()) as engine:
        # OpenTelemetry's global provider is not set in the tests: tracing is off, and a caller's
        # span, which an engine that traces records in the started entry, is not recorded
        caller = trace.NonRecordingSpan(trace.SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331,
                                                          is_remote=False, trace_flags=trace.TraceFlags(1)))
        with trace.use_span(caller):
            probe = await engine.start("traced.order", 1)
        assert await engine.result(probe, timeout=10) == 3
        assert "trace" not in (await engine.journal(probe))[0].value
        eid = await engine.start("traced.order", 5)
        assert await engine.result(eid, timeout=10) == 11
        started = (await engine.journal(eid))[0]
    assert not SEEN["double"].is_valid  # no span was current in the step
    assert "trace" not in started.value


async def test_a_delegate_attempt_has_a_span_whether_answered_or_expired(open_engine):
    provider, exporter = traced()
    async with open_engine(registry(), tracer_provider=provider) as engine:
        eid = await engine.start("traced.clerk", "sign this")
        sleepy = engine.consumer("clerks", "sleepy", lease=timedelta(milliseconds=200))
        [first] = await sleepy.dequeue(1, wait=5)  # and never answers: its lease expires
        clerk = engine.consumer("clerks", "carol")
        [second] = await clerk.dequeue(1, wait=10)
        assert second.attempt == 2
        await clerk.answer(second, {"signed": True}, by="carol@example.com")
        assert await engine.result(eid, timeout=10) == {"signed": True}
    spans = exporter.get_finished_spans()
    [run] = by_name(spans, "workflow ")
    delegates = sorted(by_name(spans, "delegate "), key=lambda s: s.attributes["flowli.attempt"])
    assert [(d.name, d.attributes["flowli.attempt"]) for d in delegates] == [("delegate clerks", 1), ("delegate clerks", 2)]
    assert all(d.parent.span_id == run.context.span_id for d in delegates)
    assert delegates[0].status.status_code is StatusCode.ERROR and "expired" in delegates[0].status.description
    assert delegates[1].status.status_code is not StatusCode.ERROR
    assert delegates[1].attributes["flowli.answered_by"] == "human:carol@example.com"
    # the task's traceparent (what a worker gets) names the attempt's span
    from flowli.engine import task_traceparent

    assert task_traceparent(first) == f"00-{run.context.trace_id:032x}-{delegates[0].context.span_id:016x}-01"


async def test_a_retried_run_ends_under_a_span_of_its_own(open_engine):
    SEEN.clear()
    provider, exporter = traced()
    reg = registry()

    @reg.workflow("traced.fails_once")
    async def fails_once(ctx: Context, n: int) -> int:
        return await ctx.step(flaky_once, n)  # no retry policy: the first attempt fails the run

    async with open_engine(reg, tracer_provider=provider) as engine:
        eid = await engine.start("traced.fails_once", 1)
        await wait_status(engine, eid, "failed")
        await engine.retry(eid, by="olga@example.com")
        assert await engine.result(eid, timeout=10) == 2
    runs = by_name(exporter.get_finished_spans(), "workflow ")
    assert [r.attributes["flowli.status"] for r in runs] == ["failed", "completed"]
    assert len({r.context.span_id for r in runs}) == 2  # one span each time it ended
    later = [a for a in by_name(exporter.get_finished_spans(), "activation ") if a.start_time > runs[0].end_time]
    assert later and {a.parent.span_id for a in later} == {runs[1].context.span_id}


async def test_a_step_cut_off_by_a_stop_ends_its_span_with_an_error_and_runs_again_under_another(open_engine, tmp_path):
    import asyncio

    provider, exporter = traced()
    reg = Registry()
    release = tmp_path / "release"
    began = asyncio.Event()

    async def slow() -> str:
        began.set()
        while not release.exists():
            await asyncio.sleep(0.02)
        return "done"

    @reg.workflow("traced.slow")
    async def slow_wf(ctx: Context) -> str:
        return await ctx.step(slow)

    async with open_engine(reg, tracer_provider=provider, worker=False, grace=0.2) as engine:
        eid = await engine.start("traced.slow")
        async with engine.worker(concurrency=2):
            await asyncio.wait_for(began.wait(), 20)  # the step runs (its span is open) when the stop comes
        release.touch()  # the next worker's attempt returns at once
        async with engine.worker(concurrency=2):
            assert await engine.result(eid, timeout=10) == "done"
    steps = sorted(by_name(exporter.get_finished_spans(), "step "), key=lambda s: s.start_time)
    assert len(steps) == 2 and steps[0].context.span_id != steps[1].context.span_id
    assert steps[0].status.status_code is StatusCode.ERROR  # cut off, not a success
    assert steps[1].status.status_code is not StatusCode.ERROR


async def test_many_engines_on_one_provider_and_a_malformed_stored_trace(open_engine):
    provider, exporter = traced()
    for _ in range(30):  # the SDK hands every engine the same tracer: its id generator is wrapped once
        async with open_engine(registry(), tracer_provider=provider, worker=False):
            pass
    generator = provider.get_tracer("flowli").id_generator
    assert type(generator).__name__ == "_Ids" and type(generator.fallback).__name__ != "_Ids"
    async with open_engine(registry(), tracer_provider=provider) as engine:
        # a caller's unsampled trace stays unsampled; a traceparent that is not one is ignored
        unsampled = await engine.start("traced.order", 1, traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00")
        garbage = await engine.start("traced.order", 2, traceparent="00-zz-nope-01")
        assert await engine.result(unsampled, timeout=10) == 3 and await engine.result(garbage, timeout=10) == 5
        assert (await engine.journal(garbage))[0].value.get("trace") is None
    spans = exporter.get_finished_spans()
    assert not [s for s in spans if s.attributes.get("flowli.eid") == unsampled]
    assert {s.context.trace_id for s in spans if s.attributes.get("flowli.eid") == garbage} == {uuid.UUID(garbage).int}


def test_a_stored_trace_that_is_not_one_falls_back_to_the_eid():
    from flowli.engine._tracing import execution_context  # private: the fallback for stored data no engine writes

    eid = "01a2341e-b948-7353-9dd2-98d4497b1650"
    for bad in ({"trace": {"trace_id": "xyz", "parent_id": 7}}, {"trace": "00-bad"}, {"trace": None}, None, []):
        own, parent = execution_context(eid, bad)
        assert own.trace_id == uuid.UUID(eid).int and parent is None, bad
