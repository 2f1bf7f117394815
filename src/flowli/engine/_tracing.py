"""OpenTelemetry tracing of executions (the ``opentelemetry-api`` package; any SDK the user
configures).

The spans of one execution:

- ``workflow <name>``: the execution, from its start to its end, written once by the activation
  that ends it (span id derived from the eid). Its parent is the context the execution was
  started in: the caller's current span, a ``traceparent`` given to ``engine.start``, or the
  parent execution's activation for a child.
- ``activation <name>``: one activation, child of the execution's span (span id derived from the
  eid and the journal position the activation starts from).
- ``step <name>``: one attempt of a step frame, child of its activation (span id derived from the
  eid, the frame id and the attempt number), current while the step function runs.
- ``delegate <queue>``: one attempt of a ``ctx.delegate`` frame (a pipeline's stage run by an
  application worker), child of the execution's span, written when the attempt is answered or
  failed. Its context goes to the worker with the job (``traceparent``).

The trace id is the eid's own 128 bits for an execution started outside any trace, else the
trace it was started in. Because every id is derived from the journal, a replay creates no new
span for what the journal already holds, and an attempt run again after a crash has the span id
of the first try. Span ids are set through the tracer's ``id_generator`` where the tracer has
one (the SDK's do); other tracers give their own.

Tracing is off when no tracer provider is configured (``flowli.connect(..., tracer_provider=)``
or OpenTelemetry's global one, set before the engine is created): the engine then holds None and
each frame pays one ``is None`` check.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import uuid
from datetime import datetime
from typing import Any, Iterator

from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, SpanKind, TraceFlags

SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
_TRACE_ID = re.compile(r"^[0-9a-f]{32}$")


def span_id_of(*parts: Any) -> int:
    """A 64-bit span id from the parts that name a span (never 0, the invalid id)."""
    h = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") or 1


def trace_id_of(eid: str) -> int:
    """The trace id of an execution started outside any trace: its eid's 128 bits."""
    try:
        value = uuid.UUID(eid).int
    except ValueError:
        value = int.from_bytes(hashlib.blake2b(eid.encode(), digest_size=16).digest(), "big")
    return value or 1


def traceparent(ctx: SpanContext) -> str:
    """The W3C ``traceparent`` header of a span context."""
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def parse_traceparent(header: Any) -> SpanContext | None:
    """The span context of a W3C ``traceparent`` header; None when it is not one."""
    m = _TRACEPARENT.match(header.strip().lower()) if isinstance(header, str) else None
    if m is None or set(m.group(1)) == {"0"} or set(m.group(2)) == {"0"}:
        return None
    return SpanContext(int(m.group(1), 16), int(m.group(2), 16), is_remote=True,
                       trace_flags=TraceFlags(int(m.group(3), 16)))


def start_context(given: str | None) -> dict[str, str] | None:
    """What an execution's started entry records of the trace it starts in (``trace``): that of
    ``given``, a ``traceparent`` (the parent span) or a bare W3C trace id (a root span in that
    trace), else of the caller's current span when it has one."""
    if isinstance(given, str) and _TRACE_ID.match(given.strip().lower()) and set(given.strip()) != {"0"}:
        return {"trace_id": given.strip().lower()}
    ctx = parse_traceparent(given) if given else None
    if ctx is None:
        current = trace.get_current_span().get_span_context()
        ctx = current if current.is_valid else None
    if ctx is not None:
        return {"trace_id": f"{ctx.trace_id:032x}", "parent_id": f"{ctx.span_id:016x}"}
    return None


def execution_context(eid: str, started: dict[str, Any] | None) -> tuple[SpanContext, SpanContext | None]:
    """The span context of an execution's own span, and of its parent (None for a root), from
    what its started entry recorded (``trace``)."""
    trace_ = (started or {}).get("trace") if isinstance(started, dict) else None
    trace_id = int(trace_["trace_id"], 16) if isinstance(trace_, dict) and trace_.get("trace_id") else trace_id_of(eid)
    own = SpanContext(trace_id, span_id_of("execution", eid), is_remote=True, trace_flags=SAMPLED)
    parent_id = trace_.get("parent_id") if isinstance(trace_, dict) else None
    parent = SpanContext(trace_id, int(parent_id, 16), is_remote=True, trace_flags=SAMPLED) if parent_id else None
    return own, parent


def derived(ctx: SpanContext, *parts: Any) -> SpanContext:
    """The context of a span of ``ctx``'s trace whose id is derived from ``parts``."""
    return SpanContext(ctx.trace_id, span_id_of(*parts), is_remote=True, trace_flags=SAMPLED)


def delegate_context(task: Any) -> SpanContext | None:
    """The span context of a DELEGATE task's attempt (the parent of the worker's own span), from
    the execution's context its frame carries; None for a task without a frame."""
    frame = getattr(task, "frame", None)
    if not frame or task.eid is None:
        return None
    execution = parse_traceparent(frame.get("trace"))
    trace_id = execution.trace_id if execution is not None else trace_id_of(task.eid)
    return SpanContext(trace_id, span_id_of("delegate", task.eid, frame["fid"], task.attempt), is_remote=True,
                       trace_flags=SAMPLED)


def task_traceparent(task: Any) -> str | None:
    """The ``traceparent`` of a DELEGATE task's attempt, for the worker that runs it (its own
    spans are children of the attempt's); None for a task without a frame."""
    ctx = delegate_context(task)
    return traceparent(ctx) if ctx is not None else None


def step_attributes(eid: str, fid: str, attempt: int, workflow: str, version: str) -> dict[str, Any]:
    """The attributes of an attempt's span."""
    return {"flowli.eid": eid, "flowli.fid": fid, "flowli.attempt": attempt, "flowli.workflow": workflow,
            "flowli.version": version}


def _ns(at: datetime) -> int:
    return int(at.timestamp() * 1_000_000_000)


class _Ids:
    """The id generator of flowli's tracer: the span id flowli derived for the span it starts,
    else the provider's own generator."""

    def __init__(self, fallback: Any):
        self.fallback = fallback
        self.next: int | None = None
        self.next_trace: int | None = None

    def generate_span_id(self) -> int:
        if self.next is not None:
            value, self.next = self.next, None
            return value
        return int(self.fallback.generate_span_id())

    def generate_trace_id(self) -> int:
        if self.next_trace is not None:
            value, self.next_trace = self.next_trace, None
            return value
        return int(self.fallback.generate_trace_id())

    def is_trace_id_random(self) -> bool:
        return False


class Tracing:
    """flowli's spans on one tracer provider."""

    def __init__(self, provider: Any):
        self.tracer = provider.get_tracer("flowli")
        generator = getattr(self.tracer, "id_generator", None)
        self._ids = _Ids(generator) if generator is not None else None
        if self._ids is not None:
            self.tracer.id_generator = self._ids

    @classmethod
    def of(cls, provider: Any = None) -> Tracing | None:
        """Tracing on ``provider``, else on OpenTelemetry's global provider when one is set;
        None (off) when none is."""
        if provider is None:
            provider = trace.get_tracer_provider()
            if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
                return None
        return cls(provider)

    def start(self, name: str, own: SpanContext, parent: SpanContext | None, attributes: dict[str, Any],
              start_time: datetime | None = None) -> Span:
        """Start a span with the ids derived for it (``own``), under ``parent`` (a root in
        ``own``'s trace when None)."""
        # an empty context, not the current one: the parent is the journal's, never the caller's
        context = trace.set_span_in_context(NonRecordingSpan(parent) if parent is not None else trace.INVALID_SPAN)
        if self._ids is not None:
            self._ids.next, self._ids.next_trace = own.span_id, own.trace_id
        try:
            span: Span = self.tracer.start_span(name, context=context, kind=SpanKind.INTERNAL, attributes=attributes,
                                                start_time=_ns(start_time) if start_time is not None else None)
            return span
        finally:
            if self._ids is not None:
                self._ids.next = self._ids.next_trace = None

    @contextlib.contextmanager
    def current(self, span: Span) -> Iterator[Span]:
        """Make ``span`` current while the block runs; an exception that leaves it is recorded
        and the span ends with an error. The span ends with the block."""
        with trace.use_span(span, end_on_exit=True, record_exception=True, set_status_on_exception=True):
            yield span

    def delegate_ended(self, task: Any, end_time: datetime, error: str | None = None, **attributes: Any) -> None:
        """Write the span of a DELEGATE task's attempt, answered, failed or expired: from its
        enqueue to ``end_time``, a child of its execution's span."""
        frame, own = task.frame, delegate_context(task)
        if not frame or own is None:
            return
        attrs = {**step_attributes(task.eid, frame["fid"], task.attempt or 1, frame.get("workflow") or "",
                                   frame.get("version") or ""), "flowli.queue": task.queue, **attributes}
        self.finish(f"delegate {task.queue}", own, parse_traceparent(frame.get("trace")), attrs,
                    task.provenance.at, end_time, error)

    def finish(self, name: str, own: SpanContext, parent: SpanContext | None, attributes: dict[str, Any],
               start_time: datetime, end_time: datetime, error: str | None = None) -> None:
        """Write a span whose start and end are known already (an execution, a delegate attempt)."""
        span = self.start(name, own, parent, attributes, start_time)
        if error is not None:
            span.set_status(trace.Status(trace.StatusCode.ERROR, error))
        span.end(end_time=_ns(max(end_time, start_time)))
