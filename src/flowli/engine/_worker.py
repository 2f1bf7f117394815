"""The worker: dequeues tasks, acquires leases, runs activations and RUN_STEP tasks.

Side tasks, named and supervised: the renewer (renews the leases this worker holds) and the
sweeper. A stop cancels the dequeue loop first, then waits for the running activations.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import Any, Awaitable, Sequence

from flowli.domain import (
    TERMINAL,
    Code,
    Entry,
    EntryKind,
    ExecutionRecord,
    ExecutionStateError,
    FrameKind,
    LeaseLost,
    Status,
    Task,
    TaskKind,
    UnknownWorkflowError,
    check_json,
    task_id,
)
from flowli.log import Attempt, attempt_scope
from flowli.store import Acquired, Fence, Resume, StatusChange, Write

from ._activation import Activation
from ._core import Stopping, StoreFailure, store_call
from ._deciding import carries_command, handle, tell_parent
from ._errors import error_data
from ._runtime import Runtime
from ._steps import failure_entry_value, import_ref, policy_from_json, run_function
from ._sweeper import Sweeper
from ._tasks import cancel_and_wait
from ._tracing import NO_SPAN, derived, parse_traceparent, step_attributes
from ._transitions import Transition, commit

log = logging.getLogger("flowli.worker")
_numbers = itertools.count(1)
_KINDS = (TaskKind.START, TaskKind.RESUME, TaskKind.RUN_STEP)


class Worker:
    def __init__(
        self, rt: Runtime, *, concurrency: int = 64, queues: Sequence[str] = ("default",), sweeper: bool = True,
        grace: float | None = None,
    ):
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self.rt = rt
        self.concurrency = concurrency
        self.grace = rt.options.grace if grace is None else grace
        """Seconds that a stop waits for the steps under way before it hands back what still runs."""
        self.queues = tuple(queues)
        self.id = f"{rt.owner}/w{next(_numbers)}"
        """This worker's row among the workers (``engine.explain`` tells a queue that none serves)."""
        self.running: dict[str, asyncio.Task[Any]] = {}
        self.held: dict[str, Activation] = {}
        self.sweeper = Sweeper(rt) if sweeper else None
        self._slot = asyncio.Event()
        self.reserved = 0
        """Slots promised to direct starts whose write has not committed yet."""
        self.accepting = False
        self.retired = False
        """Stopped for good: it takes no direct start any more."""

    async def run(self) -> None:
        side = [asyncio.create_task(self._renew_loop(), name="flowli-renewer")]
        if self.sweeper is not None:
            side.append(asyncio.create_task(self.sweeper.run(), name="flowli-sweeper"))
        self.accept()
        try:
            await self._dequeue_loop()
        finally:
            self._leave()
            await cancel_and_wait(side)
            await self._drain()

    async def _drain(self) -> None:
        """The steps under way finish (for ``grace`` seconds at most); each execution is handed
        back at its next frame, or suspends if it waits. What still runs after the grace is handed
        back as it is, and the log says which. A second stop (a cancel of the wait) stops at once."""
        if not self.running:
            return
        for activation in self.held.values():
            activation.mark_stopping()
        log.info("stopping: the running activations end first (%d; up to %g s)", len(self.running), self.grace)
        pending: set[asyncio.Task[Any]] = set()
        try:
            _, pending = await asyncio.wait(list(self.running.values()), timeout=self.grace)
        except asyncio.CancelledError:
            pending = set(self.running.values())
            raise
        finally:
            if pending:
                names = [eid for eid, a in self.held.items()]
                log.warning("handing back %d execution(s) still running after the grace: %s", len(pending),
                            ", ".join(names) or "(their tasks had not started)")
            await cancel_and_wait(pending)

    # ---- direct starts: an execution started in this process runs here at once -------------

    def accept(self) -> None:
        """Take direct starts from now on (``run`` does it; ``Engine.worker`` earlier, so that a
        start made as soon as its block opens runs here)."""
        if not self.retired:
            self.accepting = True

    def reserve(self, queue: str | None) -> bool:
        """Promise a slot to an execution being started (or resumed) in this process on ``queue``
        (None: a queue of this worker, which the store checks as it takes the lease)."""
        if not self.accepting or (queue is not None and queue not in self.queues) or self._free() <= 0:
            return False
        self.reserved += 1
        return True

    async def retire(self) -> None:
        """Take no more direct starts; stop what still runs here (``run`` may never have started:
        a worker cancelled at once). Each activation stopped hands its execution back."""
        self._leave()
        await cancel_and_wait(list(self.running.values()))

    def _leave(self) -> None:
        """Take no direct start any more, for good."""
        self.accepting = False
        self.retired = True

    def unreserve(self) -> None:
        self.reserved -= 1
        self._slot.set()

    def adopt(self, record: ExecutionRecord, journal: list[Entry], key: str | None = None, after: int = 0) -> None:
        """Run an execution leased to this process as it was created (epoch 1) or resumed (the
        write acquired its lease, see ``Acquisition``; ``key`` its RESUME task), in a reserved slot."""
        self.reserved -= 1
        key = key or task_id(TaskKind.START, record.eid)
        # a worker that stopped while the start was written hands the execution back (a RESUME
        # on its queue) instead of running it unsupervised
        work = self._run(record, record.lease_epoch, journal, after) if self.accepting else \
            asyncio.shield(self._hand_back(record, record.lease_epoch, None))
        self.running[key] = asyncio.create_task(self._handle(key, work), name=f"flowli-task-{key}")

    def _free(self) -> int:
        return self.concurrency - len(self.running) - self.reserved

    # ---- the dequeue loop ---------------------------------------------------------------------

    async def _dequeue_loop(self) -> None:
        rt = self.rt
        idle = 0.0
        while True:
            free = self._free()
            if free <= 0:
                self._slot.clear()
                await self._slot.wait()
                continue
            rt.wakeups.work.clear()
            tasks = await self._dequeue(free)
            # the executions of the tasks dequeued together are acquired together (one store call)
            # a task that carries a command to a decider is applied, not activated (no lease, no replay)
            acquisitions = self._acquire_all([t for t in tasks if t.kind is not TaskKind.RUN_STEP
                                              and not carries_command(t)])
            for task in tasks:
                key = task.id
                work = self._run_step(task) if task.kind is TaskKind.RUN_STEP else \
                    handle(rt, task) if carries_command(task) else self._activate(acquisitions[key])
                self.running[key] = asyncio.create_task(self._handle(key, work), name=f"flowli-task-{key}")
            if tasks:
                idle = 0.0
                continue
            # nothing visible: wait for an in-process enqueue, or poll (other processes)
            idle = min(rt.options.poll_interval, idle * 2 or 0.01)
            # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancellation that arrives
            # as the event fires, and the worker would never stop
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(idle):
                    await rt.wakeups.work.wait()

    async def _handle(self, key: str, work: Awaitable[None]) -> None:
        try:
            await work
        except LeaseLost as lost:
            log.warning("lease lost: %s; this worker writes nothing more for it", lost)
        except StoreFailure as failure:  # transient: the task comes back when its lease expires
            log.warning("task %s: %s; it is dequeued again after its lease", key, failure)
        except Exception:
            log.exception("task %s failed in the worker", key)
        finally:
            self.running.pop(key, None)
            self._slot.set()

    async def _dequeue(self, limit: int) -> list[Task]:
        """Dequeue up to ``limit`` tasks. A stop that comes while the store dequeues gives the
        tasks back at once (else they would stay leased to this stopped worker for task_ttl)."""
        rt = self.rt
        fetch = asyncio.ensure_future(
            rt.store.dequeue(self.queues, _KINDS, rt.owner, limit, rt.options.task_ttl, rt.clock.now())
        )
        try:
            return await asyncio.shield(fetch)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                for task in await fetch:
                    await rt.store.nack(task.id, rt.owner, timedelta(0), rt.clock.now())
            raise

    def _acquire_all(self, tasks: list[Task]) -> dict[str, asyncio.Future[Acquired]]:
        """Acquire the executions of START and RESUME tasks in one store call, acking the tasks;
        the answer of each task id is a future."""
        loop = asyncio.get_running_loop()
        answers: dict[str, asyncio.Future[Acquired]] = {t.id: loop.create_future() for t in tasks}
        if not tasks:
            return answers
        rt = self.rt

        async def acquire() -> None:
            try:
                wanted = [(t.eid or "", t.id) for t in tasks]
                # an execution kept in the workflow cache needs only the journal after what it holds
                after = {eid: rt.cache.horizon(eid) for eid, _ in wanted if eid in rt.cache}
                got = await rt.store.acquire_many(wanted, rt.owner, rt.options.lease_ttl, rt.clock.now(), after)
            except BaseException as exc:
                for fut in answers.values():
                    if not fut.done():
                        fut.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
                return
            for t, acquired in zip(tasks, got):
                fut = answers[t.id]
                if not fut.done():
                    fut.set_result(acquired)
                elif fut.cancelled() and acquired.record is not None and acquired.epoch is not None:
                    # its activation was stopped (the worker stops) while this was in flight
                    with contextlib.suppress(Exception):
                        await self._hand_back(acquired.record, acquired.epoch, None)

        task = asyncio.ensure_future(acquire())
        # the activations await the answers; retrieve a failure here so that it is not reported twice
        task.add_done_callback(lambda done: done.cancelled() or done.exception())
        return answers

    async def _activate(self, answer: asyncio.Future[Acquired]) -> None:
        acquired = await store_call(answer)
        if acquired.epoch is None or acquired.record is None:
            return  # terminal, unknown, or owned by a live worker whose suspension will check its waits
        await self._run(acquired.record, acquired.epoch, acquired.journal, acquired.after)

    async def _run(self, record: ExecutionRecord, epoch: int, journal: list[Entry], after: int = 0) -> None:
        """Run one activation of an execution whose lease (``epoch``) this worker holds: the one
        kept in the workflow cache continues when it can (``journal`` then holds the entries after
        seq ``after``), else a new one replays the journal."""
        rt = self.rt
        activation = self._kept(record, epoch, journal, after)
        if activation is None:
            try:
                wf = rt.registry.get(record.workflow, record.version)
            except UnknownWorkflowError as exc:
                # this process lacks the code: give the execution back to a worker that has it
                log.error("no workflow %s version %s in this worker; execution %s handed back",
                          record.workflow, record.version, record.eid)
                await self._hand_back(record, epoch, exc, delay=5.0)
                return
            if after:  # the cache held the rest of the journal, and its activation cannot continue
                try:
                    journal = await store_call(rt.store.read_journal(record.eid))
                except StoreFailure as failure:
                    log.warning("activation of %s: %s; handing it back", record.eid, failure)
                    with contextlib.suppress(Exception):
                        await self._hand_back(record, epoch, failure.cause if isinstance(failure.cause, Exception) else None)
                    return
            activation = Activation(rt, wf, record, epoch, journal)
        self.held[record.eid] = activation
        try:
            await activation.run()
        except asyncio.CancelledError:
            # the worker stops: give the execution back now rather than at lease expiry
            with contextlib.suppress(BaseException):
                await asyncio.shield(self._hand_back(record, epoch, None))
            raise
        except Stopping:
            # the worker stops: the frames under way finished; hand the execution back now
            with contextlib.suppress(BaseException):
                await asyncio.shield(self._hand_back(record, epoch, None))
        except LeaseLost:
            # a renewal found the lease lost (it came after the lease's end, say): if no worker
            # took the execution meanwhile, this one still holds it, and hands it back now rather
            # than leave it until the lease runs out; the write is fenced, so it changes nothing
            # when another worker has it
            with contextlib.suppress(BaseException):
                await asyncio.shield(self._hand_back(record, epoch, None, reason="lease lost"))
            raise
        except (Exception, StoreFailure) as failure:
            cause = failure.cause if isinstance(failure, StoreFailure) else failure
            # not the workflow's failure (that is an outcome): the store or the engine itself.
            # Hand the execution back at once rather than hold the lease until it expires.
            log.warning("activation of %s failed (%s: %s); handing it back", record.eid, type(cause).__name__, cause)
            with contextlib.suppress(Exception):
                await self._hand_back(record, epoch, cause if isinstance(cause, Exception) else None)
        finally:
            if self.held.get(record.eid) is activation:
                del self.held[record.eid]
        if activation.told is not None:  # its end, to its decider parent at once
            await tell_parent(rt, *activation.told)

    def _kept(self, record: ExecutionRecord, epoch: int, tail: list[Entry], after: int) -> Activation | None:
        """The activation kept for the execution in the workflow cache, continued under ``epoch``
        (None: none, or one that cannot continue, now discarded)."""
        kept = self.rt.cache.take(record.eid)
        if kept is None:
            return None
        assert isinstance(kept, Activation)
        horizon = kept.replay.horizon
        # ``tail`` holds the journal after seq ``after``: the whole journal (0) when the lease was
        # acquired before the run was kept (a resume queued while its last activation still ran)
        if after <= horizon:
            unseen = tail if after == horizon else [e for e in tail if (e.seq or 0) > horizon]
            if kept.resume(record, epoch, unseen):
                self.rt.cache.hits += 1
                return kept
        self.rt.cache.misses += 1
        kept.discard()
        return None

    async def _hand_back(self, record: Any, epoch: int, exc: Exception | None, delay: float = 1.0,
                         reason: str | None = None) -> None:
        """Append execution.suspended, release the lease and enqueue a RESUME: after an engine
        error (``exc``, resumed a second later) or when the worker stops or its lease was found
        lost (``exc`` None, at once)."""
        rt = self.rt
        now = rt.clock.now()
        entry = Entry(
            eid=record.eid, kind=EntryKind.EXECUTION_SUSPENDED, fid="root",
            value={"reason": reason or ("worker error" if exc is not None else "worker stopped")},
            error=error_data(exc) if exc is not None else None,
            provenance=rt.provenance(epoch=epoch, code=Code(record.workflow, record.version)),
        )
        retry = Task(
            id=task_id(TaskKind.RESUME, record.eid, f"handed-back:{epoch}"), kind=TaskKind.RESUME, queue=record.queue,
            eid=record.eid, payload=None, provenance=entry.provenance,
            visible_at=now + timedelta(seconds=delay if exc is not None else 0), application=record.application,
        )
        write = Write(fence=Fence(record.eid, rt.owner, epoch), entries=[entry], release=True,
                      status=StatusChange(record.eid, Status.SUSPENDED), tasks=[retry])
        # a RESUME visible later (after an error) plans the sweeper's wake: it wakes the workers then
        await commit(rt, Transition("hand_back", write, record.eid, record.workflow, rt.principal, record.application,
                                    entry.value))

    async def _run_step(self, task: Task) -> None:
        """Run one step frame for an execution owned elsewhere; its outcome goes to the journal
        unfenced (the first outcome wins), with a RESUME for the execution."""
        rt = self.rt
        p = task.payload
        assert task.eid is not None
        fid, attempt = p["fid"], p["attempt"]
        code = Code(p["workflow"], p["version"], FrameKind.STEP.value, fid.rsplit("/", 1)[-1], p["ref"])
        prov = rt.provenance(code=code, attempt=attempt)
        try:
            fn = import_ref(p["ref"])
            with attempt_scope(Attempt(task.eid, fid, attempt, rt.bucket)), self._remote_span(task):
                value = await run_function(fn, p["args"], p["kwargs"])
            value = check_json(value, f"the value of step {fid}")
            entry = Entry(eid=task.eid, kind=EntryKind.FRAME_COMPLETED, provenance=prov, fid=fid, attempt=attempt, value=value)
        except Exception as exc:  # an outcome, journaled
            policy = policy_from_json(p["retry"])
            entry = Entry(
                eid=task.eid, kind=EntryKind.FRAME_FAILED, provenance=prov, fid=fid, attempt=attempt,
                value=failure_entry_value(policy, p.get("tries", attempt), exc, rt.clock.now()), error=error_data(exc),
            )
        resume = Resume(
            id=task_id(TaskKind.RESUME, task.eid, f"step:{fid}@{attempt}"), eid=task.eid, payload=None,
            provenance=prov, visible_at=rt.clock.now(),
        )
        write = Write(
            expect=(task.eid, frozenset(Status) - TERMINAL), entries=[entry], acks=[(task.id, rt.owner)], resumes=[resume]
        )
        try:
            await commit(rt, Transition("step_outcome", write, task.eid, p["workflow"], rt.principal, task.application,
                                        {"fid": fid, "attempt": attempt}))
        except ExecutionStateError:
            await rt.store.write(Write(acks=[(task.id, rt.owner)]), rt.clock.now())

    def _remote_span(self, task: Task) -> AbstractContextManager[Any]:
        """The span of a step attempt run for an execution owned elsewhere: a child of the
        activation that enqueued it (tracing on)."""
        tracing, p = self.rt.tracing, task.payload
        parent = parse_traceparent(p.get("trace")) if tracing is not None else None
        if tracing is None or parent is None or task.eid is None:
            return NO_SPAN
        span = tracing.start(f"step {p.get('name') or p['fid']}",
                             derived(parent, "step", task.eid, p["fid"], p["attempt"], f"delivery {task.deliveries}"),
                             parent,
                             step_attributes(task.eid, p["fid"], p["attempt"], p["workflow"], p["version"]))
        return tracing.current(span)

    async def _renew_loop(self) -> None:
        rt = self.rt
        period = max(rt.options.lease_ttl.total_seconds() / 3, 0.05)
        seen = 0.0
        loop = asyncio.get_running_loop()
        while True:
            if loop.time() - seen >= max(period, 1.0):  # this worker is alive: its row says so
                try:
                    versions = {name: rt.registry.versions(name) for name in rt.registry.names()}
                    await rt.store.register_worker(self.id, "engine", self.queues, rt.clock.now(), versions)
                    seen = loop.time()
                except Exception:
                    log.exception("writing the worker's row failed")
            await asyncio.sleep(period)
            if not self.held:
                continue
            asked = {eid: a for eid, a in self.held.items()}
            leases = [(eid, a.epoch) for eid, a in asked.items()]
            try:
                renewal = await rt.store.renew(rt.owner, leases, rt.options.lease_ttl, rt.clock.now())
            except Exception:
                log.exception("lease renewal failed")
                continue
            # the answer is about the activations asked for: one that ended while the store renewed
            # (its execution suspended) may have a successor of the same execution here already (a
            # direct resume, at the next epoch), whose lease is not the one found lost
            for eid in renewal.lost:
                activation = self.held.get(eid)
                if activation is not None and activation is asked[eid]:
                    activation.mark_lost()
            for eid in renewal.cancel_requested:
                activation = self.held.get(eid)
                if activation is not None:
                    activation.mark_cancel_requested()


