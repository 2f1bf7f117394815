"""The Engine: the facade that the CLI, the HTTP service and tests call."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import logging
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterable, Sequence

from flowli.domain import (
    Cancelled,
    Entry,
    ExecutionRecord,
    StaleItem,
    Status,
    TaskKind,
    UnknownTaskError,
    belongs,
    check_json,
    keyed_eid,
    new_eid,
    principal_for,
)
from flowli.store import (
    Intent,
    Items,
    JournalFilter,
    NewItem,
    Store,
    TaskHold,
    Write,
)

from . import _operations as ops
from . import _schedules as sched
from ._adopt import adopt
from ._archive import Archive
from ._cache import CacheFigures
from ._clock import Clock, SystemClock
from ._consumer import Consumer, settle
from ._deciding import start_decided
from ._dry import Divergence, dry_replay
from ._dry import inspect as inspect_run
from ._errors import rebuild_error
from ._explain import Explanation, explain
from ._operations import ENGINE_ACTOR, By, read_journal, read_record, scope_of
from ._projection import ExecutionPage, Projection, Projector
from ._read_models import ReadModels
from ._registry import Registry
from ._retention import retain
from ._runtime import Options, Runtime, Stats, entries_with_seqs
from ._tasks import cancel_and_wait
from ._tracing import Tracing, start_context
from ._transitions import Middleware, Observer, Transition, commit
from ._verify import Verification, verify
from ._views import RunView, run_view
from ._waits import new_execution
from ._watch import await_end, await_suspended, read_log, watch
from ._worker import Worker

log = logging.getLogger("flowli.schedules")


class Engine(ReadModels):
    """One store, one registry, one clock. Every method is a coroutine but :meth:`worker`."""

    def __init__(
        self,
        store: Store,
        registry: Registry,
        *,
        clock: Clock | None = None,
        options: Options | None = None,
        tracer_provider: Any = None,
        middleware: Iterable[tuple[Middleware, Iterable[str] | None]] = (),
    ):
        self._store = store
        self.registry = registry
        self.clock: Clock = clock or SystemClock()
        self.options = options or Options()
        self._rt = Runtime(store, registry, self.clock, self.options)
        self._rt.tracing = Tracing.of(tracer_provider)
        self._projection = Projection(store)
        self._archive = Archive(Path(self.options.bucket))
        self._workers: list[asyncio.Task[None]] = []
        self._running: list[Worker] = []
        """The workers of this engine (each entered in the Runtime's slots while it runs)."""
        self._firers: dict[str, sched.Firer] = {}
        self._closed = False
        for given, kinds in middleware:  # the policy it is built with (flowli.connect: RBAC)
            self.use(given, kinds=kinds)

    # ---- seams ----------------------------------------------------------------------------

    def use(self, middleware: Middleware, *, kinds: Iterable[str] | None = None) -> None:
        """Register ``async def middleware(transition, call_next)``: every transition of this
        engine but the frame appends of a running activation passes it, in the order registered
        (with ``kinds``, only the transitions of those kinds: ``start``, ``cancel``, ...; the
        others do not pay for it). ``call_next()`` commits (and returns the store's answer);
        raising refuses the transition, and nothing is written."""
        if not callable(middleware):
            raise TypeError(f"engine.use takes an async function (transition, call_next), got {middleware!r}")
        self._rt.interceptors.use(middleware, kinds)

    @property
    def middleware(self) -> tuple[Middleware, ...]:
        """The middleware registered, in order (the policy the engine was built with first)."""
        return tuple(self._rt.interceptors.middleware)

    def observe(self, observer: Observer) -> None:
        """Register ``observer(transition, result)``, a plain function called after every commit of
        this engine, the frame appends included (keep it cheap: it runs on the hot path)."""
        self._rt.interceptors.observers.append(observer)

    def running(self) -> builtins.list[str]:
        """The eids whose activation runs in this engine's workers now."""
        return [eid for worker in self._running for eid in worker.held]

    @property
    def owner(self) -> str:
        """The name this process holds leases under (``host:pid:…``): the ``lease_owner`` of a
        record (and the ``owner`` in ``explain``) when one of its workers runs the execution; the
        ids of its workers (``workers``) begin with it. Whether a lease is this process's own."""
        return self._rt.owner

    def _held(self, eid: str) -> Any:
        """The activation of ``eid`` running in this engine's workers, if any."""
        for worker in self._running:
            activation = worker.held.get(eid)
            if activation is not None:
                return activation
        return None

    # ---- lifecycle ------------------------------------------------------------------------

    async def __aenter__(self) -> Engine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await cancel_and_wait(self._workers)
        self._rt.cache.clear()
        await self._rt.announcer.drain()
        await self._store.close()

    @contextlib.asynccontextmanager
    async def worker(
        self, concurrency: int = 64, queues: Sequence[str] = ("default",), *, sweeper: bool = True,
        grace: float | None = None,
    ) -> AsyncIterator[Worker]:
        """Run a worker (and the sweeper) in the background for the duration of the block. At its
        end the steps under way finish, for ``grace`` seconds at most (``Options.grace``)."""
        w = Worker(self._rt, concurrency=concurrency, queues=queues, sweeper=sweeper, grace=grace)
        w.accept()
        self._running.append(w)
        self._rt.slots.enter(w)
        task = asyncio.create_task(w.run(), name="flowli-worker")
        self._workers.append(task)
        stop_firing = asyncio.Event()
        firing = asyncio.create_task(self._schedule_loop(stop_firing), name="flowli-schedules") if sweeper else None
        try:
            yield w
        finally:
            if firing is not None:
                # stopped, not cancelled: a store call cancelled mid-way (asyncpg sends the server a
                # cancel request) could hit the next statement on that connection
                stop_firing.set()
                await asyncio.wait([firing], timeout=10)
                await cancel_and_wait([firing])
            await cancel_and_wait([task])
            await w.retire()
            self._workers.remove(task)
            self._running.remove(w)
            self._rt.slots.leave(w)

    async def run_worker(
        self, concurrency: int = 64, queues: Sequence[str] = ("default",), *, sweeper: bool = True,
        grace: float | None = None,
    ) -> None:
        """Run a worker in the foreground until cancelled. A cancel stops it as the end of
        ``worker()`` does; a second cancel while it drains stops it at once."""
        w = Worker(self._rt, concurrency=concurrency, queues=queues, sweeper=sweeper, grace=grace)
        self._running.append(w)
        self._rt.slots.enter(w)
        try:
            await w.run()
        finally:
            self._running.remove(w)
            self._rt.slots.leave(w)

    # ---- executions -----------------------------------------------------------------------

    async def start(
        self, workflow: str | Callable[..., Any], *args: Any, by: By = None, key: str | None = None,
        version: str | None = None, queue: str = "default", application: str | None = None,
        traceparent: str | None = None, items: Sequence[NewItem] = (),
    ) -> str:
        """Start an execution; returns its eid. With ``key``, a second start (of the same
        application) returns the first eid. ``by`` is a string or a Principal; the execution
        belongs to ``application``, else to the principal's (None: single-tenant). Its spans
        join the trace of ``traceparent`` (a W3C header, or a bare trace id), else of the
        caller's current span (with tracing on). ``items`` are written in the write that
        creates the execution (none when a keyed start finds it)."""
        eid, _ = await self._start(workflow, args, by=by, key=key, version=version, queue=queue,
                                   application=application, traceparent=traceparent, items=items)
        return eid

    async def started(
        self, workflow: str | Callable[..., Any], *args: Any, by: By = None, key: str | None = None,
        version: str | None = None, queue: str = "default", application: str | None = None,
        traceparent: str | None = None, items: Sequence[NewItem] = (),
    ) -> tuple[ExecutionRecord, bool]:
        """Start an execution as ``start`` does; its record, and whether this call created it. The
        record of an execution this call created is the one its write stored, without a read (its
        ``updated_at``: when the start was asked); a keyed start that found its execution reads
        that one's."""
        eid, created = await self._start(workflow, args, by=by, key=key, version=version, queue=queue,
                                         application=application, traceparent=traceparent, items=items)
        if created is not None:
            return created, True
        return await self.status(eid, application=scope_of(by, application)), False

    async def _start(
        self, workflow: str | Callable[..., Any], args: tuple[Any, ...], *, by: By, key: str | None,
        version: str | None, queue: str, application: str | None, traceparent: str | None,
        items: Sequence[NewItem],
    ) -> tuple[str, ExecutionRecord | None]:
        """The eid of the execution, and the record its start stored (None: a keyed start that
        found it)."""
        app = scope_of(by, application)
        decider = self.registry.decider_of(workflow, version)
        if decider is not None:
            trace_ = start_context(traceparent) if traceparent is not None or self._rt.tracing is not None else None
            return await start_decided(self._rt, decider, args, by=by, key=key, queue=queue, application=app,
                                       trace=trace_, items=tuple(items))
        wf = self.registry.get(workflow, version)
        wf.bind(args)
        json_args = check_json(list(args), f"the arguments of workflow {wf.name!r}", "args")
        eid = keyed_eid(wf.name, key if app is None else f"{app}/{key}") if key is not None else new_eid()
        principal = principal_for(by, ENGINE_ACTOR, app)
        # a worker of this process with a free slot on the queue runs the execution at once: the
        # record is created with its first lease, so no START task goes through the queue
        worker = self._rt.slots.reserve(queue)
        trace_ = start_context(traceparent) if traceparent is not None or self._rt.tracing is not None else None
        new = new_execution(self._rt, wf, eid, json_args, queue=queue, key=key, actor=principal.actor,
                            leased=worker is not None, application=app, trace=trace_)
        new = dataclasses.replace(new, items=tuple(items))
        t = Transition("start", Write(intent=None if items else Intent.START, executions=[new]), eid, wf.name, principal, app,
                       {"args": json_args, "version": wf.version, "queue": queue, "key": key})
        try:
            result = await commit(self._rt, t)
        except BaseException:
            if worker is not None:
                worker.unreserve()
            raise
        if worker is not None:
            if result.created[0]:
                worker.adopt(new.record, entries_with_seqs([new.entry], [1]))
            else:
                worker.unreserve()
        return eid, new.record if result.created[0] else None

    async def status(self, eid: str, *, application: str | None = None) -> ExecutionRecord:
        """The execution record: status, result or error, version, lease state (live or archived)."""
        return await read_record(self._rt, self._archive, eid, application)

    async def decider_state(self, eid: str, *, application: str | None = None) -> tuple[int, Any]:
        """The stored state of a decider's execution and its version (the number of commands it
        applied; 0 and None before its start is decided), live or archived."""
        await read_record(self._rt, self._archive, eid, application)
        stored = await self._store.read_state(eid)
        if stored is None:
            archived = await asyncio.to_thread(self._archive.read, eid)
            kept = (archived or {}).get("decider_state")
            if isinstance(kept, dict):
                return int(kept["version"]), kept["state"]
        return stored if stored is not None else (0, None)

    async def decider_states(self, eids: Sequence[str], *, application: str | None = None) -> dict[str, tuple[int, Any]]:
        """``decider_state`` of many live executions in one read, by eid: those whose start was
        decided, of ``application`` when given (an archived one's is not read: its record says
        how it ended)."""
        if not eids:
            return {}
        states = await self._store.read_states_of(list(eids))
        if application is None or not states:
            return states
        mine = {r.eid for r in await self._store.read_executions(list(states)) if belongs(r.application, application)}
        return {eid: s for eid, s in states.items() if eid in mine}

    async def wait_suspended(self, eid: str, timeout: float | None = 30.0, *, application: str | None = None) -> ExecutionRecord:
        """Wait until the execution is suspended (its timers and waits are set: a test may advance
        its clock now) or terminal; returns its record."""
        return await await_suspended(self._rt, self._archive, eid, timeout, application,
                                     lambda e: self._held(e) is not None)

    async def statuses(self, eids: Sequence[str], *, application: str | None = None) -> builtins.list[ExecutionRecord]:
        """The live records of many executions at once (in no set order); unknown ones, archived
        ones and another application's are left out."""
        records = await self._store.read_executions(list(eids))
        return [r for r in records if belongs(r.application, application)]

    async def result(self, eid: str, timeout: float | None = None, *, application: str | None = None) -> Any:
        """Wait for a terminal status; return the value, or raise the execution's error."""
        record = await await_end(self._rt, self._archive, eid, timeout, application, lambda e: self._held(e) is not None)
        if record.status is Status.COMPLETED:
            return record.result
        error = record.error or {}
        if record.status is Status.CANCELLED:
            raise Cancelled(f"execution {eid} was cancelled")
        raise rebuild_error(eid, error, self.registry)

    async def watch(
        self, eid: str | None = None, after: int | None = None, *, application: str | None = None
    ) -> AsyncIterator[Entry]:
        """Every entry past seq ``after`` (None: from the first), then each new one as it comes:
        of the control log (the lifecycle entries of all executions, of ``application`` only when
        given), or, with ``eid``, of that execution's journal. Woken by the engine's own wake-ups
        (across processes on PostgreSQL by its notifications), never by a sleep loop; on SQLite,
        another process's appends are found by the slow poll (``poll_interval``). It ends when the
        caller stops iterating."""
        async for entry in watch(self._rt, self._archive, eid, after, application):
            yield entry

    async def control_log(
        self, after: int = 0, limit: int = 1000, *, application: str | None = None
    ) -> builtins.list[Entry]:
        """The control log past seq ``after``, oldest first, ``limit`` entries at most: the
        lifecycle entries of all executions (of ``application`` only, when given) and what
        workflows announced; the next page is past the last seq of this one. What ``watch()``
        follows, read once: an audit of what happened lately, a feed that polls. A lifecycle
        entry reaches it with the second append, a moment after its commit (``list`` waits for
        this process's own appends first; this read, like ``watch``, does not)."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        return await read_log(self._rt, self._archive, after, limit, application)

    async def signal(self, eid: str, channel: str, payload: Any, by: By = None, *,
                     application: str | None = None, items: Sequence[NewItem] = (), decision: bool = False) -> int:
        """Send one message to ``{eid}.{channel}`` and enqueue a RESUME; returns its sequence.
        ``items`` are written in the same write. ``decision``: the message is a person's answer to
        a decision the execution waits for (its transition says so: RBAC asks ``runs:decide`` for
        it instead of ``runs:operate``)."""
        return await ops.signal(self._rt, self._archive, eid, channel, payload, by, scope_of(by, application),
                                list(items), decision)

    async def announce(self, eid: str, kind: str, data: Any, by: By = None, *, application: str | None = None) -> int:
        """Append what happened to an execution from outside it (``kind``, JSON ``data``) to its
        journal, whatever its status, as an ``announced`` entry (no command: a decider's state
        and a workflow's replay ignore it); returns its seq."""
        return await ops.announce(self._rt, eid, kind, data, by, scope_of(by, application))

    async def broadcast(self, channel: str, payload: Any, by: By = None, *, application: str | None = None) -> int:
        """Send one message on a global channel and resume every waiter of it."""
        return await ops.broadcast(self._rt, channel, payload, by, scope_of(by, application))

    async def cancel(self, eid: str, by: By = None, *, application: str | None = None,
                     reason: str | None = None) -> None:
        """Request cancellation: a request in the lease state (with ``reason``, when given) plus a
        RESUME. Kills nothing."""
        await ops.cancel(self._rt, self._archive, eid, by, scope_of(by, application), reason)
        activation = self._held(eid)
        if activation is not None:
            activation.mark_cancel_requested()

    async def migrate(
        self, eid: str, version: str, by: By = None, *, force: bool = False, application: str | None = None
    ) -> None:
        """Point a suspended execution at another version of its workflow, and resume it. Refused
        (OperationRefused, naming the first difference) when that version does not replay its
        journal, checked by a replay that writes nothing and runs no step; ``force`` skips it."""
        await ops.migrate(self._rt, self._archive, self.registry, eid, version, by, scope_of(by, application), force)

    async def adopt(self, eid: str, version: str, state: Any, last_seq: int, by: By = None) -> bool:
        """Hand a workflow's execution to the decider ``version`` of its name from ``state``, folded by
        the caller from its journal up to ``last_seq``, in one write (see ``_adopt``). False when it
        is the decider's already; OperationRefused when its journal moved on or a worker holds it."""
        return await adopt(self._rt, eid, version, state, last_seq, by)

    async def replays(self, eid: str, version: str | None = None, *, application: str | None = None) -> Divergence | None:
        """Whether a version of the execution's workflow (default: its own) replays its journal:
        None, or where it leaves it. Writes nothing, runs no step."""
        record = await read_record(self._rt, self._archive, eid, application)
        wf = self.registry.get(record.workflow, version or record.version)
        return await dry_replay(self._rt, wf, record, await read_journal(self._rt, self._archive, eid, application))

    @property
    def workflow_cache(self) -> CacheFigures:
        """What this process's workflow cache holds and did: the suspended runs it keeps to
        continue without a replay, their memory (estimated), hits, misses and evictions."""
        return self._rt.cache.figures()

    @property
    def stats(self) -> Stats:
        """What this process counted (step attempts and failures by workflow, lease recoveries,
        sweeps, the latest timer lag), for ``flowli.metrics``."""
        return self._rt.stats

    def batch_sizes(self) -> dict[int, int]:
        """How many batches of each size this process's store writers committed."""
        return dict(self._store.batch_sizes)

    async def queue_depths(self, *, application: str | None = None) -> builtins.list[tuple[str, int, float]]:
        """Per queue with tasks ready to dequeue now: how many, and the age in seconds of the
        oldest (of ``application``'s tasks only, when it is given)."""
        now = self.clock.now()
        return [(q, n, max(0.0, now.timestamp() - at))
                for q, n, at in await self._store.queue_depths(now, application)]

    async def decider_counts(self) -> builtins.list[tuple[str, str | None, str | None, str | None, int]]:
        """How many executions each decider has, by application and by the name and label of
        their index (a pipeline's name and status), from the index rows: rows of decider,
        application, name, label, count."""
        return await self._store.read_decider_counts()

    async def activity(self, since: datetime, width: timedelta, *,
                       application: str | None = None) -> builtins.list[tuple[str, str | None, int, str, int]]:
        """The runs started and ended since ``since`` (executions without a parent; of
        ``application`` when it is given), counted per workflow and name (a decider's index
        name, such as a pipeline's; None for a workflow's runs), per interval of ``width`` from ``since`` (0, 1, ...) and per what happened:
        ``started``, ``completed``, ``failed`` or ``cancelled``."""
        if width <= timedelta(0):
            raise ValueError(f"width must be positive, got {width}")
        return await self._store.read_activity(since, width.total_seconds(), application)

    async def verify(self, registry: Registry, *, workflow: str | None = None, limit: int = 20) -> Verification:
        """Replay, in memory, every live execution and the newest ``limit`` finished ones of each
        workflow version against the code of ``registry`` (a deploy's new code): each one's first
        difference, if any. Writes nothing, runs no step, needs no worker or lease."""
        if not isinstance(limit, int) or limit < 0:
            raise ValueError(f"limit must be a number of executions >= 0, got {limit!r}")
        return await verify(self._rt, self._archive, self._projection, registry, workflow=workflow, limit=limit)

    async def retry(self, eid: str, by: By = None, *, reason: str | None = None,
                    application: str | None = None, signal: tuple[str, Any] | None = None) -> str | None:
        """Reopen a failed execution from its last good point: one journal entry records who and
        why; the replay keeps every memo and runs the failed frame again with a fresh attempt
        count (its failed child, if that is why, is reopened first). Refused (ExecutionStateError)
        for a run that is not failed. With ``signal`` (channel, payload), a message to the
        execution in the same write, so that the reopened run finds it. Returns the frame id
        reopened."""
        return await ops.retry(self._rt, self._archive, eid, by, reason, scope_of(by, application), signal)

    async def inspect(self, eid: str, *, application: str | None = None) -> tuple[ExecutionRecord, Any]:
        """The execution's record and what its workflow exposes (``ctx.expose``) when its journal
        is replayed in memory (nothing written, no frame run)."""
        record = await read_record(self._rt, self._archive, eid, application)
        journal = await read_journal(self._rt, self._archive, eid, application)
        wf = self.registry.get(record.workflow, record.version)
        return record, await inspect_run(self._rt, wf, record, journal)

    async def terminate(
        self, eid: str, reason: str, by: By = None, *, min_idle: timedelta = timedelta(minutes=10),
        expected_last_seq: int | None = None, application: str | None = None,
    ) -> None:
        """Append a failed terminal state (``Terminated``, with the reason and the actor) to a run
        confirmed stale; refused (OperationRefused) when it progressed within ``min_idle``, when a
        live worker holds its lease, or when ``expected_last_seq`` is given and its journal's last
        seq differs. Its open delegations are withdrawn and its parent resumed."""
        await ops.terminate(self._rt, self._archive, eid, reason, by, min_idle, expected_last_seq,
                            scope_of(by, application))

    async def explain(self, eid: str, *, application: str | None = None) -> Explanation:
        """What a run waits on: a timer and its instant, a message on a channel, a child, a
        DELEGATE task on a queue, a queue that no live worker serves, an expired lease."""
        return await explain(self._rt, self._archive, eid, application)

    async def workers(self, *, seen_within: timedelta | None = None) -> builtins.list[dict[str, Any]]:
        """The workers seen within ``seen_within`` (default: the lease TTL): id, kind, queues,
        started_at, seen_at."""
        window = seen_within if seen_within is not None else self.options.lease_ttl
        return await self._store.read_workers(self.clock.now() - window)

    async def journal(self, eid: str, *, application: str | None = None) -> builtins.list[Entry]:
        """Every entry of the execution, live or archived."""
        return await read_journal(self._rt, self._archive, eid, application)

    async def journal_page(
        self, eid: str, *, fid: str | None = None, kind: str | None = None, attempt: int | None = None,
        before: int | None = None, limit: int = 200, application: str | None = None,
    ) -> tuple[builtins.list[Entry], int]:
        """The newest ``limit`` entries of the execution's journal below seq ``before`` (None: from
        its last), of frame ``fid``, entry kind ``kind`` and attempt ``attempt`` when given, newest
        first; and how many entries those filters match in all. A long journal is read a page at a
        time this way, never whole."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        f = JournalFilter(fid, kind, attempt)
        return await ops.read_journal_page(self._rt, self._archive, eid, f, before, limit, application)

    async def run_view(self, eid: str, *, application: str | None = None) -> RunView:
        """The frames of a run as a tree: kind, status, attempts, timing and waits (from its
        journal, live or archived)."""
        record = await read_record(self._rt, self._archive, eid, application)
        return run_view(record, await read_journal(self._rt, self._archive, eid, application))

    async def retain(self) -> int:
        """Run one retention pass now (the sweeper runs them every ``retention_interval``):
        archive each execution finished more than ``retention`` ago; returns how many."""
        return await retain(self._rt, self._archive)

    async def archived(self, eid: str) -> dict[str, Any] | None:
        """The archive object of an execution, or None while it is live."""
        return await asyncio.to_thread(self._archive.read, eid)

    async def list(
        self, status: Status | str | None = None, workflow: str | None = None, limit: int = 100, *,
        application: str | None = None, cursor: str | None = None, since: datetime | None = None,
        until: datetime | None = None,
    ) -> ExecutionPage:
        """Executions from the projection, newest first, a page at a time: pass a page's ``next``
        as ``cursor`` for the one after it. The page also counts the executions per status.
        ``since`` and ``until`` bound the creation time (``since`` included, ``until`` not).
        ``status="blocked"`` lists the suspended ones that wait for an operator (a nondeterminism)."""
        await self._rt.announcer.drain()  # read your own writes: this process's control-log appends first
        return await self._projection.list(status, workflow, limit, application, cursor, since, until)

    async def log_position(self) -> int:
        """The seq of the last control-log entry ``list`` has seen: ``watch(after=...)`` of it
        follows what comes after the page just listed."""
        await self._rt.announcer.drain()
        return await self._projection.position("executions")

    def project(self, projector: Projector) -> None:
        """Register a projector: a view of the control log that this engine keeps in the
        projection (idempotent for the same projector; another one under its name is refused)."""
        self._projection.register(projector)

    async def read_view(self, name: str, sql: str, params: Sequence[Any] = ()) -> builtins.list[tuple[Any, ...]]:
        """Rows of a SELECT on the tables of projector ``name``, once it applied the control log
        (this process's own appends included)."""
        await self._rt.announcer.drain()
        return await self._projection.read(name, sql, params)

    async def answer(self, task_id: str, value: Any, by: By = None, *, application: str | None = None,
                     decision: bool = False) -> int | None:
        """Answer a DELEGATE task (a review, a delegate) as ``by``, whoever holds its lease; resumes
        its execution. UnknownTaskError when there is no open task with that id (of the application).
        ``decision``: the answer is a person's decision (a review's: see ``signal``)."""
        app = scope_of(by, application)
        task = await self._store.read_task(task_id)
        if task is None or task.state != "ready" or task.kind is not TaskKind.DELEGATE or \
                (app is not None and task.application != app):
            raise UnknownTaskError(task_id)
        return await settle(self._rt, "engine", task, value, None, by, TaskHold(task.id), decision=decision)

    def consumer(
        self, queue: str | Sequence[str], name: str, lease: timedelta = timedelta(minutes=5), *,
        application: str | None = None,
    ) -> Consumer:
        """A consumer of the DELEGATE tasks of ``queue`` (a name or a list of names; of
        ``application`` only, when given): dequeue (a long poll with ``wait``), read, renew,
        answer, fail, ack, nack."""
        return Consumer(self._rt, queue, name, lease, application)

    # ---- schedules ------------------------------------------------------------------------

    async def schedule(
        self, name: str, workflow: str | Callable[..., Any], *args: Any, cron: str | None = None,
        timezone: str | None = None, interval: float | None = None, at: datetime | str | None = None,
        application: str | None = None,
    ) -> dict[str, Any]:
        """Start ``workflow(*args)`` at each firing of a trigger: ``cron`` (with ``timezone``),
        ``interval`` seconds, or once ``at`` an instant. Each firing starts exactly one execution
        however many processes run a worker with a sweeper. Returns the schedule."""
        wf = self.registry.get(workflow)
        wf.bind(args)
        target = {"kind": "workflow", "workflow": wf.name,
                  "args": check_json(list(args), f"the arguments of schedule {name!r}", "args")}
        return await self.add_schedule(name, target, cron=cron, timezone=timezone, interval=interval, at=at,
                                       application=application)

    async def add_schedule(self, name: str, target: dict[str, Any], *, cron: str | None = None,
                           timezone: str | None = None, interval: float | None = None,
                           at: datetime | str | None = None, application: str | None = None) -> dict[str, Any]:
        """Store a schedule whose firings start ``target`` (``{"kind": ...}``: "workflow", or a
        kind a layer above registered with ``on_fire``)."""
        if not isinstance(name, str) or not name.strip():
            raise sched.ScheduleError("a schedule needs a name")
        if len(name) > sched.MAX_NAME:
            raise sched.ScheduleError(f"name is longer than {sched.MAX_NAME} characters")
        t = sched.trigger(cron, timezone, interval, at.isoformat() if isinstance(at, datetime) else at)
        now = self.clock.now()
        body = {"name": name, "trigger": t, "target": target, "state": "enabled", "createdAt": now.isoformat(),
                "nextFireAt": sched.iso(sched.next_fire(t, now, now)), "lastFireAt": None, "firings": 0}
        item, created = await self._store.items().put(sched.SCHEDULE, application or "", name, body, now)
        if not created:
            raise sched.ScheduleError(f"schedule {name!r} exists already (id {item.id})")
        self._rt.wakeups.timers.set()
        return {"id": item.id, **item.body}

    def on_fire(self, kind: str, fire: sched.Firer) -> None:
        """Register what a firing of a schedule of target kind ``kind`` starts."""
        self._firers[kind] = fire

    async def fire_schedules(self) -> int:
        """Fire every due schedule of every application once; returns the firings this call
        started (another process may have started some of them: a firing is keyed)."""
        now = self.clock.now()
        fired = 0
        for item in await self._store.items().list(sched.SCHEDULE, None):
            body = item.body
            due = body.get("nextFireAt")
            if body.get("state") != "enabled" or due is None or sched.parse_instant(due, "nextFireAt") > now:
                continue
            instant = sched.parse_instant(due, "nextFireAt")
            target = body["target"]
            created = datetime.fromisoformat(body["createdAt"])
            following = sched.next_fire(body["trigger"], max(instant, now), created)
            advanced = {**body, "nextFireAt": sched.iso(following), "lastFireAt": sched.iso(instant),
                        "firings": body.get("firings", 0) + 1}
            # the run starts with the schedule advanced past this firing, in one write, while the
            # schedule is as read here: paused, deleted or fired elsewhere since, nothing starts
            advance = [NewItem(sched.SCHEDULE, item.application, item.key, advanced, replace=True, expect=body)]
            try:
                if target["kind"] == "workflow":
                    await self.start(target["workflow"], *target["args"], key=sched.firing_key(item, instant),
                                     application=item.application or None, items=advance)
                else:
                    await self._firers[target["kind"]](item, instant, advance)
            except StaleItem:
                continue  # not this process's firing any more
            except Exception:  # one schedule's failure does not stop the others
                log.exception("schedule %s (id %d) failed to fire at %s", body.get("name"), item.id, due)
            # a run of this firing that existed already (a process that died after starting it, before
            # the schedule was advanced) or a start that failed: advanced here unless another process
            # did; an operator's pause or resume meanwhile is kept (the body changes only as it was
            # read, else it is read again)
            while True:
                fresh = await self._store.items().get(sched.SCHEDULE, item.id)
                if fresh is None or fresh.body.get("nextFireAt") != due:
                    break
                if await self._store.items().update(sched.SCHEDULE, item.id, {
                        **fresh.body, "nextFireAt": sched.iso(following), "lastFireAt": sched.iso(instant),
                        "firings": fresh.body.get("firings", 0) + 1}, now, expect=fresh.body):
                    break
            fired += 1
        return fired

    async def _schedule_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.fire_schedules()
            except Exception:
                log.exception("firing schedules failed; trying again")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.options.schedule_interval)

    @property
    def items(self) -> Items:
        """The store's items: the named records of the layers above (applications, keys,
        pipeline ids, policies, schedules), scoped by application (see ``flowli.store.Item``)."""
        return self._store.items()

    async def sweep(self) -> int:
        """Run one sweep now (the worker runs them on its own)."""
        from ._sweeper import Sweeper

        return await Sweeper(self._rt).sweep()
