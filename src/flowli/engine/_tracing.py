"""OpenTelemetry tracing of executions (the ``opentelemetry-api`` package; any SDK the user
configures).

The spans of one execution:

- ``workflow <name>``: the execution, from its start to its end, written once by the activation
  that ends it (span id derived from the eid). Its parent is the context the execution was
  started in: the caller's current span, a ``traceparent`` given to ``engine.start``, or the
  parent execution's activation for a child.
- ``activation <name>``: one activation, child of the execution's span (span id derived from the
  eid, the journal position the activation starts from and its lease epoch).
- ``step <name>``: one attempt of a step frame, child of its activation (span id derived from the
  eid, the frame id, the attempt number and the lease epoch), current while the step function
  runs.
- ``delegate <queue>``: one attempt of a ``ctx.delegate`` frame (a pipeline's stage run by an
  application worker), child of the execution's span, written when the attempt is answered or
  failed. Its context goes to the worker with the job (``traceparent``).

The trace id is the eid's own 128 bits for an execution started outside any trace, else the
trace it was started in (and its sampling flag). A replay creates no span for what the journal
already holds: a memo is served, nothing runs. Every id is derived from the journal, so the
spans of a process that died can be matched with the ones of the process that went on; an
execution retried after it failed ends again under a span of its own. Span ids are set through
the tracer's ``id_generator`` where the tracer has one (the SDK's do); other tracers give their
own. A failure of the tracer (a span processor that raises) is logged, never the execution's.

Tracing is off when no tracer provider is configured (``flowli.connect(..., tracer_provider=)``
or OpenTelemetry's global one, set before the engine is created): the engine then holds None and
each frame pays one ``is None`` check.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import logging
import re
import uuid
from datetime import datetime
from typing import Any, Iterator

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

log = logging.getLogger("flowli.engine")
SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_HEX16 = re.compile(r"^[0-9a-f]{16}$")
_PROPAGATOR = TraceContextTextMapPropagator()
NO_SPAN = contextlib.nullcontext()
"""What stands for an attempt's span when tracing is off (reusable: it holds nothing)."""
_NEXT: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar("flowli_next_span_ids", default=None)
"""The (trace id, span id) flowli derived for the span it is starting (read by ``_Ids``)."""


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
    """The span context of a W3C ``traceparent`` header (OpenTelemetry's own propagator); None
    when it is not one."""
    if not isinstance(header, str):
        return None
    ctx = trace.get_current_span(_PROPAGATOR.extract({"traceparent": header.strip()})).get_span_context()
    return ctx if ctx.is_valid else None


def start_context(given: str | None) -> dict[str, Any] | None:
    """What an execution's started entry records of the trace it starts in (``trace``): that of
    ``given``, a ``traceparent`` (the parent span) or a bare W3C trace id (a root span in that
    trace), else of the caller's current span when it has one."""
    if isinstance(given, str) and _HEX32.match(given.strip().lower()) and set(given.strip()) != {"0"}:
        return {"trace_id": given.strip().lower()}
    ctx = parse_traceparent(given) if given else None
    if ctx is None:
        current = trace.get_current_span().get_span_context()
        ctx = current if current.is_valid else None
    return context_of(ctx) if ctx is not None else None


def context_of(ctx: SpanContext) -> dict[str, Any]:
    """What a child's started entry records of the span it is started under (``trace``)."""
    return {"trace_id": f"{ctx.trace_id:032x}", "parent_id": f"{ctx.span_id:016x}", "sampled": ctx.trace_flags.sampled}


def execution_context(eid: str, started: Any, retries: int = 0) -> tuple[SpanContext, SpanContext | None]:
    """The span context of an execution's own span (after ``retries`` retries: a span each time
    it ends), and of its parent (None for a root), from what its started entry recorded
    (``trace``; a value that is not one is ignored)."""
    trace_ = started.get("trace") if isinstance(started, dict) else None
    trace_ = trace_ if isinstance(trace_, dict) else {}
    given = str(trace_.get("trace_id") or "")
    trace_id = int(given, 16) if _HEX32.match(given) and set(given) != {"0"} else trace_id_of(eid)
    flags = SAMPLED if trace_.get("sampled", True) is not False else TraceFlags(TraceFlags.DEFAULT)
    parts = ("execution", eid, retries) if retries else ("execution", eid)
    own = SpanContext(trace_id, span_id_of(*parts), is_remote=True, trace_flags=flags)
    parent_id = str(trace_.get("parent_id") or "")
    parent = SpanContext(trace_id, int(parent_id, 16), is_remote=True, trace_flags=flags) \
        if _HEX16.match(parent_id) and set(parent_id) != {"0"} else None
    return own, parent


def derived(ctx: SpanContext, *parts: Any) -> SpanContext:
    """The context of a span of ``ctx``'s trace (and sampling) whose id is derived from ``parts``."""
    return SpanContext(ctx.trace_id, span_id_of(*parts), is_remote=True, trace_flags=ctx.trace_flags)


def delegate_context(task: Any) -> SpanContext | None:
    """The span context of a DELEGATE task's attempt (the parent of the worker's own spans), from
    the execution's context its frame carries; None for a task without one (tracing was off)."""
    frame = getattr(task, "frame", None)
    if not frame or task.eid is None:
        return None
    execution = parse_traceparent(frame.get("trace"))
    return derived(execution, "delegate", task.eid, frame["fid"], task.attempt) if execution is not None else None


def task_traceparent(task: Any) -> str | None:
    """The ``traceparent`` of a DELEGATE task's attempt, for the worker that runs it (its own
    spans are children of the attempt's); None when the task's execution is not traced."""
    ctx = delegate_context(task)
    return traceparent(ctx) if ctx is not None else None


def step_attributes(eid: str, fid: str, attempt: int, workflow: str, version: str) -> dict[str, Any]:
    """The attributes of an attempt's span."""
    return {"flowli.eid": eid, "flowli.fid": fid, "flowli.attempt": attempt, "flowli.workflow": workflow,
            "flowli.version": version}


def _ns(at: datetime) -> int:
    return int(at.timestamp() * 1_000_000_000)


class _Ids:
    """The id generator of flowli's tracer: the ids flowli derived for the span it starts (in a
    context variable: engines on other threads or tasks do not mix), else the provider's own."""

    def __init__(self, fallback: Any):
        self.fallback = fallback

    def generate_span_id(self) -> int:
        pending = _NEXT.get()
        return pending[1] if pending is not None else int(self.fallback.generate_span_id())

    def generate_trace_id(self) -> int:
        pending = _NEXT.get()
        return pending[0] if pending is not None else int(self.fallback.generate_trace_id())

    def is_trace_id_random(self) -> bool:
        return False


class Tracing:
    """flowli's spans on one tracer provider."""

    def __init__(self, provider: Any):
        self.tracer = provider.get_tracer("flowli")
        generator = getattr(self.tracer, "id_generator", None)
        if generator is not None and not isinstance(generator, _Ids):  # the SDK caches its tracers
            self.tracer.id_generator = _Ids(generator)
        self._failed = False

    @classmethod
    def of(cls, provider: Any = None) -> Tracing | None:
        """Tracing on ``provider``, else on OpenTelemetry's global provider when one is set;
        None (off) when none is."""
        if provider is None:
            provider = trace.get_tracer_provider()
            if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
                return None
        return cls(provider)

    def _failure(self, exc: Exception) -> None:
        if not self._failed:
            self._failed = True
            log.warning("tracing failed (%s: %s): the spans are incomplete; the executions go on",
                        type(exc).__name__, exc)

    def start(self, name: str, own: SpanContext, parent: SpanContext | None, attributes: dict[str, Any],
              start_time: datetime | None = None) -> Span:
        """Start a span with the ids derived for it (``own``), under ``parent`` (a root in
        ``own``'s trace when None). A tracer that fails gives a span that records nothing."""
        # an empty context, not the current one: the parent is the journal's, never the caller's
        context = trace.set_span_in_context(NonRecordingSpan(parent) if parent is not None else trace.INVALID_SPAN)
        token = _NEXT.set((own.trace_id, own.span_id))
        try:
            span: Span = self.tracer.start_span(name, context=context, kind=SpanKind.INTERNAL, attributes=attributes,
                                                start_time=_ns(start_time) if start_time is not None else None)
            return span
        except Exception as exc:
            self._failure(exc)
            return trace.INVALID_SPAN
        finally:
            _NEXT.reset(token)

    @contextlib.contextmanager
    def current(self, span: Span) -> Iterator[Span]:
        """Make ``span`` current while the block runs; what leaves the block by an exception (a
        cancellation or a stop too) is recorded and ends the span with an error. The span ends
        with the block."""
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            yield span
        except BaseException as exc:
            with contextlib.suppress(Exception):
                if isinstance(exc, Exception):
                    span.record_exception(exc)
                span.set_status(trace.Status(trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            raise
        finally:
            otel_context.detach(token)
            self.end(span)

    def end(self, span: Span, end_time: int | None = None) -> None:
        try:
            span.end(end_time=end_time)
        except Exception as exc:
            self._failure(exc)

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
        try:
            if error is not None:
                span.set_status(trace.Status(trace.StatusCode.ERROR, error))
        except Exception as exc:
            self._failure(exc)
        self.end(span, _ns(max(end_time, start_time)))
