"""Replay: one activation of an execution, from the lease to suspension or the end.

An activation reads the journal, builds the memo table, and runs the workflow function again
from its first line. A frame with a memo returns it without running; the first frame with no
memo runs. When every live frame waits, the execution suspends: the activation appends
``execution.suspended`` with what it waits for, releases the lease, and ends.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import inspect
import random as _random
import uuid as _uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Awaitable, Callable, Literal, TypeVar

from flowli.domain import (
    NO_RETRY,
    Cancelled,
    Code,
    Entry,
    EntryKind,
    ExecutionRecord,
    FrameKind,
    LeaseLost,
    NondeterminismError,
    NonRetryableError,
    NotJSONCompatibleError,
    Provenance,
    RetryPolicy,
    Status,
    StepFailed,
    Task,
    TaskKind,
    Timer,
    check_json,
    child_eid,
    digest,
    task_id,
)
from flowli.domain import (
    FlowliError as FlowliErrorBase,
)
from flowli.log import Attempt, attempt_scope
from flowli.store import (
    Announcement,
    Claim,
    Fence,
    NewExecution,
    NewMessage,
    StatusChange,
    WakeCheck,
    WakeWaiters,
    Withdrawal,
    Write,
    WriteResult,
)

from ._context import Context, Scope
from ._registry import WorkflowDef
from ._runtime import Runtime, entries_with_seqs, error_data
from ._tasks import cancel_and_wait
from ._threads import STEP_THREADS

ROOT = "root"
T = TypeVar("T")

STARTED_AFTER = 0.05
"""Seconds a local step runs before its frame.started is written on its own. A step done sooner
writes frame.started and its outcome in one write: a crash inside that window leaves no trace of
the attempt, which then runs again under the same attempt number (at least once, as always)."""


class _Closed(BaseException):
    """The activation is ending: no frame may write any more."""


class StoreFailure(BaseException):
    """The store failed under a frame (a lost connection, too many clients): not the workflow's
    failure, so the workflow cannot catch it; the activation ends and the worker hands the
    execution back."""

    def __init__(self, cause: BaseException):
        self.cause = cause
        super().__init__(f"the store failed: {type(cause).__name__}: {cause}")


async def store_call(call: Awaitable[T]) -> T:
    """Await a store call; a failure of the store itself becomes a StoreFailure."""
    try:
        return await call
    except (LeaseLost, asyncio.CancelledError, FlowliErrorBase):
        raise
    except Exception as exc:
        raise StoreFailure(exc) from exc


@dataclass(frozen=True)
class Wait:
    """What a waiting frame waits for."""

    fid: str
    kind: Literal["timer", "message", "child", "step"]
    at: datetime | None = None
    channel: str | None = None
    after: int = 0
    child: str | None = None

    def describe(self) -> dict[str, Any]:
        data: dict[str, Any] = {"fid": self.fid, "kind": self.kind}
        if self.at is not None:
            data["until"] = self.at.isoformat()
        if self.channel is not None:
            data["channel"] = self.channel
            data["after"] = self.after
        if self.child is not None:
            data["child"] = self.child
        return data


def new_execution(
    rt: Runtime,
    wf: WorkflowDef,
    eid: str,
    args: list[Any],
    *,
    queue: str,
    key: str | None = None,
    parent: tuple[str, str] | None = None,
    actor: Any = None,
    on_behalf_of: str | None = None,
    leased: bool = False,
) -> NewExecution:
    """The record, first entry and START task of an execution that does not exist yet. With
    ``leased``, the record holds the first lease for this process (epoch 1) and there is no START
    task: a worker of this process runs the execution at once (a direct start)."""
    now = rt.clock.now()
    prov = rt.provenance(
        actor=actor, code=Code(wf.name, wf.version, FrameKind.ROOT.value, ROOT, wf.ref), on_behalf_of=on_behalf_of
    )
    record = ExecutionRecord(
        eid=eid, workflow=wf.name, version=wf.version, status=Status.PENDING, args=args, queue=queue,
        created_at=now, updated_at=now, parent_eid=parent[0] if parent else None,
        parent_fid=parent[1] if parent else None, key=key,
    )
    if leased:
        record = dataclasses.replace(
            record, status=Status.RUNNING, lease_owner=rt.owner, lease_epoch=1,
            lease_expires_at=now + rt.options.lease_ttl,
        )
    entry = Entry(
        eid=eid, kind=EntryKind.EXECUTION_STARTED, provenance=prov, fid=ROOT,
        value={"workflow": wf.name, "version": wf.version, "args": args, "queue": queue,
               "parent_eid": record.parent_eid, "parent_fid": record.parent_fid},
    )
    task = None if leased else Task(
        id=task_id(TaskKind.START, eid), kind=TaskKind.START, queue=queue, eid=eid, payload=None,
        provenance=prov, visible_at=now,
    )
    return NewExecution(record, entry, task)


def import_ref(ref: str) -> Callable[..., Any]:
    module, _, qualname = ref.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{ref} is not callable")
    return obj  # type: ignore[no-any-return]


async def run_function(fn: Callable[..., Any], args: Any, kwargs: dict[str, Any]) -> Any:
    """Run a step function: a coroutine function on the loop, a plain one off it."""
    if inspect.iscoroutinefunction(fn):
        return await fn(*args, **kwargs)
    result = await STEP_THREADS.run(fn, args, kwargs)
    if inspect.isawaitable(result):
        result = await result
    return result


def failure_entry_value(policy: RetryPolicy, attempt: int, exc: BaseException, now: datetime) -> dict[str, Any]:
    final = isinstance(exc, (NonRetryableError, NotJSONCompatibleError)) or attempt >= policy.max_attempts
    value: dict[str, Any] = {"final": final}
    if not final:
        value["retry_at"] = (now + policy.delay_after(attempt)).isoformat()
    return value


def policy_json(policy: RetryPolicy) -> dict[str, Any]:
    return {
        "max_attempts": policy.max_attempts,
        "backoff": policy.backoff.total_seconds(),
        "backoff_factor": policy.backoff_factor,
        "max_backoff": policy.max_backoff.total_seconds(),
    }


def policy_from_json(data: dict[str, Any]) -> RetryPolicy:
    return RetryPolicy(
        max_attempts=data["max_attempts"],
        backoff=timedelta(seconds=data["backoff"]),
        backoff_factor=data["backoff_factor"],
        max_backoff=timedelta(seconds=data["max_backoff"]),
    )


def step_failed(fid: str, entry: Entry, attempts: int) -> StepFailed:
    error = entry.error or {}
    return StepFailed(fid, error.get("type", "Error"), error.get("message", ""), attempts)


class Activation(Context):
    """The Context implementation: one run of the workflow function under one lease."""

    def __init__(self, rt: Runtime, wf: WorkflowDef, record: ExecutionRecord, epoch: int, journal: list[Entry]):
        self.rt = rt
        self.wf = wf
        self.record = record
        self.epoch = epoch
        self.fence = Fence(record.eid, rt.owner, epoch)
        self.started: dict[str, Entry] = {}
        self.attempts_started: set[tuple[str, int]] = set()
        self.outcome: dict[str, Entry] = {}
        self.failures: dict[str, list[Entry]] = defaultdict(list)
        self.cursors: dict[str, int] = {}
        self.last_seq = 0
        armed: Any = None  # the waits of the last suspension: its timers and waiters are still set
        for e in journal:
            if e.kind is EntryKind.EXECUTION_SUSPENDED:
                armed = (e.value or {}).get("waits") if isinstance(e.value, dict) else None
            self.last_seq = max(self.last_seq, e.seq or 0)
            if e.fid is None:
                continue
            if e.kind is EntryKind.FRAME_STARTED:
                self.started.setdefault(e.fid, e)
                self.attempts_started.add((e.fid, e.attempt or 1))
            elif e.kind is EntryKind.FRAME_COMPLETED:
                self.outcome.setdefault(e.fid, e)
                if isinstance(e.value, dict) and e.provenance.code.frame_kind == FrameKind.RECEIVE.value:
                    ch, seq = e.value["channel"], e.value["seq"]
                    self.cursors[ch] = max(self.cursors.get(ch, 0), seq)
            elif e.kind is EntryKind.FRAME_FAILED:
                if e.fid in self.outcome:
                    continue
                self.failures[e.fid].append(e)
                if isinstance(e.value, dict) and e.value.get("final"):
                    self.outcome.setdefault(e.fid, e)
        self.armed_timers = bool(armed) and any("until" in w for w in armed)
        self.armed_waiters = bool(armed) and any("channel" in w for w in armed)
        self.counters: dict[tuple[str, str], int] = defaultdict(int)
        self.visited: set[str] = set()
        self.waits: dict[str, Wait] = {}
        self.pending: list[Entry] = []
        if len(journal) > 1 or any(e.kind is not EntryKind.EXECUTION_STARTED for e in journal):
            self.pending.append(self._entry(EntryKind.EXECUTION_RESUMED, ROOT, FrameKind.ROOT, value={"epoch": epoch}))
        self.live = 0
        self.changed = asyncio.Event()
        self.channel_locks: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self.cancel_requested = record.cancel_requested is not None
        self.nondeterminism: NondeterminismError | None = None
        self.lost = False
        self.closing = False
        self.frame_tasks: set[asyncio.Task[Any]] = set()
        self.terminal_entry: Entry | None = None

    # ---- identity -------------------------------------------------------------------------

    @property
    def eid(self) -> str:
        return self.record.eid

    @property
    def workflow(self) -> str:
        return self.wf.name

    @property
    def version(self) -> str:
        return self.wf.version

    # ---- the run --------------------------------------------------------------------------

    async def run(self) -> Status:
        """Run the workflow until it ends or suspends; returns the status it left."""
        if self.record.blocked is not None and self.cancel_requested:
            return await self._end(Status.CANCELLED, error={"type": "Cancelled", "message": "cancelled while blocked"})
        wf_task: asyncio.Task[Any] = asyncio.create_task(self.wf.fn(self, *self.record.args))
        try:
            return await self._drive(wf_task)
        except asyncio.CancelledError:
            # the worker stops: end every task of this activation, write nothing
            await self._close(wf_task)
            raise

    async def _drive(self, wf_task: asyncio.Task[Any]) -> Status:
        wf_task.add_done_callback(lambda _: self.changed.set())
        while True:
            # clear before checking: a change during the checks (which yield) sets it again
            self.changed.clear()
            if wf_task.done():
                break
            if self.lost:
                await self._close(wf_task)
                raise LeaseLost(self.eid, self.epoch)
            if self._quiescent() and await self._settled(wf_task):
                await self._close(wf_task)
                if self.nondeterminism is None:
                    self._check_all_visited()
                return await (self._block() if self.nondeterminism is not None else self._suspend())
            await self.changed.wait()
        await self._close(wf_task, finished=True)
        exc = wf_task.exception() if not wf_task.cancelled() else Cancelled("the workflow task was cancelled")
        if self.lost:
            raise LeaseLost(self.eid, self.epoch)
        if isinstance(exc, StoreFailure):
            raise exc.cause  # the worker hands the execution back
        if isinstance(exc, LeaseLost):
            raise exc
        if self.nondeterminism is None:
            self._check_all_visited()
        if self.nondeterminism is not None:
            return await self._block()
        if exc is None:
            try:
                value = check_json(wf_task.result(), f"the result of workflow {self.wf.name!r}")
            except NotJSONCompatibleError as bad:
                return await self._end(Status.FAILED, error=error_data(bad))
            return await self._end(Status.COMPLETED, result=value)
        if isinstance(exc, Cancelled):
            return await self._end(Status.CANCELLED, error=error_data(exc) | {"by": self.record.cancel_requested})
        if isinstance(exc, StepFailed):
            return await self._end(Status.FAILED, error=error_data(exc) | {
                "fid": exc.fid, "cause": exc.error_type, "cause_message": exc.message, "attempts": exc.attempts})
        if isinstance(exc, Exception):
            return await self._end(Status.FAILED, error=error_data(exc))
        raise exc

    def _quiescent(self) -> bool:
        return self.live == 0 and bool(self.waits)

    async def _settled(self, wf_task: asyncio.Task[Any]) -> bool:
        """Whether every live frame waits, and stays so for a few turns of the loop (a frame
        that just completed may be about to resume the workflow, which creates more)."""
        for _ in range(4):
            if not self._quiescent() or wf_task.done():
                return False
            await asyncio.sleep(0)
        return self._quiescent() and not wf_task.done()

    async def _close(self, wf_task: asyncio.Task[Any], finished: bool = False) -> None:
        self.closing = True
        await cancel_and_wait([*self.frame_tasks, *([] if finished else [wf_task])])

    def mark_lost(self) -> None:
        self.lost = True
        self.changed.set()

    def mark_cancel_requested(self) -> None:
        self.cancel_requested = True

    # ---- writes ---------------------------------------------------------------------------

    def _entry(
        self,
        kind: EntryKind,
        fid: str,
        frame_kind: FrameKind,
        *,
        name: str | None = None,
        attempt: int | None = None,
        dig: str | None = None,
        value: Any = None,
        error: dict[str, Any] | None = None,
        ref: str | None = None,
    ) -> Entry:
        code = Code(self.wf.name, self.wf.version, frame_kind.value, name or fid.rsplit("/", 1)[-1], ref or self.wf.ref)
        return Entry(
            eid=self.eid, kind=kind, fid=fid, attempt=attempt, digest=dig, value=value, error=error,
            provenance=self.rt.provenance(epoch=self.epoch, code=code, attempt=attempt),
        )

    async def _write(self, write: Write, *, final: bool = False) -> WriteResult:
        if self.closing and not final:
            raise _Closed()
        if self.lost:
            raise LeaseLost(self.eid, self.epoch)
        if self.pending:
            shift = len(self.pending)
            write.entries = self.pending + write.entries
            # every effect whose memo points at an entry (a message, a withdrawal, a claim, an
            # announcement) moves with it
            for f in dataclasses.fields(write):
                items = getattr(write, f.name)
                if isinstance(items, list) and items and hasattr(items[0], "memo"):
                    setattr(write, f.name, [_shift(item, shift) for item in items])
            self.pending = []
        write.fence = self.fence
        try:
            result = await store_call(self.rt.store.write(write, self.rt.clock.now()))
        except LeaseLost:
            self.mark_lost()
            raise
        if result.entry_seqs:
            self.last_seq = max(self.last_seq, *result.entry_seqs)
        if write.tasks or result.woke or result.created:
            self.rt.work.set()
        if any(e.kind.lifecycle for e in write.entries):
            # the second append: lifecycle entries onto the control log
            self.rt.mirror_soon(entries_with_seqs(write.entries, result.entry_seqs))
        return result

    # ---- frames ---------------------------------------------------------------------------

    def _frame(self, name: str, key: str | None, kind: FrameKind, dig: str) -> tuple[str, Entry | None]:
        """Assign the frame id (at call time) and check it against the journal.

        Returns the fid and its outcome entry when the frame has one (its memo, or its final failure).
        """
        parent = ROOT
        # n counts the frames with that name under the parent, keyed ones included
        n = self.counters[(parent, name)]
        self.counters[(parent, name)] = n + 1
        if key is None:
            fid = f"{parent}/{name}#{n}"
        else:
            key = str(key)
            if "/" in key:
                raise ValueError(f"frame key {key!r} of {parent}/{name} must not contain '/'")
            fid = f"{parent}/{name}:{key}"
        if fid in self.visited:
            from flowli.domain import DuplicateFrameError

            raise DuplicateFrameError(fid)
        self.visited.add(fid)
        if self.nondeterminism is not None:
            raise self.nondeterminism
        started = self.started.get(fid)
        if started is not None:
            was = started.provenance.code.frame_kind
            if was != kind.value:
                self._nondeterministic(fid, f"the journal holds a {was} frame here, the code a {kind.value} frame")
            if started.digest != dig:
                self._nondeterministic(
                    fid, f"the arguments changed (digest {started.digest} in the journal, {dig} now)"
                )
        outcome = self.outcome.get(fid)
        if outcome is None and self.cancel_requested and not self.closing:
            raise Cancelled(f"execution {self.eid} was cancelled (seen at frame {fid})")
        return fid, outcome

    def _nondeterministic(self, fid: str, detail: str) -> None:
        self.nondeterminism = NondeterminismError(self.eid, fid, detail)
        raise self.nondeterminism

    def _check_all_visited(self) -> None:
        missed = sorted(set(self.started) - self.visited)
        if missed:
            self.nondeterminism = NondeterminismError(
                self.eid, missed[0], f"the journal holds {len(missed)} frame(s) that this code never created: "
                + ", ".join(missed[:5])
            )

    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        self.live += 1

        async def run() -> Any:
            try:
                return await coro
            finally:
                self.live -= 1
                self.changed.set()

        task = asyncio.ensure_future(run())
        self.frame_tasks.add(task)
        task.add_done_callback(self.frame_tasks.discard)
        return task

    def _done(self, value: Any = None, exc: BaseException | None = None) -> asyncio.Future[Any]:
        fut = asyncio.get_running_loop().create_future()
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(value)
        return fut

    async def _wait(self, wait: Wait) -> Any:
        """The frame waits: the activation suspends once every live frame waits."""
        self.waits[wait.fid] = wait
        self.live -= 1
        self.changed.set()
        try:
            await asyncio.get_running_loop().create_future()  # resolved by a later activation
        finally:
            self.live += 1

    def _outcome_value(self, fid: str, outcome: Entry) -> asyncio.Future[Any]:
        if outcome.kind is EntryKind.FRAME_FAILED:
            return self._done(exc=step_failed(fid, outcome, len(self.failures[fid])))
        return self._done(outcome.value)

    # -- step

    def step(
        self,
        fn: Callable[..., Any],
        /,
        *args: Any,
        key: str | None = None,
        retry: RetryPolicy | None = None,
        queue: str | None = None,
        **kwargs: Any,
    ) -> Awaitable[Any]:
        name = getattr(fn, "__name__", None) or type(fn).__name__
        json_args, json_kwargs = check_json(
            [list(args), kwargs], f"the arguments of step {name!r} in workflow {self.wf.name!r}"
        )
        dig = digest([json_args, json_kwargs] if kwargs else json_args)
        fid, outcome = self._frame(name, key, FrameKind.STEP, dig)
        if outcome is not None:
            return self._outcome_value(fid, outcome)
        policy = retry or NO_RETRY
        if queue is not None:
            return self._spawn(self._remote_step(fid, name, fn, json_args, json_kwargs, dig, policy, queue))
        return self._spawn(self._local_step(fid, name, fn, args, kwargs, policy, dig))

    async def _retry_gate(self, fid: str, name: str) -> int:
        """The number of the next attempt; waits on a timer while a retry delay runs."""
        failures = self.failures[fid]
        if failures:
            retry_at = datetime.fromisoformat(failures[-1].value["retry_at"])
            if retry_at > self.rt.clock.now():
                await self._wait(Wait(fid, "timer", at=retry_at))
        return len(failures) + 1

    async def _local_step(
        self, fid: str, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
        policy: RetryPolicy, dig: str,
    ) -> Any:
        ref = f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', name)}"
        while True:
            attempt = await self._retry_gate(fid, name)
            started = self._entry(EntryKind.FRAME_STARTED, fid, FrameKind.STEP, name=name, attempt=attempt, dig=dig, ref=ref)
            # frame.started goes to the store while the function runs, unless the function is done
            # within STARTED_AFTER: then frame.started and the outcome share one write (one round
            # trip per step). A store applies the writes of one execution in order, so an outcome
            # is never appended before its start.
            sent: list[asyncio.Future[WriteResult]] = []
            timer = asyncio.get_running_loop().call_later(STARTED_AFTER, self._send_started, started, sent)
            try:
                with attempt_scope(Attempt(self.eid, fid, attempt, self.rt.bucket)):
                    value = await run_function(fn, args, kwargs)
                value = check_json(value, f"the value of step {fid}")
                exc: Exception | None = None
            except Exception as e:  # the step's failure is an outcome, journaled
                exc = e
            finally:
                timer.cancel()
            for started_write in sent:
                await started_write
            before = [] if sent else [started]
            if exc is None:
                entry = self._entry(EntryKind.FRAME_COMPLETED, fid, FrameKind.STEP, name=name, attempt=attempt, value=value, ref=ref)
                await self._write(Write(entries=[*before, entry]))
                self.outcome[fid] = entry
                return value
            now = self.rt.clock.now()
            fail_value = failure_entry_value(policy, attempt, exc, now)
            entry = self._entry(
                EntryKind.FRAME_FAILED, fid, FrameKind.STEP, name=name, attempt=attempt, value=fail_value,
                error=error_data(exc), ref=ref,
            )
            await self._write(Write(entries=[*before, entry]))
            self.failures[fid].append(entry)
            if fail_value["final"]:
                self.outcome[fid] = entry
                raise step_failed(fid, entry, attempt) from exc

    def _send_started(self, started: Entry, sent: list[asyncio.Future[WriteResult]]) -> None:
        """Write the frame.started of a step that runs longer than STARTED_AFTER on its own."""
        if not self.closing:
            sent.append(asyncio.ensure_future(self._write(Write(entries=[started]))))

    async def _remote_step(
        self, fid: str, name: str, fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any], dig: str,
        policy: RetryPolicy, queue: str,
    ) -> Any:
        ref = f"{fn.__module__}:{fn.__qualname__}"
        if "<locals>" in ref:
            raise ValueError(f"step {fid} runs on queue {queue!r}, so {ref} must be a module-level function")
        attempt = await self._retry_gate(fid, name)
        write = Write()
        if (fid, attempt) not in self.attempts_started:
            write.entries.append(
                self._entry(EntryKind.FRAME_STARTED, fid, FrameKind.STEP, name=name, attempt=attempt, dig=dig, ref=ref)
            )
        payload = {"fid": fid, "ref": ref, "args": args, "kwargs": kwargs, "attempt": attempt,
                   "retry": policy_json(policy), "workflow": self.wf.name, "version": self.wf.version}
        write.tasks.append(Task(
            id=task_id(TaskKind.RUN_STEP, self.eid, f"{fid}@{attempt}"), kind=TaskKind.RUN_STEP, queue=queue,
            eid=self.eid, payload=payload, provenance=self.rt.provenance(epoch=self.epoch, attempt=attempt),
            visible_at=self.rt.clock.now(),
        ))
        await self._write(write)
        self.attempts_started.add((fid, attempt))
        await self._wait(Wait(fid, "step"))

    # -- internal steps: now, random, uuid

    def _internal(self, name: str, produce: Callable[[], Any], convert: Callable[[Any], Any]) -> Awaitable[Any]:
        fid, outcome = self._frame(name, None, FrameKind.STEP, digest([]))
        if outcome is not None:
            return self._done(convert(outcome.value))

        async def run() -> Any:
            value = produce()
            await self._write(Write(entries=[
                self._entry(EntryKind.FRAME_STARTED, fid, FrameKind.STEP, attempt=1, dig=digest([])),
                self._entry(EntryKind.FRAME_COMPLETED, fid, FrameKind.STEP, attempt=1, value=value),
            ]))
            return convert(value)

        return self._spawn(run())

    def now(self) -> Awaitable[datetime]:
        return self._internal("now", lambda: self.rt.clock.now().isoformat(), datetime.fromisoformat)

    def random(self) -> Awaitable[float]:
        return self._internal("random", _random.random, float)

    def uuid(self) -> Awaitable[str]:
        return self._internal("uuid", lambda: str(_uuid.uuid4()), str)

    # -- effect steps: send, announce, enqueue, withdraw. The effect and the memo are one write.

    def _effect(self, name: str, args: Any, make: Callable[[str, Provenance], tuple[Any, Write]]) -> Awaitable[Any]:
        """``make(fid, provenance)`` gives the memo (or None when the store fills it in) and the
        write of the effect, whose memo references point at entry 1, the frame.completed."""
        args = check_json(args, f"the arguments of {name} in workflow {self.wf.name!r}")
        dig = digest(args)
        fid, outcome = self._frame(name, None, FrameKind.STEP, dig)
        if outcome is not None:
            return self._done(outcome.value)

        async def run() -> Any:
            prov = self.rt.provenance(epoch=self.epoch, code=Code(self.wf.name, self.wf.version, "step", name), attempt=1)
            value, write = make(fid, prov)
            completed = self._entry(EntryKind.FRAME_COMPLETED, fid, FrameKind.STEP, attempt=1, value=value)
            write.entries = [self._entry(EntryKind.FRAME_STARTED, fid, FrameKind.STEP, attempt=1, dig=dig), completed]
            result = await self._write(write)
            value = result.entry_values[next(i for i, e in enumerate(write.entries) if e is completed)]
            self.outcome[fid] = Entry(**{**completed.__dict__, "value": value})
            return value

        return self._spawn(run())

    def channel_name(self, channel: str, scope: Scope) -> str:
        if scope == "execution":
            return f"{self.eid}.{channel}"
        if scope == "global":
            return channel
        raise ValueError(f"scope must be 'execution' or 'global', got {scope!r}")

    def send(self, channel: str, payload: Any, scope: Scope = "execution") -> Awaitable[int]:
        full = self.channel_name(channel, scope)

        def make(fid: str, prov: Provenance) -> tuple[Any, Write]:
            write = Write(messages=[NewMessage(full, payload, prov, memo=1)])
            if scope == "global":
                write.wake_waiters = [WakeWaiters(full, f"send:{self.eid}:{fid}", prov)]
            return None, write

        return self._effect("send", [full, payload], make)

    def announce(self, kind: str, data: Any) -> Awaitable[int]:
        def make(fid: str, prov: Provenance) -> tuple[Any, Write]:
            entry = Entry(eid=self.eid, kind=EntryKind.ANNOUNCED, provenance=prov, fid=fid, value={"kind": kind, "data": data})
            return None, Write(announcements=[Announcement(entry, memo=1)])

        return self._effect("announce", [kind, data], make)

    def enqueue(self, queue: str, kind: TaskKind | str, payload: Any, key: str | None = None) -> Awaitable[str]:
        task_kind = TaskKind(kind)

        def make(fid: str, prov: Provenance) -> tuple[Any, Write]:
            tid = task_id(task_kind, self.eid, key or fid)
            task = Task(id=tid, kind=task_kind, queue=queue, eid=self.eid, payload=payload, provenance=prov,
                        visible_at=self.rt.clock.now())
            return tid, Write(tasks=[task])

        return self._effect("enqueue", [queue, task_kind.value, payload, key], make)

    def withdraw(self, task_id: str) -> Awaitable[bool]:
        def make(fid: str, prov: Provenance) -> tuple[Any, Write]:
            return None, Write(withdrawals=[Withdrawal(task_id, memo=1)])

        return self._effect("withdraw", [task_id], make)

    def claim(self, key: str) -> Awaitable[bool]:
        def make(fid: str, prov: Provenance) -> tuple[Any, Write]:
            return None, Write(claims=[Claim(key, f"{self.eid}/{fid}", memo=1)])

        return self._effect("claim", [key], make)

    # -- waits: receive, sleep, child

    def receive(self, channel: str, scope: Scope = "execution") -> Awaitable[Any]:
        full = self.channel_name(channel, scope)
        dig = digest([full])
        fid, outcome = self._frame("receive", None, FrameKind.RECEIVE, dig)
        if outcome is not None:
            return self._done(outcome.value["payload"])
        return self._spawn(self._receive(fid, full, dig))

    async def _receive(self, fid: str, channel: str, dig: str) -> Any:
        started = None
        if fid not in self.started:
            started = self._entry(EntryKind.FRAME_STARTED, fid, FrameKind.RECEIVE, attempt=1, dig=dig, value={"channel": channel})
        async with self.channel_locks[channel]:
            after = self.cursors.get(channel, 0)
            messages = await store_call(self.rt.store.read_messages(channel, after, limit=1))
            if messages:
                self.cursors[channel] = messages[0].seq
        if not messages:
            if started is not None:
                self.pending.append(started)
                self.started[fid] = started
            await self._wait(Wait(fid, "message", channel=channel, after=after))
        m = messages[0]
        value = {"channel": channel, "seq": m.seq, "payload": m.payload, "by": str(m.provenance.actor)}
        completed = self._entry(EntryKind.FRAME_COMPLETED, fid, FrameKind.RECEIVE, attempt=1, value=value)
        await self._write(Write(entries=([started] if started else []) + [completed]))
        self.outcome[fid] = completed
        return m.payload

    def sleep(self, delay: timedelta) -> Awaitable[None]:
        if not isinstance(delay, timedelta):
            raise TypeError(f"ctx.sleep takes a timedelta, got {type(delay).__name__}")
        return self._sleep({"delay": delay.total_seconds()}, lambda now: now + delay)

    def sleep_until(self, instant: datetime) -> Awaitable[None]:
        if not isinstance(instant, datetime) or instant.tzinfo is None:
            raise TypeError(f"ctx.sleep_until takes an aware datetime, got {instant!r}")
        return self._sleep({"until": instant.isoformat()}, lambda now: instant)

    def _sleep(self, args: dict[str, Any], until_of: Callable[[datetime], datetime]) -> Awaitable[None]:
        dig = digest(args)
        fid, outcome = self._frame("sleep", None, FrameKind.SLEEP, dig)
        if outcome is not None:
            return self._done(None)

        async def run() -> None:
            started = self.started.get(fid)
            write = Write()
            if started is None:
                until = until_of(self.rt.clock.now())
                started = self._entry(EntryKind.FRAME_STARTED, fid, FrameKind.SLEEP, attempt=1, dig=dig, value={"until": until.isoformat()})
                self.started[fid] = started
                write.entries.append(started)
            else:
                until = datetime.fromisoformat(started.value["until"])
            if until > self.rt.clock.now():
                self.pending.extend(write.entries)
                await self._wait(Wait(fid, "timer", at=until))
            completed = self._entry(EntryKind.FRAME_COMPLETED, fid, FrameKind.SLEEP, attempt=1, value=None)
            write.entries.append(completed)
            await self._write(write)
            self.outcome[fid] = completed

        return self._spawn(run())

    def child(self, workflow: str | Callable[..., Any], /, *args: Any, key: str | None = None) -> Awaitable[Any]:
        wf = self.rt.registry.get(workflow)
        wf.bind(args)
        child_args = check_json(list(args), f"the arguments of child workflow {wf.name!r}")
        dig = digest({"workflow": wf.name, "args": child_args})
        fid, outcome = self._frame(wf.name, key, FrameKind.CHILD, dig)
        if outcome is not None:
            return self._outcome_value(fid, outcome)
        return self._spawn(self._child(fid, wf, child_args, dig))

    async def _child(self, fid: str, wf: WorkflowDef, args: list[Any], dig: str) -> Any:
        ceid = child_eid(self.eid, fid)
        if fid not in self.started:
            started = self._entry(EntryKind.FRAME_STARTED, fid, FrameKind.CHILD, name=wf.name, attempt=1, dig=dig,
                                  value={"child": ceid}, ref=wf.ref)
            new = new_execution(self.rt, wf, ceid, args, queue=self.record.queue, parent=(self.eid, fid))
            result = await self._write(Write(entries=[started], executions=[new]))
            self.started[fid] = started
            if result.created and result.created[0]:
                self.rt.mirror_soon([Entry(**{**new.entry.__dict__, "seq": 1})])
        record = await store_call(self.rt.store.read_execution(ceid))
        if record is None or not record.terminal:
            await self._wait(Wait(fid, "child", child=ceid))
        assert record is not None
        if record.status is Status.COMPLETED:
            entry = self._entry(EntryKind.FRAME_COMPLETED, fid, FrameKind.CHILD, name=wf.name, attempt=1, value=record.result)
            await self._write(Write(entries=[entry]))
            self.outcome[fid] = entry
            return record.result
        error = dict(record.error or {})
        error.setdefault("type", record.status.value)
        error["child"] = ceid
        error["message"] = f"child execution {ceid} {record.status.value}: {error.get('message', '')}"
        entry = self._entry(EntryKind.FRAME_FAILED, fid, FrameKind.CHILD, name=wf.name, attempt=1,
                            value={"final": True}, error=error)
        await self._write(Write(entries=[entry]))
        self.outcome[fid] = entry
        raise step_failed(fid, entry, 1)

    async def gather(self, *awaitables: Awaitable[Any]) -> list[Any]:
        return list(await asyncio.gather(*awaitables))

    # ---- ends -----------------------------------------------------------------------------

    async def _suspend(self) -> Status:
        waits = list(self.waits.values())
        timers = [Timer(self.eid, w.fid, w.at) for w in waits if w.at is not None]
        channels: dict[str, int] = {}
        for w in waits:
            if w.channel is not None:
                channels[w.channel] = min(channels.get(w.channel, w.after), w.after)
        children = [w.child for w in waits if w.child is not None]
        wake_task = self._wake_task()
        entry = self._entry(EntryKind.EXECUTION_SUSPENDED, ROOT, FrameKind.ROOT, value={"waits": [w.describe() for w in waits]})
        write = Write(
            entries=[entry], status=StatusChange(self.eid, Status.SUSPENDED), release=True,
            clear_timers=self._armed(self.armed_timers), timers=timers, clear_waiters=self._armed(self.armed_waiters),
            waiters=[(ch, self.eid) for ch in channels],
            wake=WakeCheck(
                task=wake_task, channels=channels, children=children,
                due_by=min((t.at for t in timers), default=None),
                journal_after=self.last_seq if any(w.kind == "step" for w in waits) else None,
                cancel=True,
            ),
        )
        await self._final_write(write)
        if timers:
            self.rt.timer_set(min(t.at for t in timers))
        return Status.SUSPENDED

    def _armed(self, armed: bool) -> list[str]:
        """Clear the timers (or waiters) of this execution only if its last suspension set some."""
        return [self.eid] if armed else []

    def _wake_task(self) -> Task:
        """The RESUME that a suspension enqueues at once when its wait is over already."""
        return Task(
            id=task_id(TaskKind.RESUME, self.eid, f"wake:{self.epoch}"), kind=TaskKind.RESUME,
            queue=self.record.queue, eid=self.eid, payload=None, provenance=self.rt.provenance(epoch=self.epoch),
            visible_at=self.rt.clock.now(),
        )

    async def _block(self) -> Status:
        assert self.nondeterminism is not None
        nd = self.nondeterminism
        blocked = {"reason": "nondeterminism", "fid": nd.fid, "detail": nd.detail, "version": self.wf.version}
        entry = self._entry(EntryKind.EXECUTION_SUSPENDED, ROOT, FrameKind.ROOT, value=blocked, error=error_data(nd))
        write = Write(
            entries=[entry], status=StatusChange(self.eid, Status.SUSPENDED, blocked=blocked), release=True,
            clear_timers=self._armed(self.armed_timers), clear_waiters=self._armed(self.armed_waiters),
            wake=WakeCheck(task=self._wake_task(), cancel=True),
        )
        await self._final_write(write)
        return Status.SUSPENDED

    async def _end(self, status: Status, result: Any = None, error: dict[str, Any] | None = None) -> Status:
        kind = {
            Status.COMPLETED: EntryKind.EXECUTION_COMPLETED,
            Status.FAILED: EntryKind.EXECUTION_FAILED,
            Status.CANCELLED: EntryKind.EXECUTION_CANCELLED,
        }[status]
        entry = self._entry(kind, ROOT, FrameKind.ROOT, value=result, error=error)
        if status is Status.CANCELLED and self.record.cancel_requested:
            by = self.record.cancel_requested.get("by")
            entry = Entry(**{**entry.__dict__, "provenance": entry.provenance.with_(on_behalf_of=by)})
        write = Write(
            entries=[entry], status=StatusChange(self.eid, status, result=result, error=error), release=True,
            clear_timers=self._armed(self.armed_timers), clear_waiters=self._armed(self.armed_waiters),
            # a cancelled execution withdraws its open delegations: their consumers find nothing
            withdraw_delegates=[self.eid] if status is Status.CANCELLED else [],
        )
        if self.record.parent_eid is not None:
            # a child runs on the queue of its parent
            write.tasks.append(Task(
                id=task_id(TaskKind.RESUME, self.record.parent_eid, f"child:{self.eid}"), kind=TaskKind.RESUME,
                queue=self.record.queue, eid=self.record.parent_eid, payload=None,
                provenance=self.rt.provenance(epoch=self.epoch), visible_at=self.rt.clock.now(),
            ))
        self.terminal_entry = entry
        await self._final_write(write)
        self.rt.ended_execution(self.eid)
        return status

    async def _final_write(self, write: Write) -> None:
        await self._write(write, final=True)


def _shift(item: Any, shift: int) -> Any:
    if getattr(item, "memo", None) is None:
        return item
    from dataclasses import replace

    return replace(item, memo=item.memo + shift)
