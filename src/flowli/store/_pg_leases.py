"""The PostgreSQL store's leases and task holds: each one statement, retried on a deadlock.

A lease is taken with the ack of the task that woke it in one statement, and the journal is
read under it; renewals take one row lock at a time, so they never deadlock with a writer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

import asyncpg

from flowli.domain import Entry, Task, TaskKind

from . import _codec as c
from ._apply import stale_hold
from ._pg_reads import PostgresReads
from ._pg_sql import rowcount
from ._protocol import Acquired, Renewal

RETRYABLE = ("40001", "40P01")  # serialization failure, deadlock

_LEASE = (
    "WITH x AS (UPDATE executions SET lease_owner = $1, lease_epoch = lease_epoch + 1, lease_expires_at = $2,"
    " status = 'running', updated_at = $3 WHERE eid = $4 AND status NOT IN ('completed', 'failed', 'cancelled')"
    " AND (lease_owner IS NULL OR lease_expires_at IS NULL OR lease_expires_at <= $3)"
    f" RETURNING {c.EXECUTION_COLUMNS})"
)
_ACQUIRE = _LEASE + f" SELECT {c.EXECUTION_COLUMNS} FROM x"
_ACQUIRE_ACK = (
    _LEASE + ", a AS (UPDATE tasks SET state = 'acked', lease_owner = NULL WHERE id = $5"
    " AND (SELECT count(*) FROM x) >= 0)"
    f" SELECT {c.EXECUTION_COLUMNS} FROM x"
)


# the rows locked in eid order first (as in every batch that locks several), then the leases,
# then the acks (the subquery on x makes them wait for the leases)
ACQUIRE_MANY = (
    "WITH l AS (SELECT eid FROM executions WHERE eid = ANY($4::text[]) ORDER BY eid FOR UPDATE),"
    " x AS (UPDATE executions e SET lease_owner = $1, lease_epoch = e.lease_epoch + 1, lease_expires_at = $2,"
    " status = 'running', updated_at = $3 FROM l WHERE e.eid = l.eid"
    " AND e.status NOT IN ('completed', 'failed', 'cancelled')"
    " AND (e.lease_owner IS NULL OR e.lease_expires_at IS NULL OR e.lease_expires_at <= $3)"
    f" RETURNING {', '.join('e.' + col.strip() for col in c.EXECUTION_COLUMNS.split(','))}),"
    " a AS (UPDATE tasks SET state = 'acked', lease_owner = NULL WHERE id = ANY($5::text[])"
    " AND (SELECT count(*) FROM x) >= 0)"
    f" SELECT {c.EXECUTION_COLUMNS} FROM x"
)


# per execution, its entries after a seq (0: all): an index range each (the primary key's)
READ_JOURNALS = (f"SELECT j.* FROM unnest($1::text[], $2::bigint[]) AS w(wanted, after) CROSS JOIN LATERAL"
                 f" (SELECT {c.ENTRY_COLUMNS} FROM journal WHERE eid = w.wanted AND seq > w.after ORDER BY seq) j")
# The rows are picked once, in a materialized CTE: as ``WHERE id IN (SELECT ... LIMIT $6 FOR UPDATE
# SKIP LOCKED)`` the subquery could run again while the UPDATE rechecked a row that another
# transaction had changed, and the statement leased more rows than its limit (seen under load: a
# dequeue of one returned two, and the second, leased, reached nobody until its lease ran out).
DEQUEUE = (
    "WITH picked AS MATERIALIZED (SELECT id FROM tasks WHERE state = 'ready' AND queue = ANY($3::text[])"
    " AND kind = ANY($4::text[]) AND visible_at <= $5 AND (frame IS NULL OR lease_owner IS NULL)"
    " ORDER BY visible_at LIMIT $6 FOR UPDATE SKIP LOCKED)"
    " UPDATE tasks SET lease_owner = $1, visible_at = $2, deliveries = tasks.deliveries + 1"
    f" FROM picked WHERE tasks.id = picked.id RETURNING {', '.join('tasks.' + col.strip() for col in c.TASK_READ.split(','))}"
)


class PostgresLeases(PostgresReads):
    """Leases of executions, holds of tasks and claims of keys."""

    async def acquire(
        self, eid: str, owner: str, ttl: timedelta, now: datetime, ack: str | None = None
    ) -> Acquired:
        for attempt in range(5):
            try:
                return await self._acquire(eid, owner, ttl, now, ack)
            except asyncpg.PostgresError as exc:
                if getattr(exc, "sqlstate", None) not in RETRYABLE or attempt == 4:
                    raise
                await asyncio.sleep(0.01 * (attempt + 1))
        raise AssertionError("unreachable")

    async def _acquire(
        self, eid: str, owner: str, ttl: timedelta, now: datetime, ack: str | None
    ) -> Acquired:
        assert self._pool is not None
        # one statement: the lease, then the ack of the task (the subquery on x makes the task's
        # update wait for the execution's row: the order a writer's batch locks them in)
        row = await self._pool.fetchrow(
            _ACQUIRE_ACK if ack is not None else _ACQUIRE,
            owner, (now + ttl).timestamp(), now.timestamp(), eid, *([ack] if ack is not None else []),
        )
        if row is None:  # terminal, unknown, or leased by a live worker
            row = await self._pool.fetchrow(f"SELECT {c.EXECUTION_COLUMNS} FROM executions WHERE eid = $1", eid)
            return Acquired(None if row is None else c.execution_record(row), None, [])
        record = c.execution_record(row)
        # the journal, read under the lease just taken
        rows = await self._pool.fetch(f"SELECT {c.ENTRY_COLUMNS} FROM journal WHERE eid = $1 ORDER BY seq", eid)
        return Acquired(record, record.lease_epoch, [c.entry_record(r) for r in rows])

    async def acquire_many(
        self, wanted: Sequence[tuple[str, str]], owner: str, ttl: timedelta, now: datetime,
        after: Mapping[str, int] | None = None,
    ) -> list[Acquired]:
        assert self._pool is not None
        eids = sorted({eid for eid, _ in wanted})
        for attempt in range(5):
            try:
                rows = await self._pool.fetch(
                    ACQUIRE_MANY, owner, (now + ttl).timestamp(), now.timestamp(), eids, [ack for _, ack in wanted]
                )
                break
            except asyncpg.PostgresError as exc:
                if getattr(exc, "sqlstate", None) not in RETRYABLE or attempt == 4:
                    raise
                await asyncio.sleep(0.01 * (attempt + 1))
        records = {r.eid: r for r in (c.execution_record(row) for row in rows)}
        journals: dict[str, list[Entry]] = {eid: [] for eid in records}
        if records:
            # the journals, read under the leases just taken (a statement of its own: it sees what
            # the previous holders committed before they let go)
            after = after or {}
            eids_read = list(records)
            for row in await self._pool.fetch(READ_JOURNALS, eids_read, [after.get(e, 0) for e in eids_read]):
                journals[row[0]].append(c.entry_record(row))
        out = []
        for eid, _ in wanted:
            record = records.pop(eid, None)
            out.append(Acquired(None, None, []) if record is None else
                       Acquired(record, record.lease_epoch, journals[eid], after.get(eid, 0)))
        return out

    async def renew(
        self, owner: str, leases: Sequence[tuple[str, int]], ttl: timedelta, now: datetime
    ) -> Renewal:
        assert self._pool is not None
        lost, cancel = [], []
        # one row per statement, each its own transaction: a renewal never holds two row locks,
        # so it cannot deadlock with a writer's batch. An expired lease is not renewed: the
        # sweeper may have handed the execution to another worker already.
        async with self._pool.acquire() as conn:
            for eid, epoch in leases:
                for attempt in range(5):
                    try:
                        row = await conn.fetchrow(
                            "UPDATE executions SET lease_expires_at = $1 WHERE eid = $2 AND lease_owner = $3"
                            " AND lease_epoch = $4 AND lease_expires_at > $5 RETURNING cancel_requested IS NOT NULL",
                            (now + ttl).timestamp(), eid, owner, epoch, now.timestamp(),
                        )
                        break
                    except asyncpg.PostgresError as exc:
                        if getattr(exc, "sqlstate", None) not in RETRYABLE or attempt == 4:
                            raise
                        await asyncio.sleep(0.01 * (attempt + 1))
                if row is None:
                    lost.append(eid)
                elif row[0]:
                    cancel.append(eid)
        return Renewal(lost, cancel)

    async def dequeue(
        self,
        queues: Sequence[str],
        kinds: Sequence[TaskKind],
        owner: str,
        limit: int,
        ttl: timedelta,
        now: datetime,
    ) -> list[Task]:
        assert self._pool is not None
        t = now.timestamp()
        rows = await self._pool.fetch(
            DEQUEUE, owner, t + ttl.total_seconds(), list(queues), [k.value for k in kinds], t, limit,
        )
        return sorted((c.task_record(r) for r in rows), key=lambda task: task.visible_at)

    async def nack(self, task_id: str, owner: str | None, delay: timedelta, now: datetime) -> bool:
        assert self._pool is not None
        status = await self._pool.execute(
            "UPDATE tasks SET lease_owner = NULL, visible_at = $1 WHERE id = $2 AND state = 'ready'"
            " AND ($3::text IS NULL OR lease_owner = $3::text)",
            (now + delay).timestamp(), task_id, owner,
        )
        return rowcount(status) > 0

    async def renew_task(self, task_id: str, owner: str, ttl: timedelta, now: datetime) -> Task:
        assert self._pool is not None
        row = await self._pool.fetchrow(
            "UPDATE tasks SET visible_at = $1 WHERE id = $2 AND state = 'ready' AND lease_owner = $3 AND visible_at > $4"
            f" RETURNING {c.TASK_READ}", (now + ttl).timestamp(), task_id, owner, now.timestamp(),
        )
        if row is None:
            raise stale_hold(task_id, owner, await self.read_task(task_id), now)
        return c.task_record(row)

    async def claim(self, key: str, owner: str, now: datetime) -> bool:
        assert self._pool is not None
        status = await self._pool.execute(
            "INSERT INTO claims (key, owner, at) VALUES ($1, $2, $3) ON CONFLICT (key) DO NOTHING", key, owner, now.timestamp()
        )
        return rowcount(status) > 0
