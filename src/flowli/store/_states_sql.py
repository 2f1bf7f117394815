"""The statements of decider states and their index (see StateIndex, StateQuery), in the dialect
both backends accept: ``?`` placeholders (PostgreSQL's store rewrites them), ``ON CONFLICT``.
A substring test is a function of each backend (``instr`` on SQLite, ``strpos`` on PostgreSQL:
the same arguments, both case-sensitive, unlike SQLite's LIKE).

What keeps a filtered page at the cost of its answer: a page reads the index in the order it is
shown and stops at its size; a tag filter reads the rows of ``decider_tags`` that have the tag;
and on SQLite the total of a page filtered by nothing but labels is a sum over
``decider_labels``, the count of each label that triggers keep in the write of each row. A
filter on text is a substring test, and its count reads every row of the application's index."""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

from flowli.domain import StaleState, TaskKind

from . import _codec as c
from ._protocol import HELD, Advance, OpenAttempt, Plan, StateIndex, StateQuery, StoredState

READ = "SELECT version, CASE WHEN version = ? THEN NULL ELSE state END FROM decider_states WHERE eid = ? AND version > 0"
"""A state and its version; not the state itself when its version is the one the caller holds."""
_INDEX = "decider, application, created_at, number, label, name, tags, text, waiting, tag_list"
_ROW = ", ".join(f"e.{col}" for col in c.EXECUTION_COLUMNS.split(", ")) + ", d.version, d.state, d.label"


def read(row: Any, held: int | None) -> tuple[int, Any]:
    version = int(row[0])
    return (version, HELD) if held is not None and version == held else (version, c.unjs(row[1]))


def index_row(index: StateIndex | None) -> tuple[Any, ...]:
    if index is None:
        return (None,) * 8 + (0, None)
    tags = "\n" + "\n".join(index.tags) + "\n" if index.tags else None
    return (index.decider, index.application, index.created_at, index.number, index.label, index.name, tags,
            index.text, index.waiting, c.js(list(index.tags)))


def advance_state(a: Advance) -> Plan:
    """The compare-and-set of a decider's state (see Advance), with its index row."""
    row = index_row(a.index)
    if a.version == 0:  # its start: the index of a state not decided yet, unless a command came first
        yield ("exec", f"INSERT INTO decider_states (eid, version, state, {_INDEX}) VALUES (?, 0, 'null', {_marks(10)})"
                       " ON CONFLICT (eid) DO NOTHING", (a.eid, *row))
        return
    if a.version == 1:  # its first command takes over the row of its start
        n = yield ("exec", f"INSERT INTO decider_states (eid, version, state, {_INDEX}) VALUES (?, 1, ?, {_marks(10)})"
                           " ON CONFLICT (eid) DO UPDATE SET version = 1, state = excluded.state,"
                           + ", ".join(f" {col} = excluded.{col}" for col in _INDEX.split(", "))
                           + " WHERE decider_states.version = 0", (a.eid, _text(a), *row))
    else:
        n = yield ("exec", "UPDATE decider_states SET version = ?, state = ?, "
                           + ", ".join(f"{col} = ?" for col in _INDEX.split(", ")) + " WHERE eid = ? AND version = ?",
                   (a.version, _text(a), *row, a.eid, a.version - 1))
    if n != 1:
        raise StaleState(a.eid, a.version - 1)


def _text(a: Advance) -> str | None:
    return a.encoded if a.encoded is not None else c.js(a.state)


def _marks(n: int) -> str:
    return ", ".join("?" * n)


def _labelled(q: StateQuery, alias: str) -> tuple[list[str], list[Any]]:
    """The conditions of ``q`` on its decider, application and labels, on columns of ``alias``
    (``d.`` of ``decider_states``, or nothing for ``decider_labels``)."""
    sql, params = [f"{alias}decider = ?"], [q.decider]
    if q.application is not None:
        sql.append(f"{alias}application = ?")
        params.append(q.application)
    if q.labels:
        sql.append(f"{alias}label IN ({_marks(len(q.labels))})")
        params += list(q.labels)
    return sql, params


def where(q: StateQuery, contains: str, tags: tuple[str, ...] | None = None) -> tuple[list[str], list[Any]]:
    """The conditions of ``q`` on ``decider_states d`` (``tags``: those of its tags that are not
    read from ``decider_tags`` driving the query), each a clause with its parameters."""
    sql, params = _labelled(q, "d.")
    if q.name is not None:
        sql.append("d.name = ?")
        params.append(q.name)
    for tag in q.tags if tags is None else tags:
        if q.application is not None:
            sql.append("d.eid IN (SELECT t2.eid FROM decider_tags t2 WHERE t2.decider = ? AND t2.application = ?"
                       " AND t2.tag = ?)")
            params += [q.decider, q.application, tag]
        else:
            sql.append("d.eid IN (SELECT t2.eid FROM decider_tags t2 WHERE t2.decider = ? AND t2.tag = ?)")
            params += [q.decider, tag]
    if q.text:
        sql.append(f"{contains}(d.text, ?) > 0")
        params.append(q.text.lower())
    if q.since is not None:
        sql.append("d.created_at >= ?")
        params.append(q.since)
    if q.until is not None:
        sql.append("d.created_at < ?")
        params.append(q.until)
    if q.waiting:
        sql.append("d.waiting > 0")
    return sql, params


def _by_tag(q: StateQuery) -> bool:
    """Whether ``q`` is read from the rows of its first tag (``decider_tags``, in a page's order)."""
    return bool(q.tags) and q.application is not None


def page(q: StateQuery, contains: str) -> tuple[str, list[Any]]:
    if _by_tag(q):
        cond, params = where(q, contains, q.tags[1:])
        return (f"SELECT {_ROW} FROM decider_tags t JOIN decider_states d ON d.eid = t.eid JOIN executions e"
                " ON e.eid = d.eid WHERE t.decider = ? AND t.application = ? AND t.tag = ? AND " + " AND ".join(cond)
                + " ORDER BY t.number DESC, t.created_at DESC, t.eid DESC LIMIT ? OFFSET ?",
                [q.decider, q.application, q.tags[0], *params, q.limit, q.offset])
    cond, params = where(q, contains)
    return (f"SELECT {_ROW} FROM decider_states d JOIN executions e ON e.eid = d.eid WHERE {' AND '.join(cond)}"
            " ORDER BY d.number DESC, d.created_at DESC, d.eid DESC LIMIT ? OFFSET ?", [*params, q.limit, q.offset])


def _labels_only(q: StateQuery) -> bool:
    """Whether ``q`` filters on its decider, application and labels alone (no other filter)."""
    return not (q.name or q.tags or q.text or q.since is not None or q.until is not None or q.waiting)


def count(q: StateQuery, contains: str, labelled: bool = False) -> tuple[str, list[Any]]:
    """The total of a page's query. ``labelled``: the store keeps ``decider_labels`` (SQLite),
    which gives the total of a query that filters on labels alone without reading its rows."""
    if labelled and _labels_only(q):
        sql, params = _labelled(q, "")
        return f"SELECT COALESCE(SUM(n), 0) FROM decider_labels WHERE {' AND '.join(sql)}", params
    if _by_tag(q):
        cond, params = where(q, contains, q.tags[1:])
        rest = cond[2:]  # the tag's rows are of the decider and application already
        head = "SELECT COUNT(*) FROM decider_tags t"
        tag = "t.decider = ? AND t.application = ? AND t.tag = ?"
        if not rest:
            return f"{head} WHERE {tag}", [q.decider, q.application, q.tags[0]]
        return (f"{head} JOIN decider_states d ON d.eid = t.eid WHERE {tag} AND {' AND '.join(rest)}",
                [q.decider, q.application, q.tags[0], *params[2:]])
    cond, params = where(q, contains)
    return f"SELECT COUNT(*) FROM decider_states d WHERE {' AND '.join(cond)}", params


def counts(q: StateQuery, contains: str, labelled: bool = False) -> tuple[str, list[Any]]:
    """How many rows match ``q`` per label, in one statement (``q.offset`` and ``q.limit`` are
    not read). ``labelled``: as ``count``, the per-label counts of a query on labels alone."""
    if labelled and _labels_only(q):
        sql, params = _labelled(q, "")
        return f"SELECT label, SUM(n) FROM decider_labels WHERE {' AND '.join(sql)} GROUP BY label", params
    cond, params = where(q, contains)
    return f"SELECT d.label, COUNT(*) FROM decider_states d WHERE {' AND '.join(cond)} GROUP BY d.label", params


def stored(row: Any, attempts: tuple[OpenAttempt, ...] = ()) -> StoredState:
    width = c.EXECUTION_WIDTH
    return StoredState(record=c.execution_record(row[:width]), version=int(row[width]),
                       state=c.unjs(row[width + 1]), label=row[width + 2], attempts=attempts)


Reading = Generator[tuple[str, Sequence[Any]], list[Any], tuple[list[StoredState], int]]
"""A read of several statements: it yields each statement with its parameters and is sent its
rows; it returns the page and its total. The backend runs all of it in one call (``drive``)."""


def read_page(q: StateQuery, contains: str, labelled: bool) -> Reading:
    """A page of ``q`` and its total; with ``q.attempts``, each row's open attempts (one more
    statement). The total of a page that ran out before its size is counted from the page: a
    search that matches a few of many rows scans them once, not twice."""
    sql, params = page(q, contains)
    rows = yield sql, params
    if 0 < len(rows) < q.limit or (not rows and q.offset == 0 and q.limit > 0):
        total = q.offset + len(rows)
    else:
        sql, params = count(q, contains, labelled=labelled)
        total = int((yield sql, params)[0][0] or 0)
    if not (q.attempts and rows):
        return [stored(r) for r in rows], total
    found: dict[str, list[OpenAttempt]] = {}
    eids = [r[0] for r in rows]
    for t in (yield OPEN_ATTEMPTS.format(_marks(len(eids))), eids):
        attempt = OpenAttempt.read(t[1], c.unjs(t[2]), c.unjs(t[3]), t[4], t[5], c.dt_(t[6]))
        if attempt is not None:
            found.setdefault(t[0], []).append(attempt)
    return [stored(r, tuple(found.get(r[0], ()))) for r in rows], total


OPEN_ATTEMPTS = ("SELECT eid, id, frame, payload, attempt, lease_owner, visible_at FROM tasks"
                 f" WHERE eid IN ({{}}) AND state = 'ready' AND kind = '{TaskKind.DELEGATE.value}' ORDER BY visible_at, id")
"""The open attempts of a page's executions: their decider's delegations not answered yet (a
task's provenance is not read: a view does not show it)."""


def drive(reading: Reading, execute: Any) -> tuple[list[StoredState], int]:
    """Run ``reading`` to its end, each statement by ``execute(sql, params) -> rows``."""
    try:
        step = next(reading)
        while True:
            step = reading.send(execute(*step))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
