"""Reads for the views over the store: a page of one journal, newest first (the dashboard's
timeline), and the depth of each queue (the metrics); the statements in the dialect both backends
accept (``?`` placeholders; PostgreSQL's store rewrites them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flowli.domain import DEFAULT_APPLICATION

from ._codec import ENTRY_COLUMNS, EXECUTION_COLUMNS, TASK_READ

QUEUE_DEPTHS = ("SELECT queue, COUNT(*), MIN(visible_at) FROM tasks WHERE state = 'ready' AND visible_at <= ?"
                " GROUP BY queue ORDER BY queue")
"""The tasks ready to dequeue per queue, and the oldest one's instant (the metrics' queue depth)."""


def scope_sql(column: str, application: str) -> tuple[str, list[str]]:
    """The condition of a query scoped to ``application`` on ``column``, with its parameters: the
    ``default`` application's rows are also those of no application (see ``flowli.domain.belongs``)."""
    if application == DEFAULT_APPLICATION:
        return f"({column} = ? OR {column} IS NULL)", [application]
    return f"{column} = ?", [application]


def tasks(queue: str | None, eid: str | None, include_acked: bool) -> tuple[str, list[Any]]:
    """The tasks of a queue and/or an execution, by the index of what is given (a condition
    written ``? IS NULL OR ...`` would make SQLite scan the table)."""
    where, params = [], []
    for column, value in (("queue", queue), ("eid", eid)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if not include_acked:
        where.append("state = 'ready'")
    return (f"SELECT {TASK_READ} FROM tasks" + (" WHERE " + " AND ".join(where) if where else "")
            + " ORDER BY visible_at, id", params)


def idle(application: str | None) -> str:
    """Executions not ended, unchanged since an instant (``updated_at`` moves with the status and
    the lease), that no future timer will wake: the candidates of stuck runs, oldest first.
    Parameters: before, now[, application], limit."""
    cols = ", ".join(f"e.{col}" for col in EXECUTION_COLUMNS.split(", "))
    return (f"SELECT {cols} FROM executions e WHERE e.status IN ('pending', 'running', 'suspended')"
            " AND e.updated_at < ?"
            " AND NOT EXISTS (SELECT 1 FROM timers t WHERE t.eid = e.eid AND t.at > ?)"
            + (" AND " + scope_sql("e.application", application)[0] if application is not None else "")
            + " ORDER BY e.updated_at LIMIT ?")


def activity(application: str | None, floor: str) -> str:
    """The runs (executions without a parent) started, and those ended, in a window of time, per
    workflow and name (a decider's, such as a pipeline's; NULL for a workflow's runs) and per
    interval of the window: rows of workflow, name, interval, what (``started`` or the status it
    ended in) and count. ``floor`` is the backend's form of ``floor({})`` for a number not below
    0. Parameters: since, width, since[, application], since, width, since[, application]."""
    scope = (" AND " + scope_sql("e.application", application)[0]) if application is not None else ""
    return (f"SELECT e.workflow, d.name, {floor.format('(e.created_at - ?) / ?')}, 'started', COUNT(*)"
            " FROM executions e LEFT JOIN decider_states d ON d.eid = e.eid"
            f" WHERE e.created_at >= ? AND e.parent_eid IS NULL{scope} GROUP BY 1, 2, 3"
            f" UNION ALL SELECT e.workflow, d.name, {floor.format('(e.updated_at - ?) / ?')}, e.status, COUNT(*)"
            " FROM executions e LEFT JOIN decider_states d ON d.eid = e.eid"
            " WHERE e.status IN ('completed', 'failed', 'cancelled') AND e.updated_at >= ?"
            f" AND e.parent_eid IS NULL{scope} GROUP BY 1, 2, 3, 4")


def queue_depths(application: str | None) -> str:
    """:data:`QUEUE_DEPTHS`, of one application's tasks only when it is given. Parameters: now[,
    application]."""
    if application is None:
        return QUEUE_DEPTHS
    return ("SELECT queue, COUNT(*), MIN(visible_at) FROM tasks WHERE state = 'ready' AND visible_at <= ?"
            f" AND {scope_sql('application', application)[0]} GROUP BY queue ORDER BY queue")


@dataclass(frozen=True)
class JournalFilter:
    """The entries of one frame, of one kind, of one attempt (None: any)."""

    fid: str | None = None
    kind: str | None = None
    attempt: int | None = None


def page(eid: str, f: JournalFilter, before: int | None, limit: int) -> tuple[str, list[Any], str, list[Any]]:
    """The statement of the page's rows and the one that counts every entry the filter matches."""
    where, params = "eid = ?", [eid]
    for column, value in (("fid", f.fid), ("kind", f.kind), ("attempt", f.attempt)):
        if value is not None:
            where += f" AND {column} = ?"
            params.append(value)
    count = f"SELECT COUNT(*) FROM journal WHERE {where}"
    rows_where, rows_params = where, list(params)
    if before is not None:
        rows_where += " AND seq < ?"
        rows_params.append(before)
    rows = f"SELECT {ENTRY_COLUMNS} FROM journal WHERE {rows_where} ORDER BY seq DESC LIMIT ?"
    return rows, [*rows_params, limit], count, params
