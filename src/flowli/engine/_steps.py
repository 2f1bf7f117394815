"""The step runner: step frames (local and on a queue), the internal steps (now, random, uuid),
and the effect steps (send, announce, enqueue, withdraw, claim), whose effect and memo are one
write. Also the pieces that the workers share with it: running a step function, the failure of
an attempt as a journal value, a retry policy as JSON.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import random as _random
import uuid as _uuid
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any, Awaitable, Callable

from flowli.domain import (
    NO_RETRY,
    Code,
    Entry,
    EntryKind,
    FrameKind,
    NonRetryableError,
    NotJSONCompatibleError,
    Provenance,
    RetryPolicy,
    Task,
    TaskKind,
    check_json,
    digest,
    task_id,
)
from flowli.log import Attempt, attempt_scope
from flowli.store import Announcement, Claim, NewMessage, WakeWaiters, Withdrawal, Write, WriteResult

from ._context import Scope
from ._core import channel_name, frame_failed, plain
from ._errors import error_data
from ._frames import Wait
from ._threads import STEP_THREADS
from ._tracing import derived, step_attributes, traceparent
from ._writer import Writer

STARTED_AFTER = 0.05
"""Seconds a local step runs before its frame.started is written on its own. A step done sooner
writes frame.started and its outcome in one write: a crash inside that window leaves no trace of
the attempt, which then runs again under the same attempt number (at least once, as always)."""


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


def failure_entry_value(
    policy: RetryPolicy, tries: int, exc: BaseException | None, now: datetime, *, retryable: bool = True
) -> dict[str, Any]:
    """The value of a frame.failed: whether it is final and, if not, when the next attempt runs.
    ``tries`` counts the attempts the policy has seen, this one included."""
    final = (not retryable or isinstance(exc, (NonRetryableError, NotJSONCompatibleError))
             or tries >= policy.max_attempts)
    value: dict[str, Any] = {"final": final}
    if not final:
        value["retry_at"] = (now + policy.delay_after(tries)).isoformat()
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


class Steps:
    """The step frames of an activation: each asks its replay for its memo, and writes through
    its writer."""

    def __init__(self, writer: Writer):
        self.w = writer
        self.r = writer.replay

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
        what = f"the arguments of step {name!r} in workflow {self.w.wf.name!r}"
        json_args = check_json(list(args), what, "args")
        json_kwargs = check_json(kwargs, what, "kwargs")
        dig = digest([json_args, json_kwargs] if kwargs else json_args)
        shown = {"args": json_args, "kwargs": json_kwargs} if kwargs else {"args": json_args}
        fid, outcome = self.r.frame(name, key, FrameKind.STEP, dig, shown)
        if outcome is not None:
            return self.r.outcome_value(fid, outcome)
        policy = retry or NO_RETRY
        if queue is not None:
            return self.r.spawn(self._remote_step(fid, name, fn, json_args, json_kwargs, dig, policy, queue))
        return self.r.spawn(self._local_step(fid, name, fn, args, kwargs, policy, dig, shown))

    async def retry_gate(self, fid: str, deadline: datetime | None = None) -> int:
        """The number of the next attempt; waits on a timer while a retry delay runs (until the
        frame's deadline at most, when it has one)."""
        failures = self.r.memo.failures[fid]
        if failures and len(failures) > self.r.memo.base.get(fid, 0):
            retry_at = datetime.fromisoformat(failures[-1].value["retry_at"])
            if deadline is not None:
                retry_at = min(retry_at, deadline)
            while retry_at > self.w.rt.clock.now():
                await self.r.wait(Wait(fid, "timer", at=retry_at))
        return self.r.memo.next_attempt(fid)

    async def _local_step(
        self, fid: str, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
        policy: RetryPolicy, dig: str, shown: dict[str, Any],
    ) -> Any:
        w, rt, memo = self.w, self.w.rt, self.r.memo
        ref = f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', name)}"
        while True:
            attempt = await self.retry_gate(fid)
            # the arguments are in the journal too (not only their digest): a changed one shows
            started = w.entry(EntryKind.FRAME_STARTED, fid, FrameKind.STEP, name=name, attempt=attempt, dig=dig,
                            ref=ref, value=shown)
            # frame.started goes to the store while the function runs, unless the function is done
            # within STARTED_AFTER: then frame.started and the outcome share one write (one round
            # trip per step). A store applies the writes of one execution in order, so an outcome
            # is never appended before its start.
            sent: list[asyncio.Future[WriteResult]] = []
            rt.stats.attempts[w.wf.name] += 1
            timer = asyncio.get_running_loop().call_later(STARTED_AFTER, self._send_started, started, sent)
            try:
                if rt.tracing is None:
                    with attempt_scope(Attempt(w.eid, fid, attempt, rt.bucket)):
                        value = await run_function(fn, args, kwargs)
                else:
                    with attempt_scope(Attempt(w.eid, fid, attempt, rt.bucket)), \
                            self._step_span(fid, name, attempt):
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
                entry = w.entry(EntryKind.FRAME_COMPLETED, fid, FrameKind.STEP, name=name, attempt=attempt, value=value, ref=ref)
                await w.write(plain(Write(entries=[*before, entry])))
                memo.outcome[fid] = entry
                return value
            try:
                rt.stats.failures[w.wf.name] += 1
                fail_value = failure_entry_value(policy, memo.tries(fid, attempt), exc, rt.clock.now())
                entry = w.entry(
                    EntryKind.FRAME_FAILED, fid, FrameKind.STEP, name=name, attempt=attempt, value=fail_value,
                    error=error_data(exc), ref=ref,
                )
                await w.write(plain(Write(entries=[*before, entry])))
                memo.failures[fid].append(entry)
                if fail_value["final"]:
                    memo.outcome[fid] = entry
                    raise frame_failed(fid, entry, attempt) from exc
            finally:
                exc = None  # its traceback holds this frame: kept in a local of it, the two are a cycle

    def _step_span(self, fid: str, name: str, attempt: int) -> AbstractContextManager[Any]:
        """The span of a step attempt, current while its function runs (tracing on)."""
        tracing = self.w.rt.tracing
        assert tracing is not None and self.w.span is not None
        parent = self.w.span.get_span_context()
        span = tracing.start(f"step {name}", derived(parent, "step", self.w.eid, fid, attempt, self.w.epoch), parent,
                             step_attributes(self.w.eid, fid, attempt, self.w.wf.name, self.w.wf.version))
        return tracing.current(span)

    def _send_started(self, started: Entry, sent: list[asyncio.Future[WriteResult]]) -> None:
        """Write the frame.started of a step that runs longer than STARTED_AFTER on its own."""
        if not self.r.closing:
            sent.append(asyncio.ensure_future(self.w.write(plain(Write(entries=[started])))))

    async def _remote_step(
        self, fid: str, name: str, fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any], dig: str,
        policy: RetryPolicy, queue: str,
    ) -> Any:
        ref = f"{fn.__module__}:{fn.__qualname__}"
        if "<locals>" in ref:
            raise ValueError(f"step {fid} runs on queue {queue!r}, so {ref} must be a module-level function")
        issued = 0
        while True:
            outcome = self.r.memo.outcome.get(fid)
            if outcome is not None:  # an answer that a cached activation's continuation brought
                return await self.r.outcome_value(fid, outcome)
            attempt = await self.retry_gate(fid)
            if attempt != issued:
                await self._issue(fid, name, ref, args, kwargs, dig, policy, queue, attempt)
                issued = attempt
            await self.r.wait(Wait(fid, "step"))

    async def _issue(self, fid: str, name: str, ref: str, args: list[Any], kwargs: dict[str, Any], dig: str,
                     policy: RetryPolicy, queue: str, attempt: int) -> None:
        """Enqueue attempt ``attempt`` of a step on ``queue`` (its frame.started, the first time)."""
        write = Write()
        if (fid, attempt) not in self.r.memo.attempts_started:
            shown = {"args": args, "kwargs": kwargs} if kwargs else {"args": args}
            write.entries.append(self.w.entry(EntryKind.FRAME_STARTED, fid, FrameKind.STEP, name=name, attempt=attempt,
                                             dig=dig, ref=ref, value=shown))
        payload = {"fid": fid, "ref": ref, "args": args, "kwargs": kwargs, "attempt": attempt,
                   "tries": self.r.memo.tries(fid, attempt), "retry": policy_json(policy),
                   "workflow": self.w.wf.name, "version": self.w.wf.version}
        if self.w.span is not None:  # the worker that runs it makes the attempt's span a child of this activation
            payload["trace"], payload["name"] = traceparent(self.w.span.get_span_context()), name
        write.tasks.append(Task(
            id=task_id(TaskKind.RUN_STEP, self.w.eid, f"{fid}@{attempt}"), kind=TaskKind.RUN_STEP, queue=queue,
            eid=self.w.eid, payload=payload, provenance=self.w.rt.provenance(epoch=self.w.epoch, attempt=attempt),
            visible_at=self.w.rt.clock.now(), application=self.w.record.application, attempt=attempt,
        ))
        await self.w.write(write)
        self.r.memo.attempts_started.add((fid, attempt))

    # -- internal steps: now, random, uuid

    def _internal(self, name: str, produce: Callable[[], Any], convert: Callable[[Any], Any]) -> Awaitable[Any]:
        fid, outcome = self.r.frame(name, None, FrameKind.STEP, digest([]))
        if outcome is not None:
            return self.r.done(convert(outcome.value))

        async def run() -> Any:
            value = produce()
            await self.w.write(plain(Write(entries=[
                self.w.entry(EntryKind.FRAME_STARTED, fid, FrameKind.STEP, attempt=1, dig=digest([])),
                self.w.entry(EntryKind.FRAME_COMPLETED, fid, FrameKind.STEP, attempt=1, value=value),
            ])))
            return convert(value)

        return self.r.spawn(run())

    def now(self) -> Awaitable[datetime]:
        return self._internal("now", lambda: self.w.rt.clock.now().isoformat(), datetime.fromisoformat)

    def random(self) -> Awaitable[float]:
        return self._internal("random", _random.random, float)

    def uuid(self) -> Awaitable[str]:
        return self._internal("uuid", lambda: str(_uuid.uuid4()), str)

    # -- effect steps: send, announce, enqueue, withdraw. The effect and the memo are one write.

    def _effect(self, name: str, args: Any, make: Callable[[str, Provenance], tuple[Any, Write]]) -> Awaitable[Any]:
        """``make(fid, provenance)`` gives the memo (or None when the store fills it in) and the
        write of the effect, whose memo references point at entry 1, the frame.completed."""
        args = check_json(args, f"the arguments of {name} in workflow {self.w.wf.name!r}")
        dig = digest(args)
        fid, outcome = self.r.frame(name, None, FrameKind.STEP, dig)
        if outcome is not None:
            return self.r.done(outcome.value)

        async def run() -> Any:
            prov = self.w.rt.provenance(epoch=self.w.epoch, code=Code(self.w.wf.name, self.w.wf.version, "step", name), attempt=1)
            value, write = make(fid, prov)
            completed = self.w.entry(EntryKind.FRAME_COMPLETED, fid, FrameKind.STEP, attempt=1, value=value)
            write.entries = [self.w.entry(EntryKind.FRAME_STARTED, fid, FrameKind.STEP, attempt=1, dig=dig), completed]
            result = await self.w.write(write)
            value = result.entry_values[next(i for i, e in enumerate(write.entries) if e is completed)]
            self.r.memo.outcome[fid] = Entry(**{**completed.__dict__, "value": value})
            return value

        return self.r.spawn(run())

    def send(self, channel: str, payload: Any, scope: Scope = "execution") -> Awaitable[int]:
        full = channel_name(self.w.eid, self.w.record.application, channel, scope)

        def make(fid: str, prov: Provenance) -> tuple[Any, Write]:
            write = Write(messages=[NewMessage(full, payload, prov, memo=1, application=self.w.record.application)])
            if scope == "global":
                write.wake_waiters = [WakeWaiters(full, f"send:{self.w.eid}:{fid}", prov)]
            return None, write

        return self._effect("send", [full, payload], make)

    def announce(self, kind: str, data: Any) -> Awaitable[int]:
        def make(fid: str, prov: Provenance) -> tuple[Any, Write]:
            entry = Entry(eid=self.w.eid, kind=EntryKind.ANNOUNCED, provenance=prov, fid=fid, value={"kind": kind, "data": data})
            return None, Write(announcements=[Announcement(entry, memo=1)])

        return self._effect("announce", [kind, data], make)

    def enqueue(self, queue: str, kind: TaskKind | str, payload: Any, key: str | None = None) -> Awaitable[str]:
        task_kind = TaskKind(kind)

        def make(fid: str, prov: Provenance) -> tuple[Any, Write]:
            tid = task_id(task_kind, self.w.eid, key or fid)
            task = Task(id=tid, kind=task_kind, queue=queue, eid=self.w.eid, payload=payload, provenance=prov,
                        visible_at=self.w.rt.clock.now(), application=self.w.record.application)
            return tid, Write(tasks=[task])

        return self._effect("enqueue", [queue, task_kind.value, payload, key], make)

    def withdraw(self, task_id: str) -> Awaitable[bool]:
        def make(fid: str, prov: Provenance) -> tuple[Any, Write]:
            return None, Write(withdrawals=[Withdrawal(task_id, memo=1)])

        return self._effect("withdraw", [task_id], make)

    def claim(self, key: str) -> Awaitable[bool]:
        def make(fid: str, prov: Provenance) -> tuple[Any, Write]:
            return None, Write(claims=[Claim(key, f"{self.w.eid}/{fid}", memo=1)])

        return self._effect("claim", [key], make)
