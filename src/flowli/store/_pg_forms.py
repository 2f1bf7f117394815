"""The one-statement forms of PostgreSQL writes, chosen by a write's intent (see ``Intent``):
a run of plain appends of many executions, a run of control-log appends, a start, a signal,
fired timers, a fenced write. Each is one round trip, atomic on its own, with no BEGIN and COMMIT
of its own when alone; each leaves the rows the generic path of ``_apply`` would (the differential
test of the conformance suite compares them)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import asyncpg

from flowli.domain import EntryKind, ExecutionStateError, LeaseLost, UnknownExecutionError

from . import _codec as c
from ._pg_sql import CHANNEL_SQL, journal_notes, log_notes, notify, payload
from ._protocol import Intent, Write, WriteResult

_payload = payload


def _is(intent: Intent) -> Callable[[Write], bool]:
    def check(w: Write) -> bool:
        return w.intent is intent

    return check


_plain_append = _is(Intent.APPEND)
"""A write of entries under its fence (with at most a status change of the fenced execution, its
release and its timers and waiters cleared): a frame.started and its outcome, most writes of a
running execution, and its end."""
_announce_only = _is(Intent.ANNOUNCE)
"""A write of the second append: control-log appends of journal entries, nothing else."""


def _changes_record(w: Write) -> bool:
    return w.status is not None or w.release


_LIFECYCLE = [k.value for k in EntryKind if k.lifecycle]

_MANY_APPENDS = (
    "WITH v AS (SELECT * FROM unnest($1::int[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[],"
    " $7::bigint[], $8::text[], $9::text[], $10::text[], $11::text[])"
    " AS v(ord, eid, owner, epoch, kind, fid, attempt, digest, value, error, provenance)),"
    " s AS (SELECT * FROM unnest($12::text[], $13::text[], $14::bigint[], $15::text[], $16::text[], $17::text[],"
    " $18::text[], $19::text[], $20::bool[]) AS s(eid, owner, epoch, status, result, error, blocked, version,"
    " release)),"
    " c AS (SELECT eid, owner, epoch, count(*) AS n FROM v GROUP BY eid, owner, epoch),"
    # updated_at moves with the status and the lease only: a plain append changes no indexed
    # column, so the row is updated in place (HOT), without new index entries
    " f AS (UPDATE executions e SET next_seq = e.next_seq + c.n,"
    " updated_at = CASE WHEN s.status IS NULL AND s.release IS NOT TRUE THEN e.updated_at ELSE $21 END,"
    " status = COALESCE(s.status, e.status),"
    " result = CASE WHEN s.status IS NULL THEN e.result ELSE s.result END,"
    " error = CASE WHEN s.status IS NULL THEN e.error ELSE s.error END,"
    " blocked = CASE WHEN s.status IS NULL THEN e.blocked ELSE s.blocked END,"
    " version = COALESCE(s.version, e.version),"
    " lease_owner = CASE WHEN s.release THEN NULL ELSE e.lease_owner END,"
    " lease_expires_at = CASE WHEN s.release THEN NULL ELSE e.lease_expires_at END"
    " FROM c LEFT JOIN s ON s.eid = c.eid AND s.owner = c.owner AND s.epoch = c.epoch"
    " WHERE e.eid = c.eid AND e.lease_owner = c.owner AND e.lease_epoch = c.epoch"
    " RETURNING e.eid, c.owner, c.epoch, e.next_seq - c.n AS base, e.watched_until AS watched),"
    # a stale fence's rows join no f row: they append nothing
    f" j AS (INSERT INTO journal ({c.ENTRY_COLUMNS})"
    " SELECT v.eid, f.base + row_number() OVER (PARTITION BY v.eid ORDER BY v.ord) - 1, v.kind, v.fid, v.attempt,"
    " v.digest, v.value, v.error, v.provenance FROM v JOIN f ON f.eid = v.eid AND f.owner = v.owner"
    " AND f.epoch = v.epoch RETURNING eid, seq, kind),"
    " u AS (INSERT INTO unannounced (eid, seq, at) SELECT eid, seq, $21 FROM j WHERE kind = ANY($22::text[])),"
    # the timers and waiters of an execution whose fence held, cleared (an end after a wait)
    " ct AS (DELETE FROM timers t USING f, unnest($23::text[], $24::text[], $25::bigint[]) AS x(eid, owner, epoch)"
    " WHERE t.eid = x.eid AND f.eid = x.eid AND f.owner = x.owner AND f.epoch = x.epoch),"
    " cw AS (DELETE FROM waiters w USING f, unnest($26::text[], $27::text[], $28::bigint[]) AS x(eid, owner, epoch)"
    " WHERE w.eid = x.eid AND f.eid = x.eid AND f.owner = x.owner AND f.epoch = x.epoch)"
    " SELECT j.eid, j.seq, f.owner, f.epoch, f.watched FROM j JOIN f ON f.eid = j.eid"
)


async def _many_appends(
    conn: asyncpg.Connection, writes: list[Write], now: datetime, origin: str
) -> list[tuple[WriteResult | None, BaseException | None]]:
    """A run of plain appends of many executions in one statement. A write whose fence does
    not hold appends nothing (the join drops its row) and gets LeaseLost; the others stand.
    At most one write of the run changes the record of an execution (see ``_append_runs``).
    The appends to a watched execution's journal notify the other processes."""
    cols: list[list[Any]] = [[] for _ in range(11)]
    status: list[list[Any]] = [[] for _ in range(9)]
    i = 0
    for w in writes:
        assert w.fence is not None
        for entry in w.entries:
            row = c.entry_row(entry, 0)
            for col, v in zip(cols, (i, w.fence.eid, w.fence.owner, w.fence.epoch, *row[2:])):
                col.append(v)
            i += 1
        if _changes_record(w):
            st, f = w.status, w.fence
            values = (f.eid, f.owner, f.epoch, None, None, None, None, None, w.release) if st is None else (
                f.eid, f.owner, f.epoch, st.status.value, c.js(st.result), c.js(st.error), c.js(st.blocked),
                st.version, w.release)
            for col, v in zip(status, values):
                col.append(v)
    # the clears of a write apply only if its own fence held (owner and epoch, not the eid alone)
    clears: list[list[Any]] = [[] for _ in range(6)]
    for w in writes:
        assert w.fence is not None
        for at, eids in ((0, w.clear_timers), (3, w.clear_waiters)):
            for eid in eids:
                clears[at].append(eid)
                clears[at + 1].append(w.fence.owner)
                clears[at + 2].append(w.fence.epoch)
    rows = await conn.fetch(_MANY_APPENDS, *cols, *status, now.timestamp(), _LIFECYCLE, *clears)
    # the seqs appended under each fence that held (one per execution at most), in order
    seqs: dict[tuple[str, str, int], list[int]] = {}
    for eid, seq, owner, epoch, _ in rows:
        seqs.setdefault((eid, owner, int(epoch)), []).append(int(seq))
    await notify(conn, origin, journal_notes(((r[0], r[4]) for r in rows), now.timestamp()))
    for found in seqs.values():
        found.sort()
    out: list[tuple[WriteResult | None, BaseException | None]] = []
    for w in writes:
        f = w.fence
        assert f is not None
        mine = seqs.get((f.eid, f.owner, f.epoch))
        if not mine:
            out.append((None, LeaseLost(f.eid, f.epoch)))
        else:
            n = len(w.entries)
            taken, seqs[(f.eid, f.owner, f.epoch)] = mine[:n], mine[n:]
            result = WriteResult(entry_seqs=taken, entry_values=[e.value for e in w.entries], message_seqs=[], created=[])
            out.append((result, None))
    return out


def _append_runs(writes: list[Write]) -> list[list[Write]]:
    """Split a run of plain appends where a second write would change the record of one execution
    (one statement sets each record once), or follows the release of its lease."""
    runs: list[list[Write]] = [[]]
    changing: set[str] = set()
    released: set[str] = set()
    for w in writes:
        assert w.fence is not None
        eid = w.fence.eid
        # after a release, the next write of that execution must see the lease gone
        if eid in released or (_changes_record(w) and eid in changing):
            runs.append([])
            changing, released = set(), set()
        if _changes_record(w):
            changing.add(eid)
        if w.release:
            released.add(eid)
        runs[-1].append(w)
    return runs


_ANNOUNCEMENTS = (
    "WITH x AS (SELECT * FROM unnest($1::int[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::bigint[],"
    " $7::text[], $8::text[], $9::text[], $10::text[]) AS x(ord, eid, journal_seq, kind, fid, attempt, digest, value,"
    " error, provenance)),"
    " d AS (DELETE FROM unannounced u USING x WHERE u.eid = x.eid AND u.seq = x.journal_seq RETURNING x.ord),"
    " k AS (UPDATE counters SET n = n + (SELECT count(*) FROM d) WHERE name = 'control_log'"
    " RETURNING n - (SELECT count(*) FROM d) AS base)"
    " INSERT INTO control_log (seq, eid, kind, fid, attempt, digest, value, error, provenance, journal_seq)"
    " SELECT k.base + row_number() OVER (ORDER BY x.ord), x.eid, x.kind, x.fid, x.attempt, x.digest, x.value,"
    " x.error, x.provenance, x.journal_seq FROM x JOIN d ON d.ord = x.ord CROSS JOIN k ON CONFLICT DO NOTHING"
)


async def _many_announcements(conn: asyncpg.Connection, writes: list[Write], origin: str) -> list[tuple[WriteResult, None]]:
    """A run of control-log appends of journal entries in one statement: the entries still
    unannounced take the next control-log seqs in order; the others were announced already."""
    cols: list[list[Any]] = [[] for _ in range(10)]
    i = 0
    seen: set[tuple[str, int | None]] = set()
    for w in writes:
        for a in w.announcements:
            e = a.entry
            if (e.eid, e.journal_seq) in seen:
                continue  # a repeat (a repair beside the worker's own announcement) takes no place of its own
            seen.add((e.eid, e.journal_seq))
            for col, v in zip(cols, (i, e.eid, e.journal_seq, e.kind.value, e.fid, e.attempt, e.digest, c.js(e.value),
                                     c.js(e.error), c.prov(e.provenance))):
                col.append(v)
            i += 1
    await conn.execute(_ANNOUNCEMENTS, *cols)
    await notify(conn, origin, log_notes([a for w in writes for a in w.announcements]))
    return [(WriteResult(entry_seqs=[], entry_values=[], message_seqs=[], created=[]), None) for _ in writes]


_E = c.EXECUTION_WIDTH  # the record's parameters come first: $1 .. $_E
_START_HEAD = (
    f"WITH e AS (INSERT INTO executions ({c.EXECUTION_COLUMNS}, next_seq)"
    f" VALUES ({', '.join(f'${i}' for i in range(1, _E + 1))}, 2) ON CONFLICT (eid) DO NOTHING RETURNING eid),"
    f" j AS (INSERT INTO journal ({c.ENTRY_COLUMNS}) SELECT eid, 1, ${_E + 1}::text, ${_E + 2}::text,"
    f" ${_E + 3}::bigint, ${_E + 4}::text, ${_E + 5}::text, ${_E + 6}::text, ${_E + 7}::text FROM e),"
    f" u AS (INSERT INTO unannounced (eid, seq, at) SELECT eid, 1, ${_E + 8}::double precision FROM e)"
)
_START_LEASED = _START_HEAD + " SELECT count(*) FROM e"
_TASK_TYPES = ("text", "text", "text", "text", "text", "text", "double precision", "bigint", "text", "text", "bigint",
               "text")
"""The types of a task row's columns (``_codec.TASK_COLUMNS``)."""
_START_QUEUED = (
    _START_HEAD[:-1] + "),"
    f" t AS (INSERT INTO tasks ({c.TASK_COLUMNS}) SELECT"
    f" {', '.join(f'${_E + 9 + i}::{ty}' for i, ty in enumerate(_TASK_TYPES))} FROM e ON CONFLICT (id) DO NOTHING)"
    f" SELECT count(*) FROM (SELECT pg_notify({CHANNEL_SQL}, ${_E + 9 + len(_TASK_TYPES)}) FROM e) n"
)


async def _start(conn: asyncpg.Connection, w: Write, now: datetime, origin: str) -> WriteResult:
    """A plain start in one statement (one round trip; no BEGIN and COMMIT of its own): the
    record, the execution.started entry at seq 1, its unannounced mark, and the START task (which
    notifies the workers of other processes) unless the record is created leased."""
    new = w.executions[0]
    record = c.execution_row(new.record)
    params = [*record[:7], now.timestamp(), *record[8:], *c.entry_row(new.entry, 1)[2:], now.timestamp()]
    if new.task is None:
        created = await conn.fetchval(_START_LEASED, *params)
    else:
        created = await conn.fetchval(_START_QUEUED, *params, *c.task_row(new.task), origin)
    return WriteResult(entry_seqs=[], entry_values=[], message_seqs=[], created=[bool(created)])


# the execution's row first (FOR UPDATE), then the channel's: the order a suspension locks them in.
# An execution of another application than $11 (when given) is unknown, as a missing one.
_SIGNAL = (
    "WITH s AS (SELECT eid, queue, application FROM executions WHERE eid = $1 AND status = ANY($2::text[])"
    " AND ($11::text IS NULL OR application = $11::text) FOR UPDATE),"
    " ch AS (INSERT INTO channels (name, next_seq) SELECT $3, 2 FROM s ON CONFLICT (name)"
    " DO UPDATE SET next_seq = channels.next_seq + 1 RETURNING next_seq - 1 AS seq),"
    " m AS (INSERT INTO messages (channel, seq, payload, provenance, application)"
    " SELECT $3, seq, $4, $5, (SELECT application FROM s) FROM ch),"
    f" t AS (INSERT INTO tasks ({c.TASK_COLUMNS}) SELECT $6, 'RESUME', s.queue, s.eid, $7, $8, $9, 0, NULL,"
    " s.application, NULL, NULL FROM s ON CONFLICT (id) DO NOTHING)"
    " SELECT (SELECT seq FROM ch), (SELECT status FROM executions WHERE eid = $1"
    " AND ($11::text IS NULL OR application = $11::text)),"
    f" (SELECT count(pg_notify({CHANNEL_SQL}, $10)) FROM ch)"
)


async def _signal(conn: asyncpg.Connection, w: Write, origin: str) -> WriteResult:
    """A plain signal in one statement: the status check, the message, the RESUME."""
    assert w.expect is not None
    eid, statuses = w.expect
    m, r = w.messages[0], w.resumes[0]
    row = await conn.fetchrow(
        _SIGNAL, eid, [s.value for s in statuses], m.channel, c.js(m.payload), c.prov(m.provenance),
        r.id, c.js(r.payload), c.prov(r.provenance), r.visible_at.timestamp(), origin, w.application,
    )
    seq, status = row[0], row[1]
    if seq is None:
        if status is None:
            raise UnknownExecutionError(eid)
        need = " or ".join(sorted(s.value for s in statuses))
        raise ExecutionStateError(eid, status, "change", need)
    return WriteResult(entry_seqs=[], entry_values=[], message_seqs=[int(seq)], created=[])


_FIRE = (
    "WITH x AS (SELECT * FROM unnest($1::text[], $2::text[], $3::double precision[], $4::text[], $5::text[],"
    " $6::text[], $7::double precision[]) AS x(eid, fid, at, id, payload, provenance, visible_at)),"
    " d AS (DELETE FROM timers t USING x WHERE t.eid = x.eid AND t.fid = x.fid AND t.at = x.at),"
    f" i AS (INSERT INTO tasks ({c.TASK_COLUMNS}) SELECT x.id, 'RESUME', e.queue, e.eid, x.payload, x.provenance,"
    " x.visible_at, 0, NULL, e.application, NULL, NULL FROM x JOIN executions e ON e.eid = x.eid"
    " ON CONFLICT (id) DO NOTHING)"
    f" SELECT pg_notify({CHANNEL_SQL}, $8)"
)


async def _fire(conn: asyncpg.Connection, w: Write, origin: str) -> WriteResult:
    """Fired timers in one statement."""
    cols: list[list[Any]] = [[] for _ in range(7)]
    for t, r in zip(w.fired, w.resumes):
        for col, v in zip(cols, (t.eid, t.fid, t.at.timestamp(), r.id, c.js(r.payload), c.prov(r.provenance),
                                 r.visible_at.timestamp())):
            col.append(v)
    await conn.execute(_FIRE, *cols, origin)
    return WriteResult(entry_seqs=[], entry_values=[], message_seqs=[], created=[])


async def _fenced(conn: asyncpg.Connection, w: Write, now: datetime, origin: str) -> WriteResult:
    """A plain fenced write in one statement. The fence UPDATE returns the row as it is once
    locked, so its cancel request is seen whatever committed before; a cancel request made later
    waits for the lock and enqueues its own RESUME."""
    f = w.fence
    assert f is not None
    t = now.timestamp()
    params: list[Any] = []

    def p(value: Any) -> str:
        params.append(value)
        return f"${len(params)}"

    n = len(w.entries)
    sets = [f"next_seq = next_seq + {p(n)}::bigint"]
    if w.status is not None or w.release:
        sets.append(f"updated_at = {p(t)}::double precision")
    if w.status is not None:
        st = w.status
        sets += [f"status = {p(st.status.value)}::text", f"result = {p(c.js(st.result))}::text",
                 f"error = {p(c.js(st.error))}::text", f"blocked = {p(c.js(st.blocked))}::text",
                 f"version = COALESCE({p(st.version)}::text, version)"]
    if w.release:
        sets += ["lease_owner = NULL", "lease_expires_at = NULL"]
    ctes = [
        f"f AS (UPDATE executions SET {', '.join(sets)} WHERE eid = {p(f.eid)}::text AND lease_owner = {p(f.owner)}::text"
        f" AND lease_epoch = {p(f.epoch)}::bigint RETURNING next_seq - {p(n)}::bigint AS base,"
        " cancel_requested IS NOT NULL AS cancel, watched_until AS watched)"
    ]
    if w.entries:
        rows = [c.entry_row(e, 0) for e in w.entries]
        cols = [list(col) for col in zip(*(r[2:] for r in rows))]
        ctes.append(
            f"v AS (SELECT * FROM unnest({p(list(range(n)))}::int[], {p(cols[0])}::text[], {p(cols[1])}::text[],"
            f" {p(cols[2])}::bigint[], {p(cols[3])}::text[], {p(cols[4])}::text[], {p(cols[5])}::text[],"
            f" {p(cols[6])}::text[]) AS v(ord, kind, fid, attempt, digest, value, error, provenance))"
        )
        ctes.append(
            f"j AS (INSERT INTO journal ({c.ENTRY_COLUMNS}) SELECT {p(f.eid)}::text, f.base + v.ord, v.kind, v.fid,"
            " v.attempt, v.digest, v.value, v.error, v.provenance FROM f, v RETURNING seq, kind)"
        )
        ctes.append(f"u AS (INSERT INTO unannounced (eid, seq, at) SELECT {p(f.eid)}::text, seq, {p(t)}::double precision"
                     f" FROM j WHERE kind = ANY({p(_LIFECYCLE)}::text[]))")
    if w.clear_timers:
        keep = [tm.fid for tm in w.timers]
        ctes.append(f"ct AS (DELETE FROM timers WHERE eid = {p(f.eid)}::text AND fid <> ALL({p(keep)}::text[])"
                    " AND EXISTS (SELECT 1 FROM f))")
    if w.timers:
        ctes.append(
            f"ti AS (INSERT INTO timers (eid, fid, at) SELECT {p(f.eid)}::text, x.fid, x.at FROM f,"
            f" unnest({p([tm.fid for tm in w.timers])}::text[], {p([tm.at.timestamp() for tm in w.timers])}::double precision[])"
            " AS x(fid, at) ON CONFLICT (eid, fid) DO UPDATE SET at = excluded.at)"
        )
    if w.clear_waiters:
        ctes.append(f"cw AS (DELETE FROM waiters WHERE eid = {p(f.eid)}::text AND EXISTS (SELECT 1 FROM f))")
    woke = "false"
    if w.wake is not None:
        due = w.wake.due_by is not None and w.wake.due_by.timestamp() <= t
        cancel = "f.cancel" if w.wake.cancel else "false"
        task = c.task_row(w.wake.task)
        values = ", ".join(f"{p(v)}::{ty}" for v, ty in zip(task, _TASK_TYPES))
        woke = f"({cancel} OR {p(due)}::bool)"  # the condition held (its task may exist already)
        ctes.append(f"wk AS (INSERT INTO tasks ({c.TASK_COLUMNS}) SELECT {values} FROM f WHERE {woke}"
                    " ON CONFLICT (id) DO NOTHING)")
    wakes = f", pg_notify({CHANNEL_SQL}, {p(_payload(origin, bool(w.timers)))}::text)" if (w.timers or w.wake is not None) else ""
    row = await conn.fetchrow(f"WITH {', '.join(ctes)} SELECT f.base, {woke}, f.watched{wakes} FROM f", *params)
    if row is None:
        raise LeaseLost(f.eid, f.epoch)
    if w.entries:
        await notify(conn, origin, journal_notes([(f.eid, row[2])], t))
    base = int(row[0])
    return WriteResult(entry_seqs=list(range(base, base + n)), entry_values=[e.value for e in w.entries],
                       message_seqs=[], created=[], woke=bool(row[1]))


_SINGLE: dict[Intent, Callable[..., Any]] = {
    Intent.START: _start, Intent.FIRE: _fire, Intent.SIGNAL: _signal, Intent.FENCED: _fenced,
}
"""The one-statement form of each intent that has one."""
