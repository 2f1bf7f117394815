"""An activation: one run of an execution's workflow function under one lease, from the lease
to suspension or the end.

The drive loop runs the workflow function from its first line (the frames return their memos)
until it returns, raises, or every live frame waits. Then it writes the activation's last
transition: ``end`` (completed, failed, cancelled), ``suspend`` (with what it waits for: its
timers and waits set, and a wake check that closes the race with what would resume it), or
``block`` (a nondeterminism: it waits for an operator).

An activation is composed of its replay (``_replay``: the memo and the frames), its writer
(``_writer``), its steps (``_steps``) and its waits (``_waits``); the workflow calls their
methods as the Context's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Awaitable, Callable, Coroutine

from flowli.domain import (
    ArgumentsInvalid,
    Cancelled,
    Entry,
    EntryKind,
    ExecutionRecord,
    FrameKind,
    LeaseLost,
    NondeterminismError,
    NotJSONCompatibleError,
    OutputInvalid,
    RetryPolicy,
    Status,
    StepFailed,
    Task,
    TaskKind,
    Timer,
    check_json,
    task_id,
)
from flowli.store import Intent, StatusChange, WakeCheck, Write

from ._context import Context, Scope
from ._core import Stopping, StoreFailure
from ._decider import DECIDER_TASK, decided
from ._ends import Ending, end_with_parent
from ._errors import error_data
from ._frames import ROOT
from ._registry import WorkflowDef
from ._replay import Replay
from ._runtime import Runtime
from ._steps import Steps
from ._tasks import cancel_and_wait
from ._tracing import derived
from ._typing import problems, validation_error
from ._waits import Waits
from ._writer import Writer

log = logging.getLogger("flowli.worker")


class Activation(Context):
    """The Context implementation: one run of the workflow function under one lease, composed
    of its replay (the memo and the frames), its writer, its steps and its waits."""

    wf_task: asyncio.Task[Any] | None = None
    """The workflow function's coroutine, once it runs (kept with the activation in the workflow cache)."""

    told: tuple[Task, Any] | None = None
    """The RESUME that this activation's end wrote leased to this process for its decider parent,
    and its record as it ended: the worker applies it at once (``_deciding.tell_parent``)."""

    def __init__(self, rt: Runtime, wf: WorkflowDef, record: ExecutionRecord, epoch: int, journal: list[Entry],
                 replay: type[Replay] = Replay):
        self.rt = rt
        self.wf = wf
        self.record = record
        self.epoch = epoch
        self.replay = replay(record.eid, journal, record.cancel_requested is not None)
        self.writer = Writer(rt, wf, record, epoch, self.replay, journal)
        self.steps = Steps(self.writer)
        self.waiting = Waits(self.writer, self.steps)
        # the workflow calls its parts' methods directly (the methods below say what each is)
        self.step = self.steps.step  # type: ignore[method-assign]
        self.child = self.waiting.child  # type: ignore[method-assign]
        self.receive = self.waiting.receive  # type: ignore[method-assign]
        self.delegate = self.waiting.delegate  # type: ignore[method-assign]

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

    @property
    def application(self) -> str | None:
        return self.record.application

    @property
    def items(self) -> Any:
        return self.rt.store.items()

    # ---- the frames: the Context's methods, each one of its steps or its waits -------------

    def step(self, fn: Callable[..., Any], /, *args: Any, key: str | None = None, retry: RetryPolicy | None = None,
             queue: str | None = None, **kwargs: Any) -> Awaitable[Any]:
        return self.steps.step(fn, *args, key=key, retry=retry, queue=queue, **kwargs)

    def now(self) -> Awaitable[datetime]:
        return self.steps.now()

    def random(self) -> Awaitable[float]:
        return self.steps.random()

    def uuid(self) -> Awaitable[str]:
        return self.steps.uuid()

    def send(self, channel: str, payload: Any, scope: Scope = "execution") -> Awaitable[int]:
        return self.steps.send(channel, payload, scope)

    def announce(self, kind: str, data: Any) -> Awaitable[int]:
        return self.steps.announce(kind, data)

    def enqueue(self, queue: str, kind: TaskKind | str, payload: Any, key: str | None = None) -> Awaitable[str]:
        return self.steps.enqueue(queue, kind, payload, key)

    def withdraw(self, task_id: str) -> Awaitable[bool]:
        return self.steps.withdraw(task_id)

    def claim(self, key: str) -> Awaitable[bool]:
        return self.steps.claim(key)

    def child(self, workflow: str | Callable[..., Any], /, *args: Any, key: str | None = None) -> Awaitable[Any]:
        return self.waiting.child(workflow, *args, key=key)

    def receive(self, channel: str, scope: Scope = "execution", *, timeout: timedelta | None = None) -> Awaitable[Any]:
        return self.waiting.receive(channel, scope, timeout=timeout)

    def delegate(self, queue: str, payload: Any, *, key: str | None = None, retry: RetryPolicy | None = None,
                 timeout: timedelta | None = None) -> Awaitable[Any]:
        return self.waiting.delegate(queue, payload, key=key, retry=retry, timeout=timeout)

    def sleep(self, delay: timedelta) -> Awaitable[None]:
        return self.waiting.sleep(delay)

    def sleep_until(self, instant: datetime) -> Awaitable[None]:
        return self.waiting.sleep_until(instant)

    async def gather(self, *awaitables: Awaitable[Any]) -> list[Any]:
        return list(await asyncio.gather(*awaitables))

    async def first(self, pending: Iterable[Awaitable[Any]]) -> Awaitable[Any]:
        return await self.waiting.first(pending)

    # ---- what the worker tells it ---------------------------------------------------------

    def mark_lost(self) -> None:
        self.replay.mark_lost()

    def mark_cancel_requested(self) -> None:
        self.replay.cancel_requested = True

    def mark_stopping(self) -> None:
        """The worker stops: the frames under way finish, no new one starts."""
        self.replay.mark_stopping()

    def typed_arguments(self) -> list[Any]:
        """The execution's arguments as its function takes them (``WorkflowDef.arguments``);
        ArgumentsInvalid naming each bad field when one does not fit its type."""
        return self.wf.arguments(self.record.args, bool((self.writer.started or {}).get("typed")))

    # ---- the run --------------------------------------------------------------------------

    def run(self) -> Coroutine[Any, Any, Status]:
        """Run the workflow until it ends or suspends; returns the status it left. (Untraced, the
        coroutine itself: no second frame on every resumption of the hot path.)"""
        return self._run() if self.rt.tracing is None else self._traced_run()

    async def _traced_run(self) -> Status:
        tracing = self.rt.tracing
        assert tracing is not None
        wf = self.wf
        self.writer.span = tracing.start(f"activation {wf.name}",
                                  derived(self.writer.trace, "activation", self.eid, self.replay.horizon, self.epoch),
                                  self.writer.trace, {"flowli.eid": self.eid, "flowli.workflow": wf.name,
                                               "flowli.version": wf.version, "flowli.epoch": self.epoch,
                                               "flowli.journal_position": self.replay.horizon})
        with tracing.current(self.writer.span):
            status = await self._run()
            self.writer.span.set_attribute("flowli.status", status.value)
            return status

    async def _run(self) -> Status:
        wf_task = self.wf_task  # set when kept in the workflow cache: it continues where it waits
        if wf_task is None:
            if self.record.blocked is not None and self.replay.cancel_requested:
                return await self._end(Status.CANCELLED,
                                       error={"type": "Cancelled", "message": "cancelled while blocked"})
            try:
                args = self.typed_arguments()
            except ArgumentsInvalid as bad:  # started outside the catalog with arguments that do not fit
                return await self._end(Status.FAILED, error=error_data(bad) | {"problems": bad.problems})
            wf_task = self.wf_task = asyncio.create_task(self.wf.fn(self, *args))
            wf_task.add_done_callback(lambda _: self.replay.changed.set())
        try:
            return await self._drive(wf_task)
        except asyncio.CancelledError:
            # the worker stops: end every task of this activation, write nothing
            await self._close(wf_task)
            raise
        finally:
            if wf_task.done():
                # nothing continues it (a kept one waits, not done): let it go, or the task, its
                # exception's traceback, the workflow's frames and this activation, which they
                # reference, would be a cycle left to the cyclic collector
                self.wf_task = None

    async def _drive(self, wf_task: asyncio.Task[Any]) -> Status:
        while True:
            # clear before checking: a change during the checks (which yield) sets it again
            self.replay.changed.clear()
            if wf_task.done():
                break
            if self.replay.lost:
                await self._close(wf_task)
                raise LeaseLost(self.eid, self.epoch)
            if self.replay.quiescent() and await self._settled(wf_task):
                if self.replay.nondeterminism is None:
                    self.replay.check_all_visited()
                if self.replay.nondeterminism is not None:
                    await self._close(wf_task)
                    return await self._block()
                if self.rt.cache.size:
                    return await self._suspend_kept(wf_task)
                await self._close(wf_task)
                return await self._suspend()
            stuck = self.replay.stuck_at_a_gate()
            if stuck is not None and await self._settled(wf_task, self.replay.stuck_at_a_gate):
                new, ahead = stuck
                self.replay.nondeterminism = NondeterminismError(
                    self.eid, new, f"the code creates frame {new}, which the journal does not hold, before frame"
                    f" {ahead}, which the journal holds from an earlier run: code was inserted or frames were reordered"
                    " or renamed")
                await self._close(wf_task)
                return await self._block()
            await self.replay.changed.wait()
        await self._close(wf_task, finished=True)
        exc = wf_task.exception() if not wf_task.cancelled() else Cancelled("the workflow task was cancelled")
        if self.replay.lost:
            raise LeaseLost(self.eid, self.epoch)
        if isinstance(exc, StoreFailure):
            raise exc.cause  # the worker hands the execution back
        if isinstance(exc, Stopping):
            raise exc  # the worker stops: it hands the execution back
        if isinstance(exc, LeaseLost):
            raise exc
        if self.replay.nondeterminism is None:
            self.replay.check_all_visited()
        if self.replay.nondeterminism is not None:
            return await self._block()
        if exc is None:
            try:
                value = self._accepted(wf_task.result())
            except NotJSONCompatibleError as bad:
                return await self._end(Status.FAILED, error=error_data(bad))
            except OutputInvalid as bad:
                return await self._end(Status.FAILED, error=error_data(bad) | {"problems": bad.problems})
            return await self._end(Status.COMPLETED, result=value)
        if isinstance(exc, Cancelled):
            return await self._end(Status.CANCELLED, error=error_data(exc) | {"by": self.record.cancel_requested})
        if isinstance(exc, StepFailed):
            return await self._end(Status.FAILED, error=error_data(exc) | {
                "fid": exc.fid, "cause": exc.error_type, "cause_message": exc.message, "attempts": exc.attempts})
        if isinstance(exc, Exception):
            return await self._end(Status.FAILED, error=error_data(exc))
        raise exc

    def _accepted(self, result: Any) -> Any:
        """The result as the journal records it: for a type registered with catalog metadata,
        checked against its return annotation (a model becomes its JSON fields); then
        JSON-checked."""
        adapter = self.wf.output if self.wf.meta.declared else None
        if adapter is not None:
            try:
                result = adapter.dump_python(adapter.validate_python(result), mode="json")
            except validation_error() as exc:
                raise OutputInvalid(self.wf.name, problems(exc, "output")) from None
            except Exception as exc:  # a value pydantic cannot even dump
                raise OutputInvalid(self.wf.name, [f"output: {exc}"]) from None
        return check_json(result, f"the result of workflow {self.wf.name!r}")

    async def _settled(self, wf_task: asyncio.Task[Any], still: Callable[[], Any] | None = None) -> bool:
        """Whether every live frame waits (or ``still()`` holds), and stays so for a few turns of
        the loop (a frame that just completed may be about to resume the workflow, which creates
        more)."""
        check = still or self.replay.quiescent
        for _ in range(4):
            if not check() or wf_task.done():
                return False
            await asyncio.sleep(0)
        return bool(check()) and not wf_task.done()

    async def _close(self, wf_task: asyncio.Task[Any], finished: bool = False) -> None:
        self.replay.closing = True
        await cancel_and_wait([*self.replay.frame_tasks, *([] if finished else [wf_task])])

    # ---- the workflow cache (see ``_cache``) ------------------------------------------------

    async def _suspend_kept(self, wf_task: asyncio.Task[Any]) -> Status:
        """Suspend with the coroutine and its waiting frames left as they are, and keep the
        activation in the workflow cache once the suspension is written."""
        self.replay.closing = True  # nothing of it writes until it continues (its frames all wait)
        try:
            status = await self._suspend()
        except BaseException:
            await self._close(wf_task)
            raise
        # no await between the write and the keep: a resume dequeued meanwhile finds it kept
        self.replay.changed.clear()
        self.rt.cache.keep(self.eid, self, self.replay.horizon)
        return status

    def weight(self) -> int:
        """The journal entries that its memo holds (what the workflow cache bounds its memory by)."""
        memo = self.replay.memo
        return len(memo.started) + len(memo.outcome)

    def discard(self) -> None:
        """Stop the kept coroutine and its frames (they write nothing: the replay is closing)."""
        self.replay.closing = True
        tasks = [*self.replay.frame_tasks, *([self.wf_task] if self.wf_task is not None else [])]
        self.wf_task = None  # as an activation that ended lets go of it (see ``_run``)
        for task in tasks:
            task.cancel()

    def resume(self, record: ExecutionRecord, epoch: int, tail: list[Entry]) -> bool:
        """Continue this kept activation under lease ``epoch``: ``tail`` holds the journal's
        entries after the last seq it saw. It continues when nothing ran while it was kept and
        each entry of the tail is its own write or the outcome of a frame it waits on, appended by
        another party (a consumer's answer, a step run elsewhere, an expiry); otherwise the
        answer is False and the caller replays the execution (a migrate, a cancel, a retry, a
        block, another process's activation all show so)."""
        replay, wf_task = self.replay, self.wf_task
        if wf_task is None or wf_task.done() or replay.changed.is_set() or replay.nondeterminism is not None:
            return False
        if (record.workflow, record.version) != (self.wf.name, self.wf.version) or record.blocked is not None \
                or record.cancel_requested is not None:
            return False
        outcomes = []
        for e in tail:
            if e.seq in self.writer.written:
                continue
            wait = replay.waits.get(e.fid or "")
            if e.kind not in (EntryKind.FRAME_COMPLETED, EntryKind.FRAME_FAILED) or wait is None \
                    or wait.kind not in ("step", "delegate") or e.provenance.site.epoch is not None:
                return False
            outcomes.append(e)
        horizon = max([replay.horizon, *(e.seq or 0 for e in tail)])  # the tail holds its own writes too
        for e in outcomes:
            replay.memo.add(e)
        self.record, self.epoch = record, epoch
        self.writer.resume(record, epoch, horizon)
        replay.wake(horizon, epoch)
        return True

    # ---- ends -----------------------------------------------------------------------------

    async def _suspend(self) -> Status:
        waits = list(self.replay.waits.values())
        timers = [Timer(self.eid, w.fid, w.at) for w in waits if w.at is not None]
        channels: dict[str, int] = {}
        for w in waits:
            if w.channel is not None:
                channels[w.channel] = min(channels.get(w.channel, w.after), w.after)
        children = [w.child for w in waits if w.child is not None]
        # an outcome of a waited frame appended since the journal this activation started from
        # (it never saw it) resumes the execution at once
        outside = sorted(w.fid for w in waits if w.kind in ("step", "delegate"))
        journal_after = self.replay.horizon if outside else None
        entry = self.writer.entry(EntryKind.EXECUTION_SUSPENDED, ROOT, FrameKind.ROOT, value={"waits": [w.describe() for w in waits]})
        write = Write(
            entries=[entry], status=StatusChange(self.eid, Status.SUSPENDED), release=True,
            clear_timers=self._armed(self.replay.memo.armed_timers), timers=timers,
            clear_waiters=self._armed(self.replay.memo.armed_waiters), waiters=[(ch, self.eid) for ch in channels],
            wake=WakeCheck(
                task=self._wake_task(), channels=channels, children=children,
                due_by=min((t.at for t in timers), default=None), journal_after=journal_after, frames=outside,
                cancel=True,
            ),
        )
        if not channels and not children and journal_after is None:
            write.intent = Intent.FENCED  # a suspension on timers alone
        await self.writer.write(write, kind="suspend", final=True, payload={"waits": entry.value["waits"]})
        self.replay.memo.arm(entry.value["waits"])
        return Status.SUSPENDED

    def _armed(self, armed: bool) -> list[str]:
        """Clear the timers (or waiters) of this execution only if its last suspension set some."""
        return [self.eid] if armed else []

    def _wake_task(self) -> Task:
        """The RESUME that a suspension enqueues at once when its wait is over already."""
        return Task(
            id=task_id(TaskKind.RESUME, self.eid, f"wake:{self.epoch}"), kind=TaskKind.RESUME,
            queue=self.record.queue, eid=self.eid, payload=None, provenance=self.rt.provenance(epoch=self.epoch),
            visible_at=self.rt.clock.now(), application=self.record.application,
        )

    async def _block(self) -> Status:
        assert self.replay.nondeterminism is not None
        nd = self.replay.nondeterminism
        blocked = {"reason": "nondeterminism", "fid": nd.fid, "detail": nd.detail, "version": self.wf.version,
                   **self.replay.diverged}
        log.warning("execution %s (%s version %s) is blocked: %s; cancel it, or migrate it to a version that"
                    " replays it", self.eid, self.wf.name, self.wf.version, nd.detail)
        entry = self.writer.entry(EntryKind.EXECUTION_SUSPENDED, ROOT, FrameKind.ROOT, value=blocked, error=error_data(nd))
        write = Write(
            intent=Intent.FENCED, entries=[entry], status=StatusChange(self.eid, Status.SUSPENDED, blocked=blocked),
            release=True, clear_timers=self._armed(self.replay.memo.armed_timers),
            clear_waiters=self._armed(self.replay.memo.armed_waiters), wake=WakeCheck(task=self._wake_task(), cancel=True),
        )
        await self.writer.write(write, kind="block", final=True, payload=blocked)
        return Status.SUSPENDED

    async def _end(self, status: Status, result: Any = None, error: dict[str, Any] | None = None) -> Status:
        kind = {
            Status.COMPLETED: EntryKind.EXECUTION_COMPLETED,
            Status.FAILED: EntryKind.EXECUTION_FAILED,
            Status.CANCELLED: EntryKind.EXECUTION_CANCELLED,
        }[status]
        entry = self.writer.entry(kind, ROOT, FrameKind.ROOT, value=result, error=error)
        if status is Status.CANCELLED and self.record.cancel_requested:
            by = self.record.cancel_requested.get("by")
            entry = entry.__class__(**{**entry.__dict__, "provenance": entry.provenance.with_(on_behalf_of=by)})
        write = Write(
            entries=[entry], status=StatusChange(self.eid, status, result=result, error=error), release=True,
            clear_timers=self._armed(self.replay.memo.armed_timers), clear_waiters=self._armed(self.replay.memo.armed_waiters),
        )
        if status is Status.CANCELLED:
            # a cancelled execution withdraws its open delegations: their consumers find nothing
            write.withdraw_delegates = [self.eid]
        told: Task | None = None
        payload = {"status": status.value, "result": result, "error": error}
        if self.record.parent_eid is not None and decided(self.record.parent_fid) \
                and await self._end_with_parent(write, replace(self.record, status=status, result=result, error=error),
                                                payload):
            self._finish_span(status, error)
            return status
        if self.record.parent_eid is not None:
            # a child runs on the queue of its parent
            now = self.rt.clock.now()
            told = Task(
                id=task_id(TaskKind.RESUME, self.record.parent_eid, f"child:{self.eid}@{self.epoch}"), kind=TaskKind.RESUME,
                queue=self.record.queue, eid=self.record.parent_eid,
                payload={**DECIDER_TASK, "child": self.eid} if decided(self.record.parent_fid) else None,
                provenance=self.rt.provenance(epoch=self.epoch), visible_at=now,
                application=self.record.application,
            )
            if decided(self.record.parent_fid):
                # the decider parent takes the end in this worker, at once (``told``): the task is
                # written leased to this process, so that no worker dequeues it meanwhile
                told = replace(told, lease_owner=self.rt.owner, visible_at=now + self.rt.options.task_ttl)
            write.tasks.append(told)
        if not write.tasks and not write.withdraw_delegates:
            write.intent = Intent.APPEND  # an end goes with the plain appends of its batch
        await self.writer.write(write, kind="end", final=True, payload=payload)
        if told is not None and told.lease_owner is not None:
            self.told = (told, replace(self.record, status=status, result=result, error=error))
        self._finish_span(status, error)
        return status

    async def _end_with_parent(self, write: Write, ended: ExecutionRecord, payload: Any) -> bool:
        """The end of a decider's child, written with its parent's command in one store write (see
        ``_ends``): whether it was; when not, nothing was written."""
        return await end_with_parent(self.rt, Ending(ended, self.writer, write, payload))

    def _finish_span(self, status: Status, error: dict[str, Any] | None) -> None:
        if self.rt.tracing is not None:
            self.rt.tracing.finish(
                f"workflow {self.wf.name}", self.writer.trace, self.writer.trace_parent,
                {"flowli.eid": self.eid, "flowli.workflow": self.wf.name, "flowli.version": self.wf.version,
                 "flowli.status": status.value}, self.record.created_at, self.rt.clock.now(),
                error=None if status is Status.COMPLETED else (error or {}).get("message") or status.value)
