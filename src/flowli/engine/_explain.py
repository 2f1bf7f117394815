"""``engine.explain``: what a run waits on, from its record, its journal, its timers, its tasks
and the workers that run: a timer and its instant, a message on a channel, a child, a DELEGATE
task on a queue (and who holds it), a queue that no live worker serves, an expired lease."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from flowli.domain import EntryKind, Status, TaskKind

from ._archive import Archive
from ._operations import read_journal, read_record
from ._runtime import Runtime

KNOWN_FOR = timedelta(days=7)
"""How long a worker's row counts after it was last seen: a queue that one served within it, and
none alive serves now, is unserved."""


@dataclass(frozen=True)
class Explanation:
    """Why a run is where it is: ``summary`` (one sentence), and each thing it waits on in
    ``waits`` (a dict with ``kind``: timer, message, child, delegate, step, task, queue, lease,
    running, blocked)."""

    eid: str
    status: str
    summary: str
    waits: tuple[dict[str, Any], ...] = ()
    last_seq: int = 0
    last_at: datetime | None = None
    """The last entry of its journal: how long it has been idle."""


async def explain(rt: Runtime, archive: Archive, eid: str, application: str | None) -> Explanation:
    record = await read_record(rt, archive, eid, application)
    journal = await read_journal(rt, archive, eid, application)
    last = journal[-1] if journal else None
    base: dict[str, Any] = {"eid": eid, "status": record.status.value, "last_seq": (last.seq or 0) if last else 0,
                            "last_at": last.at if last else None}
    if record.terminal:
        return Explanation(**base, summary=f"it ended {record.status.value}; it waits on nothing")
    now = rt.clock.now()
    live_after = now - max(rt.options.lease_ttl, timedelta(seconds=3))
    served: dict[str, bool] = {}  # each queue a worker (or a consumer: Consumer.present) serves: whether one lives
    for w in await rt.store.read_workers(now - KNOWN_FOR):
        for q in w["queues"] or ():
            served[q] = served.get(q, False) or w["seen_at"] > live_after

    def unserved(queue: str, served_by: str | None = None) -> dict[str, Any] | None:
        if served.get(queue):
            return None
        return {"kind": "queue", "queue": queue, "message": f"no live worker serves {served_by or f'queue {queue!r}'}"}

    waits: list[dict[str, Any]] = []
    if record.blocked is not None:
        waits.append({"kind": "blocked", **record.blocked,
                      "message": f"an operator: nondeterminism at {record.blocked.get('fid')} (cancel or migrate it)"})
        return Explanation(**base, summary=f"it is blocked: {waits[0]['message']}", waits=tuple(waits))
    if record.status is Status.RUNNING and record.lease_owner is not None:
        expires = record.lease_expires_at
        if expires is not None and expires <= now:
            waits.append({"kind": "lease", "owner": record.lease_owner, "epoch": record.lease_epoch,
                          "expired_at": expires.isoformat(),
                          "message": f"the lease of {record.lease_owner} expired at {expires.isoformat()}: its worker"
                                     " is presumed dead, and the sweeper hands the run to another"})
        else:
            waits.append({"kind": "running", "owner": record.lease_owner, "epoch": record.lease_epoch,
                          "expires_at": expires.isoformat() if expires else None,
                          "message": f"it runs on {record.lease_owner}"})
        return Explanation(**base, summary=waits[0]["message"], waits=tuple(waits))
    tasks = await rt.store.read_tasks(eid=eid)
    for t in tasks:
        if t.kind in (TaskKind.START, TaskKind.RESUME):
            waits.append({"kind": "task", "task": t.id, "queue": t.queue, "visible_at": t.visible_at.isoformat(),
                          "message": f"a {t.kind.value} task on queue {t.queue!r} for a worker to take"})
            if (u := unserved(t.queue)) is not None:
                waits.append(u)
    suspended = next((e for e in reversed(journal) if e.kind is EntryKind.EXECUTION_SUSPENDED), None)
    described = (suspended.value or {}).get("waits", []) if suspended is not None and isinstance(suspended.value, dict) else []
    timers = {t.fid: t.at for t in await rt.store.read_timers(eid)}
    if suspended is not None and suspended.value == {"reason": "decider"}:
        # a decider's execution describes no wait: what it has open is its tasks and its timers
        described = [{"fid": t.frame["fid"], "kind": "delegate", "queue": t.queue, "workers": t.frame.get("workers"),
                      "label": t.frame.get("label"), "served_by": t.frame.get("served_by")}
                     for t in tasks if t.kind is TaskKind.DELEGATE and t.frame is not None] + \
                    [{"fid": fid, "kind": "timer"} for fid in sorted(timers)]
    for w in described:
        fid, kind = w.get("fid"), w.get("kind")
        if kind == "timer" or (w.get("until") and kind not in ("message", "delegate")):
            at = timers.get(fid) or (datetime.fromisoformat(w["until"]) if w.get("until") else None)
            waits.append({"kind": "timer", "fid": fid, "at": at.isoformat() if at else None,
                          "message": f"frame {fid} waits until {at.isoformat() if at else '?'}"})
        elif kind == "message":
            entry = {"kind": "message", "fid": fid, "channel": w.get("channel"),
                     "message": f"frame {fid} waits for a message on {w.get('channel')}"}
            if w.get("until"):
                entry["until"] = w["until"]
                entry["message"] += f" until {w['until']}"
            waits.append(entry)
        elif kind == "child":
            child = w.get("child")
            try:
                status = (await read_record(rt, archive, child, None)).status.value
            except Exception:
                status = "unknown"
            waits.append({"kind": "child", "fid": fid, "child": child, "child_status": status,
                          "message": f"frame {fid} waits for child execution {child} ({status})"})
        elif kind in ("delegate", "step"):
            task = next((t for t in tasks if t.kind in (TaskKind.DELEGATE, TaskKind.RUN_STEP) and
                         (t.frame or {}).get("fid", (t.payload or {}).get("fid") if isinstance(t.payload, dict) else None)
                         == fid), None)
            queue = w.get("queue") or (task.queue if task else None)
            entry = {"kind": kind, "fid": fid, "queue": queue, "task": task.id if task else None,
                     "attempt": task.attempt if task else None}
            label = w.get("label")  # the work in its consumers' words (a pipeline's stage), when it says so
            if task is not None and task.lease_owner is not None:
                entry["held_by"] = task.lease_owner
                entry["lease_expires_at"] = task.visible_at.isoformat()
                entry["message"] = f"{label} runs on {task.lease_owner}" if label else \
                    f"frame {fid} waits for {task.lease_owner} to answer its task on queue {queue!r}"
            elif label:
                entry["message"] = f"{label} waits for a worker to take its job"
            else:
                who = "a consumer" if kind == "delegate" else "a worker"
                entry["message"] = f"frame {fid} waits for {who} to take its task on queue {queue!r}"
            waits.append(entry)
            # a step's queue is a worker's; a delegation's, a consumer's that said it serves it
            # (an application's HTTP worker does) and has gone silent since, or one whose consumers
            # are such workers (``Delegate.workers``: a pipeline's stage) when none lives
            if queue and (kind == "step" or queue in served or w.get("workers")) and \
                    (u := unserved(queue, w.get("served_by"))) is not None:
                waits.append(u)
    if not waits:
        summary = "it waits on nothing that flowli knows of" if record.status is not Status.PENDING else \
            "it waits for a worker"
    else:
        summary = "; ".join(w["message"] for w in waits)
    return Explanation(**base, summary=summary, waits=tuple(waits))
