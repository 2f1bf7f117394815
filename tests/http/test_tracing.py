"""Tracing across the HTTP worker protocol: ``flowli serve`` (OpenTelemetry configured in its
process, its spans written to a file) and an HttpWorker in this process (the SDK's in-memory
exporter). A pipeline created with a W3C trace id is traced in it; each stage attempt's span is
a child of the pipeline's span; the job carries the attempt's ``traceparent`` and the worker's
handler span is its child."""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from flowli.client import HttpWorker, PipelinesClient

from ..served import application, serving
from .test_pipelines import until_status

pytestmark = pytest.mark.e2e

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

SITECUSTOMIZE = textwrap.dedent('''
    """OpenTelemetry in the flowli serve process of a test: each span a JSON line in a file."""
    import json
    import os

    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    def line(span):
        ctx, parent = span.get_span_context(), span.parent
        return json.dumps({"name": span.name, "trace_id": ctx.trace_id, "span_id": ctx.span_id,
                           "parent_id": parent.span_id if parent else None,
                           "attributes": dict(span.attributes)}) + "\\n"

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(
        ConsoleSpanExporter(out=open(os.environ["FLOWLI_TEST_SPANS"], "a"), formatter=line)))
    trace.set_tracer_provider(provider)
''')


def spans_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_a_stage_span_is_a_child_of_its_pipelines_and_the_handlers_of_the_stages(
        backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    server_spans = tmp_path / "server-spans.jsonl"
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.setenv("FLOWLI_TEST_SPANS", str(server_spans))

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    jobs: list[dict[str, Any]] = []
    current: list[Any] = []

    # a server of its own: OpenTelemetry configured in its process (sitecustomize on its path)
    async with serving(backend, tmp_path) as service:
        _, key, _ = await application(service.db, "billing")
        worker = HttpWorker(service.url, key, "w1", wait_seconds=1, tracer_provider=provider)

        @worker.handler("Validate")
        def validate(job: dict[str, Any]) -> str:
            jobs.append(job)
            current.append(trace.get_current_span().get_span_context())
            return "ok"

        running = asyncio.create_task(worker.run(concurrency=2))
        try:
            async with PipelinesClient(service.url, key) as client:
                created = await client.create({"name": "traced", "traceId": TRACE_ID, "stages": [
                    {"stageName": "one", "stageHandlerName": "Validate", "input": "{}"},
                    {"stageName": "two", "stageHandlerName": "Validate", "input": "{}"}]})
                await until_status(client, created["id"], "Completed")
                untraced = await client.create({"name": "plain", "stages": [
                    {"stageName": "one", "stageHandlerName": "Validate", "input": "{}"}]})
                await until_status(client, untraced["id"], "Completed")
                # the caller's span, as a W3C traceparent header: the pipeline's span is its child
                r = await client.http.post("/pipelines", headers={"traceparent": CALLER}, json={
                    "name": "called", "traceId": TRACE_ID, "stages": [
                        {"stageName": "one", "stageHandlerName": "Validate", "input": "{}"}]})
                called = r.json()
                await until_status(client, called["id"], "Completed")
        finally:
            worker.stop()
            await asyncio.wait_for(running, 30)

    server = spans_of(server_spans)
    in_trace = [s for s in server if f"{s['trace_id']:032x}" == TRACE_ID]
    [pipeline] = [s for s in in_trace if s["name"] == "workflow flowli.pipeline"]
    assert pipeline["parent_id"] is None  # a root in the trace the pipeline was created with
    stages = [s for s in in_trace if s["name"].startswith("delegate ")]
    assert len(stages) == 2 and {s["parent_id"] for s in stages} == {pipeline["span_id"]}
    assert all(s["attributes"]["flowli.eid"] == pipeline["attributes"]["flowli.eid"] for s in stages)
    # a decider: a span per command (no activation, nothing replayed), children of the pipeline's
    commands = [s for s in in_trace if s["name"] == "decide flowli.pipeline"]
    assert commands and {s["parent_id"] for s in commands} == {pipeline["span_id"]}
    assert not [s for s in in_trace if s["name"] == "activation flowli.pipeline"]

    # the job's traceparent is the stage attempt's span; the handler's span is its child, current
    # while the handler ran
    traced_jobs = [j for j in jobs if j["pipelineId"] == created["id"]]
    assert sorted(j["traceparent"] for j in traced_jobs) == \
        sorted(f"00-{TRACE_ID}-{s['span_id']:016x}-01" for s in stages)
    handlers = [s for s in exporter.get_finished_spans() if s.context.trace_id == int(TRACE_ID, 16)]
    assert len(handlers) == 2 and all(h.name == "handler Validate" for h in handlers)
    assert {h.parent.span_id for h in handlers} == {s["span_id"] for s in stages}
    assert {c.span_id for c, j in zip(current, jobs) if j["pipelineId"] == created["id"]} == \
        {h.context.span_id for h in handlers}

    # the header wins over the body's traceId: the caller's trace, under the caller's span
    [under_caller] = [s for s in server if s["name"] == "workflow flowli.pipeline"
                      and f"{s['trace_id']:032x}" == CALLER.split("-")[1]]
    assert under_caller["parent_id"] == int(CALLER.split("-")[2], 16)

    # a pipeline created without a trace id is traced in a trace of its own (its eid's)
    [plain] = [s for s in server if s["name"] == "workflow flowli.pipeline"
               and s["span_id"] not in (pipeline["span_id"], under_caller["span_id"])]
    [plain_job] = [j for j in jobs if j["pipelineId"] == untraced["id"]]
    assert plain_job["traceparent"].split("-")[1] == f"{plain['trace_id']:032x}" != TRACE_ID
