"""The reads whose SQL is the same on both backends, written once.

Each read is a statement with ``?`` placeholders (PostgreSQL's store numbers them, ``dialect``)
and the record each of its rows becomes. A backend runs a statement with :meth:`SharedReads._rows`
(SQLite: on the calling thread's read-only connection for a point read, else on its reader
thread, where the rows are decoded too; PostgreSQL: on its pool). The reads whose SQL differs
(a list of eids: ``IN (...)`` against ``= ANY($1)``; the earliest wake-up; PostgreSQL's batched
receives) stay with their backend.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from flowli.domain import Entry, ExecutionRecord, Message, Status, Task, Timer

from . import _codec as c
from . import _states_sql as states
from ._journal_sql import JournalFilter, activity, idle, queue_depths, scope_sql
from ._journal_sql import page as journal_page
from ._journal_sql import tasks as task_query
from ._protocol import StateQuery, StoredState

R = TypeVar("R")

TASK = f"SELECT {c.TASK_READ} FROM tasks WHERE id = ?"
EXECUTION = f"SELECT {c.EXECUTION_COLUMNS} FROM executions WHERE eid = ?"
JOURNAL = f"SELECT {c.ENTRY_COLUMNS} FROM journal WHERE eid = ? AND seq > ? ORDER BY seq"
_WORKERS = "SELECT id, kind, queues, started_at, seen_at, workflows FROM workers WHERE seen_at > ? ORDER BY id"
_EXPIRED_TASKS = (f"SELECT {c.TASK_READ} FROM tasks WHERE state = 'ready' AND frame IS NOT NULL"
                  " AND lease_owner IS NOT NULL AND visible_at <= ? ORDER BY visible_at LIMIT ?")
_STATUS = "SELECT status FROM executions WHERE eid = ?"
_CONTROL_LOG = ("SELECT eid, seq, kind, fid, attempt, digest, value, error, provenance, journal_seq"
                " FROM control_log WHERE seq > ? ORDER BY seq LIMIT ?")
_TIMERS = "SELECT eid, fid, at FROM timers WHERE (CAST(? AS TEXT) IS NULL OR eid = ?) ORDER BY at"
_DUE_TIMERS = "SELECT eid, fid, at FROM timers WHERE at <= ? ORDER BY at LIMIT ?"
_EXPIRED_LEASES = (f"SELECT {c.EXECUTION_COLUMNS} FROM executions WHERE status = 'running'"
                   " AND (lease_expires_at IS NULL OR lease_expires_at <= ?) LIMIT ?")
_UNANNOUNCED = (f"SELECT {', '.join('j.' + x.strip() for x in c.ENTRY_COLUMNS.split(','))}"
                " FROM unannounced u JOIN journal j ON j.eid = u.eid AND j.seq = u.seq"
                " WHERE u.at <= ? ORDER BY u.at, j.eid, j.seq LIMIT ?")
_FINISHED_BEFORE = (
    "SELECT eid FROM executions e WHERE status IN ('completed', 'failed', 'cancelled') AND updated_at <= ?"
    # not before its lifecycle entries reached the control log (the archive keeps no unannounced
    # mark): a pending second append, or the sweeper's repair, comes first
    " AND NOT EXISTS (SELECT 1 FROM unannounced u WHERE u.eid = e.eid)"
    " ORDER BY updated_at LIMIT ?")
_SCOPED_MESSAGES = (f"SELECT {c.MESSAGE_COLUMNS} FROM messages WHERE channel >= ? AND channel < ?"
                    " ORDER BY channel, seq")
_WAITERS = "SELECT eid FROM waiters WHERE channel = ?"
_DECIDER_COUNTS = ("SELECT decider, application, name, label, COUNT(*) FROM decider_states WHERE decider IS NOT NULL"
                   " GROUP BY decider, application, name, label")


def scope_params(application: str | None) -> list[str]:
    """The parameters of a query scoped to ``application`` (none when it is not)."""
    return scope_sql("application", application)[1] if application is not None else []


def _first(row: Any) -> Any:
    return row[0]


class SharedReads:
    """The reads of :class:`flowli.store.Store` that both backends make with the same SQL."""

    CONTAINS = "instr"
    """The backend's substring test (``instr(text, part)``; PostgreSQL: ``strpos``)."""
    FLOOR = "CAST({} AS INTEGER)"
    """The backend's ``floor`` of a number not below 0 (SQLite's cast truncates; PostgreSQL's
    rounds, so it says ``floor``)."""
    LABELLED = False
    """Whether the backend keeps per-label counts (``decider_labels``: the total of a page
    filtered by labels alone without reading its rows)."""

    async def _rows(self, sql: str, params: Sequence[Any], record: Callable[[Any], R], *,
                    point: bool = False) -> list[R]:
        """The rows of ``sql`` (``?`` placeholders), each as ``record`` makes it. ``point``: a
        read of one row by its key, which a backend may make on the calling thread."""
        raise NotImplementedError

    async def _one(self, sql: str, params: Sequence[Any], record: Callable[[Any], R], *,
                   point: bool = False) -> R | None:
        rows = await self._rows(sql, params, record, point=point)
        return rows[0] if rows else None

    async def read_task(self, task_id: str) -> Task | None:
        return await self._one(TASK, (task_id,), c.task_record, point=True)

    async def read_execution(self, eid: str) -> ExecutionRecord | None:
        return await self._one(EXECUTION, (eid,), c.execution_record, point=True)

    async def read_status(self, eid: str) -> Status | None:
        return await self._one(_STATUS, (eid,), lambda row: Status(row[0]), point=True)

    async def read_state(self, eid: str, held: int | None = None) -> tuple[int, Any] | None:
        return await self._one(states.READ, (held, eid), lambda row: states.read(row, held), point=True)

    async def read_workers(self, seen_after: datetime) -> list[dict[str, Any]]:
        return await self._rows(_WORKERS, (seen_after.timestamp(),), c.worker_record)

    async def expired_tasks(self, now: datetime, limit: int) -> list[Task]:
        return await self._rows(_EXPIRED_TASKS, (now.timestamp(), limit), c.task_record)

    async def read_states(self, query: StateQuery) -> tuple[list[StoredState], int]:
        return await self._read_all(states.read_page(query, self.CONTAINS, self.LABELLED))

    async def _read_all(self, reading: states.Reading) -> tuple[list[StoredState], int]:
        """Run a read of several statements in one call of the backend (``states.drive``)."""
        raise NotImplementedError

    async def read_state_counts(self, query: StateQuery) -> dict[str, int]:
        sql, params = states.counts(query, self.CONTAINS, labelled=self.LABELLED)
        return {label: int(n) for label, n in await self._rows(sql, params, tuple) if label and n}

    async def read_journal(self, eid: str, after: int = 0) -> list[Entry]:
        return await self._rows(JOURNAL, (eid, after), c.entry_record)

    async def read_journal_page(self, eid: str, f: JournalFilter, before: int | None, limit: int,
                                ) -> tuple[list[Entry], int]:
        rows_sql, rows_params, count_sql, count_params = journal_page(eid, f, before, limit)
        rows = await self._rows(rows_sql, rows_params, c.entry_record)
        return rows, int(await self._one(count_sql, count_params, _first) or 0)

    async def read_idle(self, before: datetime, now: datetime, application: str | None,
                        limit: int) -> list[ExecutionRecord]:
        params = (before.timestamp(), now.timestamp(), *([application] if application is not None else []), limit)
        return await self._rows(idle(application), params, c.execution_record)

    async def queue_depths(self, now: datetime, application: str | None = None) -> list[tuple[str, int, float]]:
        params = (now.timestamp(), *scope_params(application))
        return await self._rows(queue_depths(application), params, lambda r: (str(r[0]), int(r[1]), float(r[2])))

    async def read_decider_counts(self) -> list[tuple[str, str | None, str | None, str | None, int]]:
        return await self._rows(_DECIDER_COUNTS, (), lambda r: (str(r[0]), r[1], r[2], r[3], int(r[4])))

    async def read_activity(self, since: datetime, width: float,
                            application: str | None = None) -> list[tuple[str, str | None, int, str, int]]:
        at, scoped = since.timestamp(), scope_params(application)
        return await self._rows(activity(application, self.FLOOR), (at, width, at, *scoped, at, width, at, *scoped),
                                lambda r: (str(r[0]), None if r[1] is None else str(r[1]), int(r[2]), str(r[3]), int(r[4])))

    async def read_control_log(self, after: int = 0, limit: int = 1000) -> list[Entry]:
        return await self._rows(_CONTROL_LOG, (after, limit), lambda r: c.entry_record(tuple(r)[:9], r[9]))

    async def read_tasks(self, queue: str | None = None, eid: str | None = None,
                         include_acked: bool = False) -> list[Task]:
        sql, params = task_query(queue, eid, include_acked)
        return await self._rows(sql, params, c.task_record)

    async def read_timers(self, eid: str | None = None) -> list[Timer]:
        return await self._rows(_TIMERS, (eid, eid), c.timer_record)

    async def due_timers(self, now: datetime, limit: int) -> list[Timer]:
        return await self._rows(_DUE_TIMERS, (now.timestamp(), limit), c.timer_record)

    async def expired_leases(self, now: datetime, limit: int) -> list[ExecutionRecord]:
        return await self._rows(_EXPIRED_LEASES, (now.timestamp(), limit), c.execution_record)

    async def unannounced(self, before: datetime, limit: int) -> list[Entry]:
        return await self._rows(_UNANNOUNCED, (before.timestamp(), limit), lambda r: c.entry_record(r, r[1]))

    async def finished_before(self, before: datetime, limit: int) -> list[str]:
        return await self._rows(_FINISHED_BEFORE, (before.timestamp(), limit), _first)

    async def read_scoped_messages(self, eid: str) -> list[Message]:
        return await self._rows(_SCOPED_MESSAGES, (f"{eid}.", f"{eid}/"), c.message_record)

    async def waiters(self, channel: str) -> list[str]:
        return await self._rows(_WAITERS, (channel,), _first)
