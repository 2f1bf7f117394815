"""``HttpWorker``: an application worker over the HTTP protocol. It bootstraps, long-polls for
jobs, acquires each one's lease, renews it while the handler runs, submits the result (again on
503) and acks the job. When the bootstrap answer offers the batch routes (``batch``), a long poll
takes as many jobs as there are free slots (leased already: no acquire) and the results go many
to a request (``_batching``); otherwise the reference routes, one call each."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import signal
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Callable

import certifi
import httpx

from ._batching import Results
from ._client import ClientError, _check
from ._lean import LeanClient

log = logging.getLogger("flowli.client")
Handler = Callable[[dict[str, Any]], Any]
POLLERS = 4
"""Long polls a worker keeps open at most (its jobs run in up to ``concurrency`` tasks)."""


def _tracer(provider: Any) -> Any:
    """flowli's tracer on ``provider``, else on OpenTelemetry's global one when it is set; None
    when there is none (or the ``opentelemetry-api`` package is not installed)."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    if provider is None:
        provider = trace.get_tracer_provider()
        if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
            return None
    return provider.get_tracer("flowli.client")


def _current(span: Any) -> Any:
    if span is None:
        return contextlib.nullcontext()
    from opentelemetry import trace

    return trace.use_span(span, end_on_exit=False)


def _end(span: Any, result: dict[str, Any]) -> None:
    from opentelemetry.trace import Status, StatusCode

    if not result.get("isSuccess"):
        span.set_status(Status(StatusCode.ERROR, f"{result.get('errorCode')}: {result.get('errorMessage')}"))
    span.end()


def _propagated(span: Any) -> dict[str, str]:
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, context=trace.set_span_in_context(span))
    return carrier


class StageError(Exception):
    """Raised by a handler: the attempt failed with ``code`` (the retry rules decide)."""

    def __init__(self, code: str, message: str = "", retryable: bool = True):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.retryable = retryable


@dataclass
class WaitForApproval:
    """Returned by a handler: park the stage in WaitingForApproval with this output."""

    output: str | None = None


class HttpWorker:
    def __init__(self, base_url: str, api_key: str, name: str, *, wait_seconds: float = 20.0,
                 transport: Any = None, tracer_provider: Any = None, batch: bool = True):
        self.base_url = base_url.rstrip("/")
        self.tracer = _tracer(tracer_provider)
        """The tracer of the handlers' spans (``tracer_provider``, else OpenTelemetry's global
        provider when one is set); None: no spans."""
        self.api_key = api_key
        self.name = name
        self.wait_seconds = wait_seconds
        self.handlers: dict[str, Handler] = {}
        self._transport = transport
        self.session: dict[str, Any] | None = None
        self._stop = asyncio.Event()
        self._hurry = asyncio.Event()
        """Set by each stop: the drain reads its grace again."""
        self._grace: float | None = None
        """The grace of the stop that ends the run (None: the one ``run`` was given)."""
        self._results: Results | None = None
        """The results' sender, when the service offers the batch routes."""
        self.batch = batch
        """Use the batch routes when the service offers them (False: the reference routes only)."""

    def handler(self, name: str) -> Callable[[Handler], Handler]:
        """Register a handler function: the job (a dict) in, the output string back."""
        def register(fn: Handler) -> Handler:
            self.handlers[name] = fn
            return fn
        return register

    def stop(self, grace: float | None = None) -> None:
        """Stop taking jobs. The running ones have ``grace`` seconds (default: the ``grace`` of
        ``run``) to finish and send their results; then they are cancelled, and their leases, no
        longer renewed, expire, so their stages run again (here after a restart, or on another
        worker). A second stop (a second Ctrl-C) cancels them at once. Then the worker says
        ``POST /workers/shutdown`` and ``run`` returns."""
        if self._stop.is_set():
            grace = 0.0
        if grace is not None:
            self._grace = max(0.0, grace)
        self._stop.set()
        self._hurry.set()

    @contextlib.contextmanager
    def _signals(self, wanted: bool) -> Iterator[None]:
        """SIGTERM and SIGINT (Ctrl-C) stop the worker while it runs (:meth:`stop`, so a second one
        stops it at once), when it runs in the main thread of its process; the handlers it found
        are put back when it returns."""
        loop = asyncio.get_running_loop()
        installed: list[tuple[int, Any]] = []
        if wanted and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous = signal.getsignal(sig)
                try:
                    loop.add_signal_handler(sig, self.stop)
                except (NotImplementedError, RuntimeError, ValueError):  # no signals on this loop
                    continue
                installed.append((sig, previous))
        try:
            yield
        finally:
            for sig, previous in installed:
                loop.remove_signal_handler(sig)
                if previous is not None:
                    signal.signal(sig, previous)

    async def run(self, concurrency: int = 1, *, grace: float = 30.0, signals: bool = True) -> None:
        """Take and run jobs, up to ``concurrency`` at once, until :meth:`stop` (SIGTERM or Ctrl-C
        when ``signals``: see ``_signals``), which leaves the running jobs ``grace`` seconds to
        finish."""
        if not self.handlers:
            raise ValueError("register a handler first (@worker.handler('Name'))")
        with self._signals(signals):
            await self._run(concurrency, grace)

    async def _run(self, concurrency: int, grace: float) -> None:
        seconds = self.wait_seconds + 30  # a request's bound: a long poll's wait and its answer
        tls = ssl.create_default_context(cafile=certifi.where())  # one for every client: each would load it

        def client(headers: dict[str, str] | None = None) -> Any:
            # a client per long poll and per job slot: the lean one (see ``_lean``), or httpx with
            # a transport given (a test's, in process)
            if self._transport is None:
                return LeanClient(self.base_url, timeout=seconds, headers=headers, ssl=tls)
            return httpx.AsyncClient(base_url=self.base_url, timeout=httpx.Timeout(seconds), transport=self._transport, verify=tls,
                                     headers=headers, limits=httpx.Limits(max_connections=2, max_keepalive_connections=2))

        async with contextlib.AsyncExitStack() as stack:
            http = await stack.enter_async_context(client())
            boot = await self._bootstrap(http)
            self.session = boot
            headers = {"X-Worker-Session": boot["workerSessionToken"]}
            http.headers.update(headers)
            # a few long polls feed up to `concurrency` jobs at once: a pull only when a job slot
            # (a client in `free`) is there for it
            free: asyncio.LifoQueue[httpx.AsyncClient] = asyncio.LifoQueue()  # the warmest first
            for _ in range(concurrency):
                free.put_nowait(await stack.enter_async_context(client(headers)))
            working: set[asyncio.Task[None]] = set()
            self._working = working
            offer = boot.get("batch") if self.batch and isinstance(boot.get("batch"), dict) else None
            helpers: list[asyncio.Task[None]] = []
            if offer is not None:
                self._results = Results(await stack.enter_async_context(client(headers)), int(offer["maxResults"]))
                helpers.append(asyncio.create_task(self._results.run()))
                lanes = [asyncio.create_task(self._batch_lane(await stack.enter_async_context(client(headers)), boot,
                                                              free, working, int(offer["maxJobs"])))
                         for _ in range(min(concurrency, POLLERS))]
            else:
                lanes = [asyncio.create_task(self._lane(await stack.enter_async_context(client(headers)), boot, free,
                                                        working))
                         for _ in range(min(concurrency, POLLERS))]
            stop = asyncio.create_task(self._stop.wait())
            beat = asyncio.create_task(self._heartbeat(http, float(boot["heartbeat"]["intervalSeconds"])))
            try:
                await asyncio.wait([stop, *lanes], return_when=asyncio.FIRST_COMPLETED)
                for lane in lanes:
                    if lane.done() and lane.exception() is not None:
                        raise lane.exception()  # type: ignore[misc]
                for lane in lanes:  # no new job from here on
                    lane.cancel()
                await asyncio.gather(*lanes, return_exceptions=True)
                await self._drain(http, working, grace)
            finally:
                for t in [stop, beat, *lanes, *working, *helpers]:
                    t.cancel()
                await asyncio.gather(stop, beat, *lanes, *working, *helpers, return_exceptions=True)
                self._results = None
                with contextlib.suppress(httpx.HTTPError):
                    await http.post("/workers/shutdown")

    async def _drain(self, http: httpx.AsyncClient, working: set[asyncio.Task[None]], grace: float) -> None:
        """Leave the running jobs the stop's grace to finish (the service shows the worker
        ``draining`` meanwhile); the ones still running after it are handed back."""
        if not working:
            return
        with contextlib.suppress(httpx.HTTPError, ClientError):
            _check(await http.post("/workers/heartbeat", json={"state": "draining", "inFlight": len(working)}))
        loop = asyncio.get_running_loop()
        started = loop.time()
        while working:
            self._hurry.clear()
            left = started + (self._grace if self._grace is not None else grace) - loop.time()
            if left <= 0:
                break
            hurry = asyncio.ensure_future(self._hurry.wait())
            await asyncio.wait([*working, hurry], timeout=left, return_when=asyncio.FIRST_COMPLETED)
            hurry.cancel()
        if working:
            log.warning("stopping: %d job(s) still running are handed back (their leases expire and they run "
                        "again)", len(working))

    async def _heartbeat(self, http: httpx.AsyncClient, interval: float) -> None:
        """Tell the service every ``interval`` seconds that this worker lives (a worker silent for a
        few intervals is shown offline), with the jobs it runs."""
        while True:
            await asyncio.sleep(max(interval, 0.1))
            try:
                state = "draining" if self._stop.is_set() else "ready"
                _check(await http.post("/workers/heartbeat", json={"state": state, "inFlight": len(self._working)}))
            except (httpx.HTTPError, ClientError) as exc:  # the next one may get through
                log.warning("heartbeat failed: %s", exc)

    async def _bootstrap(self, http: httpx.AsyncClient) -> dict[str, Any]:
        """Bootstrap; a service that is not up yet (or restarting) is waited for."""
        delay = 0.1
        while True:
            try:
                return dict(_check(await http.post("/workers/bootstrap", headers={"X-API-Key": self.api_key}, json={
                    "workerName": self.name, "supportedHandlers": sorted(self.handlers),
                    "hostName": socket.gethostname(), "pid": os.getpid(), "sdkVersion": "flowli-python"})))
            except httpx.TransportError as exc:
                log.warning("the service at %s is not reachable (%s): trying again", self.base_url, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def _lane(self, poll: httpx.AsyncClient, boot: dict[str, Any], free: asyncio.Queue[httpx.AsyncClient],
                    working: set[asyncio.Task[None]]) -> None:
        while not self._stop.is_set():
            http = await free.get()  # a free job slot first
            try:
                r = await poll.post("/jobs/pull", json={"waitSeconds": self.wait_seconds})
            except httpx.TransportError:
                free.put_nowait(http)
                await asyncio.sleep(0.5)
                continue
            except BaseException:
                free.put_nowait(http)
                raise
            if r.status_code == 204:
                free.put_nowait(http)
                continue
            try:
                job = _check(r)
            except BaseException:
                free.put_nowait(http)
                raise
            task = asyncio.create_task(self._job(http, boot, job, free))
            working.add(task)
            task.add_done_callback(working.discard)

    async def _batch_lane(self, poll: httpx.AsyncClient, boot: dict[str, Any], free: asyncio.Queue[httpx.AsyncClient],
                          working: set[asyncio.Task[None]], limit: int) -> None:
        """A long poll for as many jobs as there are free job slots (``POST /jobs/pull-batch``)."""
        while not self._stop.is_set():
            slots = [await free.get()]  # a free job slot first, then every other free one
            while len(slots) < limit and not free.empty():
                slots.append(free.get_nowait())
            jobs: list[dict[str, Any]] = []
            try:
                r = await poll.post("/jobs/pull-batch", json={"waitSeconds": self.wait_seconds, "max": len(slots)})
                if r.status_code != 204:
                    jobs = _check(r)["jobs"]
            except httpx.TransportError:
                await asyncio.sleep(0.5)
            finally:
                for http in slots[len(jobs):]:  # the slots that got no job, back
                    free.put_nowait(http)
            for job, http in zip(jobs, slots):
                task = asyncio.create_task(self._job(http, boot, job, free))
                working.add(task)
                task.add_done_callback(working.discard)

    async def _job(self, http: httpx.AsyncClient, boot: dict[str, Any], job: dict[str, Any],
                   free: asyncio.Queue[httpx.AsyncClient]) -> None:
        try:
            await self._work(http, boot, job)
        except (httpx.TransportError, ClientError) as exc:
            # the service went away or refused the job mid-way: its lease expires and the
            # stage is delivered again, to this worker or another
            log.warning("job %s abandoned: %s", job.get("executionId"), exc)
            await asyncio.sleep(0.2)
        finally:
            free.put_nowait(http)

    async def _work(self, http: httpx.AsyncClient, boot: dict[str, Any], job: dict[str, Any]) -> None:
        stage = job["stageId"]
        lease = {"executionId": job["executionId"], "workerId": boot["workerId"]}
        if "leaseExpiresAt" not in job:  # a job of /jobs/pull-batch comes leased
            acquired = _check(await http.post(f"/stages/{stage}/lease/acquire", json=lease))
            if not acquired.get("acquired"):
                return
        handler: asyncio.Future[Any] | None = None
        told = asyncio.Event()  # a renewal said stop: the lease is lost, or the pipeline was cancelled

        def stop() -> None:
            told.set()
            if handler is not None:
                handler.cancel()  # an async handler stops at its next await; a sync one has returned

        renewer = asyncio.create_task(self._renew(http, stage, lease, float(boot["lease"]["ttlSeconds"]), stop))
        result: dict[str, Any] = {"executionId": job["executionId"], "attempt": job["attempt"]}
        span = self._span(job)
        headers: dict[str, str] = {}
        try:
            fn = self.handlers[job["stageHandlerName"]]
            with _current(span):
                out = fn(job)
                if inspect.isawaitable(out):
                    handler = asyncio.ensure_future(out)
                    out = await handler
            if isinstance(out, WaitForApproval):
                result.update(isSuccess=True, output=out.output, isWaitingForApproval=True)
            else:
                result.update(isSuccess=True, output=None if out is None else str(out))
        except StageError as exc:
            result.update(isSuccess=False, errorCode=exc.code, errorMessage=exc.message, retryable=exc.retryable)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not told.is_set() or (task is not None and task.cancelling()):
                raise
            result.update(isSuccess=False, errorCode="CANCELLED", errorMessage="stopped: the service said so")
        except Exception as exc:  # a handler's bug: the attempt failed
            result.update(isSuccess=False, errorCode=type(exc).__name__, errorMessage=str(exc))
        finally:
            renewer.cancel()
            if span is not None:
                with contextlib.suppress(Exception):  # a tracer's failure is not the job's
                    _end(span, result)
                    # the result goes back in the handler's trace (its traceparent), as its upstream calls did
                    headers = _propagated(span)
        if told.is_set():  # its result would be refused: nothing to send
            return
        if self._results is not None:  # many to a request; one answered 202 is acknowledged with it
            await self._results.submit(stage, job["token"], result)
            return
        await self._submit(http, stage, result, headers)
        with contextlib.suppress(ClientError):
            _check(await http.post("/jobs/ack", json={"token": job["token"]}))

    def _span(self, job: dict[str, Any]) -> Any:
        """The span of a job's handler: a child of the stage attempt's span (the job's
        ``traceparent``), current while the handler runs. None without a tracer, or when the
        tracer fails (the job runs all the same)."""
        if self.tracer is None:
            return None
        from opentelemetry.trace import SpanKind
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        try:
            parent = TraceContextTextMapPropagator().extract({"traceparent": job["traceparent"]}) \
                if isinstance(job.get("traceparent"), str) else None
            return self.tracer.start_span(f"handler {job['stageHandlerName']}", context=parent, kind=SpanKind.CONSUMER,
                                          attributes={"flowli.pipeline_id": job["pipelineId"],
                                                      "flowli.stage": job["stageName"],
                                                      "flowli.attempt": job["attempt"], "flowli.worker": self.name})
        except Exception as exc:
            log.warning("no span for job %s: %s", job.get("executionId"), exc)
            return None

    async def _submit(self, http: httpx.AsyncClient, stage: int, result: dict[str, Any],
                      headers: dict[str, str] | None = None) -> None:
        delay = 0.1
        while True:
            try:
                r = await http.post(f"/stages/{stage}/result", json=result, headers=headers or None)
            except httpx.TransportError:
                r = None
            if r is not None and r.status_code != 503:
                if r.status_code == 409:
                    log.warning("result of stage %s refused: %s", stage, r.text)
                    return
                _check(r)
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def _renew(self, http: httpx.AsyncClient, stage: int, lease: dict[str, Any], ttl: float,
                     stop: Callable[[], None]) -> None:
        """Renew the job's lease every third of its TTL; ``stop()`` the job when the service says
        that its lease is lost or its pipeline cancelled (cooperatively: its result would be refused)."""
        while True:
            await asyncio.sleep(max(ttl / 3, 0.2))
            try:
                answer = _check(await http.post(f"/stages/{stage}/lease/renew", json=lease))
            except (httpx.HTTPError, ClientError):
                continue
            if not answer.get("acquired") or answer.get("cancelRequested"):
                why = "its pipeline was cancelled" if answer.get("cancelRequested") else \
                    f"its lease is lost ({answer.get('reason')})"
                log.warning("stage %s: %s; its handler stops", stage, why)
                stop()
                return


