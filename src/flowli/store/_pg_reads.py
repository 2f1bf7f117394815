"""The PostgreSQL store's reads: rows of the pool, no transaction of their own.

The receives of many executions resumed in one turn of the loop go in one statement
(``read_messages``); every other read is one statement on the pool.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import asyncpg

from flowli.domain import Entry, ExecutionRecord, Message, Status, Task, Timer

from . import _codec as c
from . import _states_sql as states
from ._journal_sql import QUEUE_DEPTHS, JournalFilter, idle
from ._journal_sql import page as journal_page
from ._journal_sql import tasks as task_query
from ._pg_sql import dialect
from ._protocol import StateQuery, StoredState

_READ_STATE = dialect(states.READ)
READ_MESSAGES = (
    "SELECT q.i, m.channel, m.seq, m.payload, m.provenance, m.application"
    " FROM unnest($1::text[], $2::bigint[], $3::int[]) WITH ORDINALITY AS q(channel, after, lim, i)"
    " CROSS JOIN LATERAL (SELECT channel, seq, payload, provenance, application FROM messages"
    " WHERE channel = q.channel AND seq > q.after ORDER BY seq LIMIT q.lim) m ORDER BY q.i, m.seq"
)


class PostgresReads:
    """The reads of ``PostgresStore``; it owns the pool and the batch of message reads."""

    _pool: asyncpg.Pool | None
    _message_reads: list[tuple[str, int, int, asyncio.Future[list[Message]]]]
    _reading: set[asyncio.Future[None]]

    async def read_workers(self, seen_after: datetime) -> list[dict[str, Any]]:
        assert self._pool is not None
        rows = await self._pool.fetch("SELECT id, kind, queues, started_at, seen_at, workflows FROM workers"
                                      " WHERE seen_at > $1"
                                      " ORDER BY id", seen_after.timestamp())
        return [c.worker_record(r) for r in rows]

    async def read_task(self, task_id: str) -> Task | None:
        assert self._pool is not None
        row = await self._pool.fetchrow(f"SELECT {c.TASK_READ} FROM tasks WHERE id = $1", task_id)
        return None if row is None else c.task_record(row)

    async def expired_tasks(self, now: datetime, limit: int) -> list[Task]:
        assert self._pool is not None
        rows = await self._pool.fetch(
            f"SELECT {c.TASK_READ} FROM tasks WHERE state = 'ready' AND frame IS NOT NULL AND lease_owner IS NOT NULL"
            " AND visible_at <= $1 ORDER BY visible_at LIMIT $2", now.timestamp(), limit,
        )
        return [c.task_record(r) for r in rows]

    async def read_execution(self, eid: str) -> ExecutionRecord | None:
        assert self._pool is not None
        row = await self._pool.fetchrow(f"SELECT {c.EXECUTION_COLUMNS} FROM executions WHERE eid = $1", eid)
        return None if row is None else c.execution_record(row)

    async def read_status(self, eid: str) -> Status | None:
        assert self._pool is not None
        status = await self._pool.fetchval("SELECT status FROM executions WHERE eid = $1", eid)
        return None if status is None else Status(status)

    async def read_state(self, eid: str, held: int | None = None) -> tuple[int, Any] | None:
        assert self._pool is not None
        row = await self._pool.fetchrow(_READ_STATE, held, eid)
        return None if row is None else states.read(row, held)

    async def read_states(self, query: StateQuery) -> tuple[list[StoredState], int]:
        assert self._pool is not None
        sql, params = states.page(query, "strpos")
        rows = [states.stored(r) for r in await self._pool.fetch(dialect(sql), *params)]
        sql, params = states.count(query, "strpos")
        return rows, int(await self._pool.fetchval(dialect(sql), *params))

    async def read_open_tasks(self, eids: Sequence[str]) -> list[Task]:
        assert self._pool is not None
        rows = await self._pool.fetch(f"SELECT {c.TASK_READ} FROM tasks WHERE eid = ANY($1::text[]) AND state = 'ready'"
                                      " ORDER BY visible_at, id", list(eids))
        return [c.task_record(r) for r in rows]

    async def read_states_of(self, eids: Sequence[str]) -> dict[str, tuple[int, Any]]:
        assert self._pool is not None
        if not eids:
            return {}
        rows = await self._pool.fetch("SELECT eid, version, state FROM decider_states WHERE eid = ANY($1::text[])",
                                      list(eids))
        return {r[0]: (int(r[1]), c.unjs(r[2])) for r in rows}

    async def read_executions(self, eids: Sequence[str]) -> list[ExecutionRecord]:
        assert self._pool is not None
        rows = await self._pool.fetch(f"SELECT {c.EXECUTION_COLUMNS} FROM executions WHERE eid = ANY($1::text[])", list(eids))
        return [c.execution_record(r) for r in rows]

    async def read_journal(self, eid: str, after: int = 0) -> list[Entry]:
        assert self._pool is not None
        rows = await self._pool.fetch(
            f"SELECT {c.ENTRY_COLUMNS} FROM journal WHERE eid = $1 AND seq > $2 ORDER BY seq", eid, after
        )
        return [c.entry_record(r) for r in rows]

    async def read_journal_page(self, eid: str, f: JournalFilter, before: int | None, limit: int,
                                ) -> tuple[list[Entry], int]:
        assert self._pool is not None
        rows_sql, rows_params, count_sql, count_params = journal_page(eid, f, before, limit)
        async with self._pool.acquire() as conn:
            rows = await conn.fetch(dialect(rows_sql), *rows_params)
            count = await conn.fetchval(dialect(count_sql), *count_params)
        return [c.entry_record(r) for r in rows], int(count)

    async def read_idle(self, before: datetime, now: datetime, application: str | None,
                        limit: int) -> list[ExecutionRecord]:
        assert self._pool is not None
        params = (before.timestamp(), now.timestamp(), *([application] if application is not None else []), limit)
        return [c.execution_record(r) for r in await self._pool.fetch(dialect(idle(application)), *params)]

    async def queue_depths(self, now: datetime) -> list[tuple[str, int, float]]:
        assert self._pool is not None
        rows = await self._pool.fetch(dialect(QUEUE_DEPTHS), now.timestamp())
        return [(str(r[0]), int(r[1]), float(r[2])) for r in rows]

    async def read_messages(self, channel: str, after: int = 0, limit: int = 100) -> list[Message]:
        # the reads asked for in one turn of the loop (the receives of many resumed executions)
        # go in one statement
        fut: asyncio.Future[list[Message]] = asyncio.get_running_loop().create_future()
        self._message_reads.append((channel, after, limit, fut))
        if len(self._message_reads) == 1:
            asyncio.get_running_loop().call_soon(self._read_messages_now)
        return await fut

    def _read_messages_now(self) -> None:
        reads, self._message_reads = self._message_reads, []
        task = asyncio.ensure_future(self._read_many_messages(reads))
        self._reading.add(task)
        task.add_done_callback(self._reading.discard)

    async def _read_many_messages(self, reads: list[tuple[str, int, int, asyncio.Future[list[Message]]]]) -> None:
        try:
            assert self._pool is not None
            rows = await self._pool.fetch(READ_MESSAGES, [r[0] for r in reads], [r[1] for r in reads],
                                          [r[2] for r in reads])
        except BaseException as exc:
            for *_, fut in reads:
                if not fut.done():
                    fut.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        found: list[list[Message]] = [[] for _ in reads]
        for row in rows:
            found[row[0] - 1].append(c.message_record(row[1:]))
        for (*_, fut), messages in zip(reads, found):
            if not fut.done():
                fut.set_result(messages)

    async def read_control_log(self, after: int = 0, limit: int = 1000) -> list[Entry]:
        assert self._pool is not None
        rows = await self._pool.fetch(
            "SELECT eid, seq, kind, fid, attempt, digest, value, error, provenance, journal_seq"
            " FROM control_log WHERE seq > $1 ORDER BY seq LIMIT $2",
            after, limit,
        )
        return [c.entry_record(tuple(r)[:9], r[9]) for r in rows]

    async def read_tasks(
        self, queue: str | None = None, eid: str | None = None, include_acked: bool = False
    ) -> list[Task]:
        assert self._pool is not None
        sql, params = task_query(queue, eid, include_acked)
        return [c.task_record(r) for r in await self._pool.fetch(dialect(sql), *params)]

    async def read_timers(self, eid: str | None = None) -> list[Timer]:
        assert self._pool is not None
        rows = await self._pool.fetch(
            "SELECT eid, fid, at FROM timers WHERE ($1::text IS NULL OR eid = $1::text) ORDER BY at", eid
        )
        return [c.timer_record(r) for r in rows]

    async def due_timers(self, now: datetime, limit: int) -> list[Timer]:
        assert self._pool is not None
        rows = await self._pool.fetch("SELECT eid, fid, at FROM timers WHERE at <= $1 ORDER BY at LIMIT $2", now.timestamp(), limit)
        return [c.timer_record(r) for r in rows]

    async def expired_leases(self, now: datetime, limit: int) -> list[ExecutionRecord]:
        assert self._pool is not None
        rows = await self._pool.fetch(
            f"SELECT {c.EXECUTION_COLUMNS} FROM executions WHERE status = 'running'"
            " AND (lease_expires_at IS NULL OR lease_expires_at <= $1) LIMIT $2",
            now.timestamp(), limit,
        )
        return [c.execution_record(r) for r in rows]

    async def unannounced(self, before: datetime, limit: int) -> list[Entry]:
        assert self._pool is not None
        rows = await self._pool.fetch(
            f"SELECT {', '.join('j.' + x.strip() for x in c.ENTRY_COLUMNS.split(','))}"
            " FROM unannounced u JOIN journal j ON j.eid = u.eid AND j.seq = u.seq"
            " WHERE u.at <= $1 ORDER BY u.at, j.eid, j.seq LIMIT $2",
            before.timestamp(), limit,
        )
        return [c.entry_record(r, r[1]) for r in rows]

    async def finished_before(self, before: datetime, limit: int) -> list[str]:
        assert self._pool is not None
        rows = await self._pool.fetch(
            "SELECT eid FROM executions e WHERE status IN ('completed', 'failed', 'cancelled') AND updated_at <= $1"
                # not before its lifecycle entries reached the control log (the archive keeps no
                # unannounced mark): a pending second append, or the sweeper's repair, comes first
                " AND NOT EXISTS (SELECT 1 FROM unannounced u WHERE u.eid = e.eid)"
            " ORDER BY updated_at LIMIT $2",
            before.timestamp(), limit,
        )
        return [r[0] for r in rows]

    async def read_scoped_messages(self, eid: str) -> list[Message]:
        assert self._pool is not None
        rows = await self._pool.fetch(
            f"SELECT {c.MESSAGE_COLUMNS} FROM messages WHERE channel >= $1 AND channel < $2"
            " ORDER BY channel, seq",
            f"{eid}.", f"{eid}/",
        )
        return [c.message_record(r) for r in rows]

    async def waiters(self, channel: str) -> list[str]:
        assert self._pool is not None
        return [r[0] for r in await self._pool.fetch("SELECT eid FROM waiters WHERE channel = $1", channel)]

    async def next_wake(self, now: datetime) -> datetime | None:
        assert self._pool is not None
        value = await self._pool.fetchval(
            "SELECT LEAST((SELECT MIN(at) FROM timers),"
            " (SELECT MIN(visible_at) FROM tasks WHERE state = 'ready' AND visible_at > $1))",
            now.timestamp(),
        )
        return c.dt(value)
