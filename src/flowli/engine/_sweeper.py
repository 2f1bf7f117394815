"""The sweeper: fires due timers, recovers executions whose lease expired, and repairs the
control log after a crash between the two appends.

Every worker may run one. Each action is an idempotent enqueue (task ids derive from the timer
or the lost epoch), so two sweepers fire each timer once and recover each execution once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from flowli.domain import (
    TERMINAL,
    Entry,
    EntryKind,
    ExecutionStateError,
    StaleAnswer,
    Status,
    Task,
    TaskKind,
    UnknownExecutionError,
    task_id,
)
from flowli.store import Intent, Resume, TaskHold, Write

from . import _deciding as deciding
from ._archive import Archive
from ._decider import DECIDER_TASK, decided
from ._retention import retain
from ._runtime import SWEEPER, WORK, Runtime
from ._tasks import cancel_and_wait
from ._transitions import Transition, commit

log = logging.getLogger("flowli.sweeper")
NOT_TERMINAL = frozenset(Status) - TERMINAL
_BATCH = 500


class Sweeper:
    def __init__(self, rt: Runtime):
        self.rt = rt
        self.actor = SWEEPER.actor
        self.archive = Archive(Path(rt.options.bucket))
        self.next_retention = 0.0

    async def run(self) -> None:
        rt = self.rt
        loop = asyncio.get_running_loop()
        next_full = 0.0
        until: datetime | None = None  # the instant planned last
        while True:
            rt.wakeups.planned_wake = None  # sweeping: a timer set now pokes the next wait at once
            if until is not None and until <= rt.clock.now():
                # the instant planned has come, whatever ended the wait: a task planned for may be
                # visible now, and the workers wait for an enqueue or their slow poll (the next
                # plan leaves out the tasks visible already)
                rt.wakeups.work.set()
                rt.wakeups.hub.touch(WORK)
            try:
                if loop.time() >= next_full:
                    # the whole sweep once per interval; a wake for a due timer between two fires only
                    next_full = loop.time() + rt.options.sweep_interval
                    await self.sweep()
                else:
                    await self.fire_timers()
            except Exception:
                log.exception("sweep failed")
            rt.wakeups.timers.clear()
            now = rt.clock.now()
            until = now + timedelta(seconds=rt.options.sweep_interval)
            try:
                wake = await rt.store.next_wake(now)
            except Exception:
                log.exception("reading the next wake failed")
                wake = None
            if wake is not None and wake < until:
                until = max(wake, now)
            rt.wakeups.planned_wake = until
            sleeper = asyncio.ensure_future(rt.clock.sleep_until(until))
            poke = asyncio.ensure_future(rt.wakeups.timers.wait())
            try:
                # the sweep interval bounds the wait in real time too, for a clock that does not move
                await asyncio.wait(
                    {sleeper, poke}, timeout=rt.options.sweep_interval, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                await cancel_and_wait((sleeper, poke))

    async def sweep(self) -> int:
        """One pass; returns the number of tasks enqueued and entries repaired."""
        done = await self.fire_timers() + await self.recover() + await self.expire() + await self.repair()
        self.rt.stats.sweeps += 1
        loop = asyncio.get_running_loop()
        if loop.time() >= self.next_retention:
            self.next_retention = loop.time() + self.rt.options.retention_interval
            done += await retain(self.rt, self.archive)
        return done

    async def fire_timers(self) -> int:
        rt = self.rt
        now = rt.clock.now()
        timers = await rt.store.due_timers(now, _BATCH)
        if not timers:
            return 0
        prov = rt.provenance(actor=self.actor)
        # each RESUME goes on the queue of its execution (the store reads it)
        resumes = [
            Resume(
                id=task_id(TaskKind.RESUME, t.eid, f"timer:{t.fid}@{t.at.timestamp()}"), eid=t.eid,
                payload={"timer": t.fid, **DECIDER_TASK} if decided(t.fid) else {"timer": t.fid},
                provenance=prov, visible_at=now,
            )
            for t in timers
        ]
        await commit(rt, Transition("fire", Write(intent=Intent.FIRE, resumes=resumes, fired=timers), principal=SWEEPER,
                                    payload={"timers": [(t.eid, t.fid) for t in timers]}))
        rt.stats.timer_lag = max(0.0, (now - min(t.at for t in timers)).total_seconds())
        return len(resumes)

    async def recover(self) -> int:
        rt = self.rt
        now = rt.clock.now()
        dead = await rt.store.expired_leases(now, _BATCH)
        if not dead:
            return 0
        prov = rt.provenance(actor=self.actor)
        tasks = [
            Task(
                id=task_id(TaskKind.RESUME, r.eid, f"recover:{r.lease_epoch}@{r.lease_expires_at.timestamp() if r.lease_expires_at else 0}"), kind=TaskKind.RESUME,
                queue=r.queue, eid=r.eid, payload={"recover": r.lease_epoch}, provenance=prov, visible_at=now,
                application=r.application,
            )
            for r in dead
        ]
        await commit(rt, Transition("recover", Write(tasks=tasks), principal=SWEEPER,
                                    payload={"executions": [r.eid for r in dead]}))
        rt.stats.recoveries += len(tasks)
        return len(tasks)

    async def expire(self) -> int:
        """End each DELEGATE attempt whose consumer's lease expired (a consumer that died or
        stalled): its frame fails that attempt with LEASE_EXPIRED and its execution resumes to make
        the next one, until the frame's bound of expiries. A late answer to it is then stale."""
        rt = self.rt
        now = rt.clock.now()
        ended = 0
        for task in await rt.store.expired_tasks(now, _BATCH):
            assert task.frame is not None and task.eid is not None
            frame = task.frame
            if frame.get("decider"):
                ended += await self._expire_decided(task, now)
                continue
            expiries = frame["expiries"] + 1
            final = expiries >= frame["max_expiries"]
            value: dict[str, Any] = {"final": final, "expired": True}
            if not final:
                value["retry_at"] = now.isoformat()
            prov = rt.provenance(actor=self.actor, attempt=task.attempt)
            entry = Entry(eid=task.eid, kind=EntryKind.FRAME_FAILED, provenance=prov, fid=frame["fid"],
                          attempt=task.attempt, value=value, error={
                              "type": "LEASE_EXPIRED", "module": None,
                              "message": f"the lease of {task.lease_owner} on attempt {task.attempt} of {frame['fid']}"
                                         f" expired (expiry {expiries} of {frame['max_expiries']})"})
            resume = Resume(id=task_id(TaskKind.RESUME, task.eid, f"expired:{task.id}"), eid=task.eid, payload=None,
                            provenance=prov, visible_at=now)
            hold = TaskHold(task.id, expired=True, end="withdrawn")
            write = Write(expect=(task.eid, NOT_TERMINAL), entries=[entry], hold=hold, resumes=[resume])
            try:
                await commit(rt, Transition("expire", write, task.eid, frame.get("workflow"), SWEEPER, task.application,
                                            {"task": task.id, "attempt": task.attempt, "final": final}))
                ended += 1
                if rt.tracing is not None:
                    rt.tracing.delegate_ended(task, now, entry.error["message"] if entry.error else "LEASE_EXPIRED")
            except StaleAnswer:
                continue  # renewed, answered or failed meanwhile
            except (ExecutionStateError, UnknownExecutionError):
                # its execution ended: nobody waits for the attempt any more
                with contextlib.suppress(StaleAnswer):
                    await rt.store.write(Write(hold=hold), now)
        return ended

    async def _expire_decided(self, task: Task, now: datetime) -> int:
        """End an attempt of a decider's DELEGATE whose lease expired: the command Expired goes to
        its decider in the write that withdraws the task (a late answer to it is then stale)."""
        rt = self.rt
        assert task.eid is not None
        hold = TaskHold(task.id, expired=True, end="withdrawn")
        try:
            result = await deciding.apply(rt, task.eid, deciding.expired_command(task), kind="expire",
                                          base=lambda: Write(hold=hold), principal=SWEEPER,
                                          payload={"task": task.id, "attempt": task.attempt})
        except StaleAnswer:
            return 0  # renewed, answered or failed meanwhile
        except (ExecutionStateError, UnknownExecutionError):
            result = None
        if result is None:  # its execution ended: nobody waits for the attempt any more
            with contextlib.suppress(StaleAnswer):
                await rt.store.write(Write(hold=hold), now)
            return 0
        if rt.tracing is not None:
            rt.tracing.delegate_ended(task, now, "LEASE_EXPIRED")
        return 1

    async def repair(self) -> int:
        rt = self.rt
        now = rt.clock.now()
        missing = await rt.store.unannounced(now - rt.options.repair_grace, _BATCH)
        if missing:
            log.warning("repairing %d control-log entries", len(missing))
            await rt.announcer.announce(missing)
        return len(missing)


