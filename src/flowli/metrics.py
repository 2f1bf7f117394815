"""Prometheus metrics of one engine: executions started, completed and failed by workflow (from
the executions view, so every process reports the same totals), the executions of each decider
by application, name and status (a pipeline's, from their index), step attempts and failures by
workflow and lease recoveries (this process's counters), the depth of each queue and the age of
its oldest ready task, the sizes of the store's group commits, and the sweeper's timer lag.

``Metrics(engine).render()`` is the text a scrape reads (``GET /metrics`` on ``flowli serve``);
``serve(port)`` serves it on a port of its own (``flowli worker --metrics-port``), refreshed in
the background, since a scrape there is answered on another thread."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, generate_latest, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from flowli._hosts import AllowedHosts
from flowli.engine import Engine

BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
"""The bounds of the group-commit batch-size histogram (writes per commit)."""
REFRESH = 5.0
"""Seconds between two reads of the store's figures when a port of its own serves them."""


class Metrics(Collector):
    def __init__(self, engine: Engine):
        self.engine = engine
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        self._read: dict[str, Any] = {"executions": [], "queues": [], "workers": [], "deciders": []}

    async def refresh(self) -> None:
        """Read what comes from the store: executions per workflow and status, queue depths, the
        workers seen within a lease (an application's HTTP worker by its heartbeats)."""
        executions = await self.engine.read_view(
            "executions", "SELECT workflow, status, COUNT(*) FROM view_executions GROUP BY workflow, status")
        self._read = {"executions": executions, "queues": await self.engine.queue_depths(),
                      "workers": await self.engine.workers(), "deciders": await self.engine.decider_counts()}

    async def render(self) -> bytes:
        await self.refresh()
        return bytes(generate_latest(self.registry))

    def collect(self) -> Iterator[Metric]:
        started = CounterMetricFamily("flowli_executions_started", "Executions started, by workflow.",
                                      labels=["workflow"])
        ended = {s: CounterMetricFamily(f"flowli_executions_{s}", f"Executions {s}, by workflow.", labels=["workflow"])
                 for s in ("completed", "failed")}
        totals: dict[str, int] = {}
        by_status: dict[tuple[str, str], int] = {}
        for workflow, status, n in self._read["executions"]:
            workflow = str(workflow or "")
            totals[workflow] = totals.get(workflow, 0) + int(n)
            by_status[(workflow, str(status))] = by_status.get((workflow, str(status)), 0) + int(n)
        for workflow, n in sorted(totals.items()):
            started.add_metric([workflow], n)
            for status, family in ended.items():
                family.add_metric([workflow], by_status.get((workflow, status), 0))
        yield started
        yield from ended.values()
        stats = self.engine.stats
        for name, counts, what in (("flowli_step_attempts", stats.attempts, "Step attempts run in this process"),
                                   ("flowli_step_failures", stats.failures, "Step attempts that failed in this process")):
            family = CounterMetricFamily(name, f"{what}, by workflow.", labels=["workflow"])
            for workflow, n in sorted(counts.items()):
                family.add_metric([workflow], n)
            yield family
        depth = GaugeMetricFamily("flowli_queue_depth", "Tasks ready to dequeue, by queue.", labels=["queue"])
        age = GaugeMetricFamily("flowli_queue_oldest_age_seconds", "Age of the oldest ready task, by queue.",
                                labels=["queue"])
        for queue, n, oldest in self._read["queues"]:
            depth.add_metric([queue], n)
            age.add_metric([queue], oldest)
        yield depth
        yield age
        live = GaugeMetricFamily("flowli_workers_live", "Live workers (seen within a lease), by queue they serve.",
                                 labels=["queue"])
        serving: dict[str, int] = {}
        for w in self._read["workers"]:
            for queue in w.get("queues") or ():
                serving[queue] = serving.get(queue, 0) + 1
        for queue, n in sorted(serving.items()):
            live.add_metric([queue], n)
        yield live
        decided = GaugeMetricFamily("flowli_decider_executions",
                                    "Executions of each decider by application, name and status (a pipeline's name"
                                    " and status), from their index.", labels=["decider", "application", "name", "status"])
        for decider, application, name, label, n in sorted(self._read["deciders"], key=lambda r: tuple(map(str, r))):
            decided.add_metric([decider, application or "", name or "", label or ""], n)
        yield decided
        sizes = self.engine.batch_sizes()
        buckets, seen = [], 0
        for bound in BUCKETS:
            seen = sum(n for size, n in sizes.items() if size <= bound)
            buckets.append((str(bound), seen))
        buckets.append(("+Inf", sum(sizes.values())))
        yield HistogramMetricFamily("flowli_commit_batch_size", "Writes per group commit of the store.",
                                    buckets=buckets, sum_value=sum(size * n for size, n in sizes.items()))
        cache = self.engine.workflow_cache
        yield GaugeMetricFamily("flowli_workflow_cache_runs",
                                "Suspended runs this process keeps to continue without a replay.", value=cache.runs)
        yield GaugeMetricFamily("flowli_workflow_cache_bytes", "Memory the kept runs hold, estimated.",
                                value=cache.bytes)
        for name, value, what in (("hits", cache.hits, "Activations that continued a kept run"),
                                  ("misses", cache.misses, "Kept runs that could not continue and replayed"),
                                  ("evictions", cache.evictions, "Kept runs let go to stay within the bounds")):
            yield CounterMetricFamily(f"flowli_workflow_cache_{name}", f"{what}.", value=value)
        yield CounterMetricFamily("flowli_lease_recoveries", "Executions whose expired lease the sweeper recovered.",
                                  value=stats.recoveries)
        yield CounterMetricFamily("flowli_sweeps", "Passes of this process's sweeper.", value=stats.sweeps)
        yield GaugeMetricFamily("flowli_sweeper_timer_lag_seconds",
                                "Seconds between the latest fired timer's due instant and its firing.",
                                value=stats.timer_lag)


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a scrape left open does not hold the worker's exit


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # a scrape every few seconds is no news for the worker's log


def guarded(app: Callable[..., Any], hosts: AllowedHosts) -> Callable[..., Any]:
    """``app`` (WSGI) behind the check of the ``Host`` header that every flowli service makes: a
    page of another site that points its name at this machine (DNS rebinding) reads nothing."""

    def check(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        host = environ.get("HTTP_HOST")
        if not hosts.allows(host):
            shown = repr((host or "")[:100])
            body = (f"the Host header {shown} is not a name this service answers to ({hosts.describe()})\n").encode()
            start_response("421 Misdirected Request", [("Content-Type", "text/plain; charset=utf-8"),
                                                        ("Content-Length", str(len(body)))])
            return [body]
        return app(environ, start_response)

    return check


@contextlib.asynccontextmanager
async def serve(engine: Engine, port: int, host: str = "127.0.0.1") -> AsyncIterator[Metrics]:
    """Serve the metrics on ``host:port`` while the block runs, read again every REFRESH s. A
    request is answered only when its ``Host`` names this machine (a loopback name) or ``host``."""
    metrics = Metrics(engine)
    await metrics.refresh()
    server = make_server(host, port, guarded(make_wsgi_app(metrics.registry), AllowedHosts(host)),
                         server_class=_Server, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, name="flowli-metrics", daemon=True)
    thread.start()

    async def again() -> None:
        while True:
            await asyncio.sleep(REFRESH)
            with contextlib.suppress(Exception):  # a store down for a moment: the last figures stay
                await metrics.refresh()

    task = asyncio.create_task(again())
    try:
        yield metrics
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        server.shutdown()
        server.server_close()
        thread.join(5)

__all__ = ["Metrics", "serve"]
