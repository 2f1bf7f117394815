"""The logic of a write, once for every backend, free of I/O.

Each function here is a generator that yields the statements it needs, as ``(mode, sql,
params)``, and receives their results: ``"one"`` a row or None, ``"all"`` a list of rows,
``"exec"`` a row count. A backend drives it on its own connection inside its own transaction
(see ``drive`` in each backend). The SQL is written once in the dialect both SQLite and
PostgreSQL accept (``ON CONFLICT``, ``RETURNING``); a backend rewrites the ``?`` placeholders
and the ``{lock}`` marker, which PostgreSQL turns into ``FOR UPDATE`` so that concurrent
transactions serialize on the rows they check (SQLite serializes whole write transactions).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import datetime
from typing import Any

from flowli.domain import (
    TERMINAL,
    Entry,
    ExecutionStateError,
    LeaseLost,
    OperationRefused,
    StaleAnswer,
    StaleItem,
    Status,
    Task,
    TaskKind,
    UnknownExecutionError,
    task_id,
)

from . import _codec as c
from . import _states_sql as states
from ._items_sql import body_text
from ._protocol import Acquired, Acquisition, NewExecution, NewItem, Plan, Write, WriteResult


def insert_task(task: Task) -> Plan:
    n = yield ("exec", f"INSERT INTO tasks ({c.TASK_COLUMNS}) VALUES ({','.join('?' * c.TASK_WIDTH)})"
                       " ON CONFLICT (id) DO NOTHING",
               c.task_row(task))
    return n > 0


def put_item(item: NewItem, now: float) -> Plan:
    """Insert an item of a write (see NewItem), or, with ``replace``, replace the body of the one
    that has its key (with ``expect``, only while its body is that one: else StaleItem)."""
    if item.expect is not None:
        n = yield ("exec", "UPDATE items SET body = ?, at = ? WHERE kind = ? AND application = ? AND key = ?"
                           " AND body = ?", (body_text(item.body), now, item.kind, item.application, item.key,
                                             body_text(item.expect)))
        if n != 1:
            raise StaleItem(item.kind, item.key)
        return
    cols, params = "kind, application, key, body, at", [item.kind, item.application, item.key, body_text(item.body), now]
    if item.id is not None:
        cols, params = "id, " + cols, [int(item.id), *params]
    conflict = "DO UPDATE SET body = excluded.body, at = excluded.at" if item.replace else "DO NOTHING"
    yield ("exec", f"INSERT INTO items ({cols}) VALUES ({', '.join('?' for _ in params)})"
                   f" ON CONFLICT (kind, application, key) {conflict}", tuple(params))


def append(entry: Entry, now: float, logged: list[tuple[Entry, int]] | None = None) -> Plan:
    # updated_at moves with the status and the lease, not with every entry: an append changes no
    # indexed column, so PostgreSQL updates the row in place (a HOT update, no index entry)
    row = yield ("one", "UPDATE executions SET next_seq = next_seq + 1 WHERE eid = ? RETURNING next_seq - 1",
                 (entry.eid,))
    if row is None:
        raise UnknownExecutionError(entry.eid)
    return (yield from insert_entry(entry, int(row[0]), now, logged))


def insert_entry(entry: Entry, seq: int, now: float, logged: list[tuple[Entry, int]] | None = None) -> Plan:
    """Insert an entry at a seq reserved for it. A lifecycle entry is marked for the second
    append (``unannounced``), or, given ``logged``, kept there for the control-log append of the
    same write (see ``apply_write``)."""
    yield ("exec", f"INSERT INTO journal ({c.ENTRY_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)", c.entry_row(entry, seq))
    if entry.kind.lifecycle:
        if logged is None:
            yield ("exec", "INSERT INTO unannounced (eid, seq, at) VALUES (?,?,?)", (entry.eid, seq, now))
        else:
            logged.append((entry, seq))
    return seq


def log_now(logged: list[tuple[Entry, int]]) -> Plan:
    """The control-log append of the lifecycle entries of this write, in it (a store whose one
    writer commits one write after another: its counter gives seqs in commit order); one move of
    the counter for all of them. An entry on the control log already is left as it is."""
    (last,) = yield ("one", "UPDATE counters SET n = n + ? WHERE name = 'control_log' RETURNING n", (len(logged),))
    first = int(last) - len(logged) + 1
    for k, (entry, seq) in enumerate(logged):
        yield ("one", LOG_ROW, log_row(first + k, entry, seq))


LOG_ROW = ("INSERT INTO control_log (seq, eid, kind, fid, attempt, digest, value, error, provenance, journal_seq)"
           " VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT DO NOTHING RETURNING seq")
"""A control-log row (see ``log_row``); its seq back, or nothing when the entry is there already."""


def log_row(seq: int, entry: Entry, journal_seq: int | None) -> tuple[Any, ...]:
    """The parameters of ``LOG_ROW``: ``entry`` at control-log ``seq``, from journal seq
    ``journal_seq`` (None: an announcement of no journal entry)."""
    return (seq, entry.eid, entry.kind.value, entry.fid, entry.attempt, entry.digest, c.js(entry.value),
            c.js(entry.error), c.prov(entry.provenance), journal_seq)


def announce(entry: Entry) -> Plan:
    if entry.journal_seq is not None:
        gone = yield ("one", "DELETE FROM unannounced WHERE eid = ? AND seq = ? RETURNING seq", (entry.eid, entry.journal_seq))
        if gone is None:
            return None  # announced already
    (seq,) = yield ("one", "UPDATE counters SET n = n + 1 WHERE name = 'control_log' RETURNING n", ())
    row = yield ("one", LOG_ROW, log_row(seq, entry, entry.journal_seq))
    return None if row is None else int(row[0])


def announce_all(entries: list[Entry]) -> Plan:
    """``announce`` of each entry, in order, with one move of the control log's counter for all
    of them (the seqs each gets are those one ``announce`` after the other would give)."""
    if len(entries) == 1:
        return [(yield from announce(entries[0]))]
    todo: list[int] = []
    for i, entry in enumerate(entries):
        if entry.journal_seq is not None:
            gone = yield ("one", "DELETE FROM unannounced WHERE eid = ? AND seq = ? RETURNING seq",
                          (entry.eid, entry.journal_seq))
            if gone is None:
                continue  # announced already
        todo.append(i)
    out: list[int | None] = [None] * len(entries)
    if not todo:
        return out
    (last,) = yield ("one", "UPDATE counters SET n = n + ? WHERE name = 'control_log' RETURNING n", (len(todo),))
    for k, i in enumerate(todo):
        entry = entries[i]
        row = yield ("one", LOG_ROW, log_row(int(last) - len(todo) + 1 + k, entry, entry.journal_seq))
        out[i] = None if row is None else int(row[0])
    return out


def next_message_seq(channel: str) -> Plan:
    """The next sequence number of a channel; in PostgreSQL the upsert also locks the channel's
    row, which serializes a send with a suspension that checks the channel."""
    row = yield ("one", "INSERT INTO channels (name, next_seq) VALUES (?, 2) ON CONFLICT (name)"
                        " DO UPDATE SET next_seq = channels.next_seq + 1 RETURNING next_seq - 1", (channel,))
    return int(row[0])


def lock_channel(channel: str) -> Plan:
    yield ("one", "INSERT INTO channels (name, next_seq) VALUES (?, 1) ON CONFLICT (name)"
                  " DO UPDATE SET next_seq = channels.next_seq RETURNING next_seq", (channel,))


def apply_write(w: Write, now_dt: datetime, in_write: bool = False) -> Plan:
    """Apply one Write; the caller gives it a transaction (or a savepoint) of its own.
    ``in_write``: the lifecycle entries it appends go to the control log in it (``log_now``),
    not to the second append (a store with ``Store.announces_in_write``)."""
    logged: list[tuple[Entry, int]] | None = [] if in_write else None
    result = yield from _apply_write(w, now_dt, logged)
    if logged:
        yield from log_now(logged)
    return result


def _apply_write(w: Write, now_dt: datetime, logged: list[tuple[Entry, int]] | None) -> Plan:
    now = now_dt.timestamp()
    fenced_seq = 0
    status_done = False
    created: list[bool] = []
    if w.creates:  # the execution first: nothing else applies when it exists already
        if not (yield from create_execution(w.executions[0], now, logged)):
            return WriteResult(entry_seqs=[], entry_values=[], message_seqs=[], created=[False])
        created.append(True)
    if w.fence is not None:
        # the fence check and the reservation of the journal seqs of the fenced execution, in one
        # statement; in PostgreSQL the UPDATE also locks the row until commit
        f = w.fence
        n = sum(1 for e in w.entries if e.eid == f.eid)
        sets, params = "next_seq = next_seq + ?", [n]
        if (w.status is not None and w.status.eid == f.eid) or w.release:
            sets += ", updated_at = ?"
            params.append(now)
        # the status change and the release of the fenced execution ride on the same statement
        # (unless the write also checks that execution's status, which must see the old one)
        if w.status is not None and w.status.eid == f.eid and (w.expect is None or w.expect[0] != f.eid):
            s = w.status
            sets += ", status = ?, result = ?, error = ?, blocked = ?, version = COALESCE(?, version)"
            params += [s.status.value, c.js(s.result), c.js(s.error), c.js(s.blocked), s.version]
            status_done = True
        if w.release:
            sets += ", lease_owner = NULL, lease_expires_at = NULL"
        row = yield ("one", f"UPDATE executions SET {sets}"
                            " WHERE eid = ? AND lease_owner = ? AND lease_epoch = ? RETURNING next_seq - ?",
                     (*params, f.eid, f.owner, f.epoch, n))
        if row is None:
            raise LeaseLost(f.eid, f.epoch)
        fenced_seq = int(row[0])
    if w.hold is not None:
        yield from hold_task(w, now)
    if w.advance is not None:
        yield from states.advance_state(w.advance)
    if w.guard is not None:
        g = w.guard
        row = yield ("one", "SELECT next_seq, lease_owner, lease_expires_at FROM executions WHERE eid = ?{lock}", (g.eid,))
        if row is None:
            raise UnknownExecutionError(g.eid)
        if int(row[0]) - 1 != g.last_seq:
            raise OperationRefused(g.eid, g.action, f"its journal moved on to seq {int(row[0]) - 1}"
                                                    f" past the seq {g.last_seq} seen")
        if row[1] is not None and row[2] is not None and row[2] > now:
            raise OperationRefused(g.eid, g.action, f"a live worker holds its lease ({row[1]})")
        # the lease ends and its epoch moves on: a holder that was only paused writes nothing more
        yield ("exec", "UPDATE executions SET lease_owner = NULL, lease_expires_at = NULL, lease_epoch = lease_epoch + 1"
                       " WHERE eid = ?", (g.eid,))
    if w.expect is not None:
        eid, statuses = w.expect
        row = yield ("one", "SELECT status, application FROM executions WHERE eid = ?{lock}", (eid,))
        if row is None or (w.application is not None and row[1] != w.application):
            raise UnknownExecutionError(eid)  # another application's execution is unknown here
        if Status(row[0]) not in statuses:
            need = " or ".join(sorted(s.value for s in statuses))
            raise ExecutionStateError(eid, row[0], "change", need)
    entries = list(w.entries)
    for new in w.executions[len(created):]:
        created.append((yield from create_execution(new, now, logged)))
    for item in w.items:
        yield from put_item(item, now)
    message_seqs: list[int] = []
    for m in w.messages:
        seq = yield from next_message_seq(m.channel)
        yield ("exec", "INSERT INTO messages (channel, seq, payload, provenance, application) VALUES (?,?,?,?,?)",
               (m.channel, seq, c.js(m.payload), c.prov(m.provenance), m.application))
        message_seqs.append(seq)
        if m.memo is not None:
            entries[m.memo] = replace(entries[m.memo], value=seq)
    for wd in w.withdrawals:
        n = yield ("exec", "UPDATE tasks SET state = 'withdrawn', lease_owner = NULL WHERE id = ? AND state = 'ready'",
                   (wd.task_id,))
        if wd.memo is not None:
            entries[wd.memo] = replace(entries[wd.memo], value=n > 0)
    for eid in w.withdraw_delegates:
        yield ("exec", "UPDATE tasks SET state = 'withdrawn', lease_owner = NULL WHERE eid = ? AND kind = 'DELEGATE'"
                       " AND state = 'ready'", (eid,))
    for cl in w.claims:
        n = yield ("exec", "INSERT INTO claims (key, owner, at) VALUES (?,?,?) ON CONFLICT (key) DO NOTHING",
                   (cl.key, cl.owner, now))
        if cl.memo is not None:
            entries[cl.memo] = replace(entries[cl.memo], value=n > 0)
    if w.announcements:
        seqs = yield from announce_all([a.entry for a in w.announcements])
        for a, seq in zip(w.announcements, seqs):
            if a.memo is not None:
                entries[a.memo] = replace(entries[a.memo], value=seq)
    # the seqs of the other executions' entries: reserved with one statement per execution (a
    # decider's command appends several events to one journal), in the order of the entries
    counts: dict[str, int] = {}
    for e in entries:
        if w.fence is None or e.eid != w.fence.eid:
            counts[e.eid] = counts.get(e.eid, 0) + 1
    next_seqs: dict[str, int] = {}
    for eid, n in counts.items():
        if n > 1:
            row = yield ("one", "UPDATE executions SET next_seq = next_seq + ? WHERE eid = ? RETURNING next_seq - ?",
                         (n, eid, n))
            if row is None:
                raise UnknownExecutionError(eid)
            next_seqs[eid] = int(row[0])
    entry_seqs = []
    for e in entries:
        if w.fence is not None and e.eid == w.fence.eid:
            entry_seqs.append((yield from insert_entry(e, fenced_seq, now, logged)))
            fenced_seq += 1
        elif e.eid in next_seqs:
            entry_seqs.append((yield from insert_entry(e, next_seqs[e.eid], now, logged)))
            next_seqs[e.eid] += 1
        else:
            entry_seqs.append((yield from append(e, now, logged)))
    if w.status is not None and not status_done:
        s = w.status
        yield ("exec",
               "UPDATE executions SET status = ?, result = ?, error = ?, blocked = ?, version = COALESCE(?, version),"
               " updated_at = CASE WHEN ? THEN ? ELSE updated_at END WHERE eid = ?",
               (s.status.value, c.js(s.result), c.js(s.error), c.js(s.blocked), s.version, s.touch, now, s.eid))
    if w.cancel_request is not None:
        yield ("exec", "UPDATE executions SET cancel_requested = ? WHERE eid = ? AND cancel_requested IS NULL",
               (c.js(w.cancel_request[1]), w.cancel_request[0]))
    for task in w.tasks:
        yield from insert_task(task)
    for r in w.resumes:
        yield ("exec", f"INSERT INTO tasks ({c.TASK_COLUMNS}) SELECT CAST(? AS TEXT), 'RESUME', queue, eid,"
                       " CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS DOUBLE PRECISION), 0, NULL, application, NULL, NULL"
                       " FROM executions WHERE eid = ? ON CONFLICT (id) DO NOTHING",
               (r.id, c.js(r.payload), c.prov(r.provenance), r.visible_at.timestamp(), r.eid))
    for acked, owner in w.acks:
        if owner is None:
            yield ("exec", "UPDATE tasks SET state = 'acked', lease_owner = NULL WHERE id = ?", (acked,))
        else:
            yield ("exec", "UPDATE tasks SET state = 'acked', lease_owner = NULL WHERE id = ? AND lease_owner = ?",
                   (acked, owner))
    for eid in w.clear_timers:
        yield ("exec", "DELETE FROM timers WHERE eid = ?", (eid,))
    for t in w.fired:
        yield ("exec", "DELETE FROM timers WHERE eid = ? AND fid = ? AND at = ?", (t.eid, t.fid, t.at.timestamp()))
    for t in w.timers:
        yield ("exec", "INSERT INTO timers (eid, fid, at) VALUES (?,?,?) ON CONFLICT (eid, fid) DO UPDATE SET at = excluded.at",
               (t.eid, t.fid, t.at.timestamp()))
    for eid in w.clear_waiters:
        yield ("exec", "DELETE FROM waiters WHERE eid = ?", (eid,))
    for channel, eid in w.waiters:
        yield ("exec", "INSERT INTO waiters (channel, eid) VALUES (?,?) ON CONFLICT DO NOTHING", (channel, eid))
    for ww in w.wake_waiters:
        yield from lock_channel(ww.channel)
        rows = yield ("all", "SELECT w.eid, e.queue, e.application FROM waiters w JOIN executions e ON e.eid = w.eid"
                             " WHERE w.channel = ?", (ww.channel,))
        for eid, queue_name, application in rows:
            yield from insert_task(Task(
                id=task_id(TaskKind.RESUME, eid, ww.key), kind=TaskKind.RESUME, queue=queue_name, eid=eid,
                payload=None, provenance=ww.provenance, visible_at=now_dt, application=application,
            ))
    for eid in w.delete_executions:
        # scoped channels are "{eid}.{name}": the range [eid + ".", eid + "/") holds exactly them
        lo, hi = f"{eid}.", f"{eid}/"
        yield ("exec", "DELETE FROM messages WHERE channel >= ? AND channel < ?", (lo, hi))
        yield ("exec", "DELETE FROM channels WHERE name >= ? AND name < ?", (lo, hi))
        for table in ("journal", "tasks", "timers", "waiters", "unannounced", "decider_states"):
            yield ("exec", f"DELETE FROM {table} WHERE eid = ?", (eid,))
        yield ("exec", "DELETE FROM executions WHERE eid = ?", (eid,))
    woke = False
    if w.wake is not None:
        woke = yield from wake_holds(w, now)
        if woke:
            yield from insert_task(w.wake.task)
    acquired = (yield from acquire_lease(w.acquire, now)) if w.acquire is not None else None
    then = (yield from _apply_write(w.then, now_dt, logged)) if w.then is not None else None
    return WriteResult(entry_seqs=entry_seqs, entry_values=[e.value for e in entries], message_seqs=message_seqs,
                       created=created, woke=woke, acquired=acquired, then=then)


def create_execution(new: NewExecution, now: float, logged: list[tuple[Entry, int]] | None = None) -> Plan:
    """Create an execution unless its eid exists, with its first entry, START task and items;
    whether it was created."""
    n = yield ("exec", f"INSERT INTO executions ({c.EXECUTION_COLUMNS}) VALUES ({','.join('?' * c.EXECUTION_WIDTH)})"
                       " ON CONFLICT (eid) DO NOTHING", c.execution_row(new.record))
    if n > 0:
        yield from append(new.entry, now, logged)
        if new.task is not None:
            yield from insert_task(new.task)
        for item in new.items:
            yield from put_item(item, now)
    return n > 0


def acquire_lease(t: Acquisition, now: float) -> Plan:
    """Lease a suspended execution whose lease is free to ``t.owner`` and ack its RESUME (see
    Acquisition): the record at its new epoch and the journal, or None."""
    queues = ", ".join("?" for _ in t.queues)
    row = yield ("one", "UPDATE executions SET lease_owner = ?, lease_epoch = lease_epoch + 1, lease_expires_at = ?,"
                        " status = 'running', updated_at = ? WHERE eid = ? AND status = 'suspended'"
                        f" AND queue IN ({queues}) AND (lease_owner IS NULL OR lease_expires_at IS NULL"
                        f" OR lease_expires_at <= ?) RETURNING {c.EXECUTION_COLUMNS}",
                 (t.owner, t.until.timestamp(), now, t.eid, *t.queues, now))
    if row is None:
        return None
    yield ("exec", "UPDATE tasks SET state = 'acked', lease_owner = NULL WHERE id = ? AND state = 'ready'", (t.resume,))
    rows = yield ("all", f"SELECT {c.ENTRY_COLUMNS} FROM journal WHERE eid = ? AND seq > ? ORDER BY seq", (t.eid, t.after))
    record = c.execution_record(row)
    return Acquired(record, record.lease_epoch, [c.entry_record(r) for r in rows], t.after)


def hold_task(w: Write, now: float) -> Plan:
    """Check the hold of a write on a task (see TaskHold) and end the task; refuse otherwise."""
    hold = w.hold
    assert hold is not None
    if hold.owner is not None:
        # the common case in one statement: a held lease, still running; else the reason is read
        n = yield ("exec", "UPDATE tasks SET state = ?, lease_owner = NULL WHERE id = ? AND state = 'ready'"
                           " AND lease_owner = ? AND visible_at > ?", (hold.end, hold.task_id, hold.owner, now))
        if n:
            return
    row = yield ("one", "SELECT state, lease_owner, visible_at FROM tasks WHERE id = ?{lock}", (hold.task_id,))
    if row is None:
        raise StaleAnswer(hold.task_id, "there is no such task")
    state, owner, visible_at = row
    if state != "ready":
        raise StaleAnswer(hold.task_id, f"it was {'answered' if state == 'acked' else state} already")
    if hold.owner is not None:
        if owner != hold.owner:
            raise StaleAnswer(hold.task_id, f"its lease is not held by {hold.owner}"
                                            + (f" but by {owner}" if owner else " (it was given back)"))
        if visible_at <= now:
            raise StaleAnswer(hold.task_id, f"the lease of {hold.owner} expired")
        raise StaleAnswer(hold.task_id, f"its lease is not held by {hold.owner}")  # not reached: the update took it
    elif hold.expired and (owner is None or visible_at > now):
        raise StaleAnswer(hold.task_id, "its lease has not expired")
    yield ("exec", "UPDATE tasks SET state = ?, lease_owner = NULL WHERE id = ?", (hold.end, hold.task_id))


def stale_hold(task_id: str, owner: str, task: Task | None, now: datetime) -> StaleAnswer:
    """Why ``owner`` no longer holds ``task_id`` (a renewal found the hold gone)."""
    if task is None:
        return StaleAnswer(task_id, "there is no such task")
    if task.state != "ready":
        return StaleAnswer(task_id, f"it was {'answered' if task.state == 'acked' else task.state} already")
    if task.lease_owner != owner:
        return StaleAnswer(task_id, f"its lease is not held by {owner}"
                                    + (f" but by {task.lease_owner}" if task.lease_owner else " (it was given back)"))
    return StaleAnswer(task_id, f"the lease of {owner} expired")


def wake_holds(w: Write, now: float) -> Plan:
    """Whether a condition of a suspending execution holds already (see WakeCheck)."""
    assert w.wake is not None
    wake = w.wake
    if wake.due_by is not None and wake.due_by.timestamp() <= now:
        return True
    for channel, after in sorted(wake.channels.items()):
        yield from lock_channel(channel)
        if (yield ("one", "SELECT 1 FROM messages WHERE channel = ? AND seq > ? LIMIT 1", (channel, after))):
            return True
    if wake.journal_after is not None and w.fence is not None:
        frames = sorted(wake.frames)
        only = f" AND fid IN ({', '.join('?' for _ in frames)})" if frames else ""
        if (yield ("one", "SELECT 1 FROM journal WHERE eid = ? AND seq > ? AND kind IN ('frame.completed', 'frame.failed')"
                          + only + " LIMIT 1", (w.fence.eid, wake.journal_after, *frames))):
            return True
    if wake.cancel and w.fence is not None:
        if (yield ("one", "SELECT 1 FROM executions WHERE eid = ? AND cancel_requested IS NOT NULL", (w.fence.eid,))):
            return True
    for eid in sorted(wake.children):
        row = yield ("one", "SELECT status FROM executions WHERE eid = ?{lock}", (eid,))
        if row is not None and Status(row[0]) in TERMINAL:
            return True
    return False


def settle(fut: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    """Hand a write's answer (its result, or the exception it raised) to its caller, unless the
    caller stopped waiting."""
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)
