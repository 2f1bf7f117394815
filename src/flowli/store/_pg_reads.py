"""The PostgreSQL store's reads: rows of the pool, no transaction of their own.

The receives of many executions resumed in one turn of the loop go in one statement
(``read_messages``); every other read is one statement on the pool.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import asyncpg

from flowli.domain import ExecutionRecord, Message

from . import _codec as c
from . import _states_sql as states
from ._pg_sql import dialect
from ._protocol import StoredState
from ._reads import R, SharedReads

READ_MESSAGES = (
    "SELECT q.i, m.channel, m.seq, m.payload, m.provenance, m.application"
    " FROM unnest($1::text[], $2::bigint[], $3::int[]) WITH ORDINALITY AS q(channel, after, lim, i)"
    " CROSS JOIN LATERAL (SELECT channel, seq, payload, provenance, application FROM messages"
    " WHERE channel = q.channel AND seq > q.after ORDER BY seq LIMIT q.lim) m ORDER BY q.i, m.seq"
)


class PostgresReads(SharedReads):
    """The reads of ``PostgresStore``; it owns the pool and the batch of message reads."""

    CONTAINS = "strpos"
    FLOOR = "floor({})::bigint"
    _pool: asyncpg.Pool | None
    _message_reads: list[tuple[str, int, int, asyncio.Future[list[Message]]]]
    _reading: set[asyncio.Future[None]]

    async def _rows(self, sql: str, params: Sequence[Any], record: Callable[[Any], R], *,
                    point: bool = False) -> list[R]:
        assert self._pool is not None
        return [record(r) for r in await self._pool.fetch(dialect(sql), *params)]

    async def _read_all(self, reading: states.Reading) -> tuple[list[StoredState], int]:
        assert self._pool is not None
        async with self._pool.acquire() as conn:  # one connection for all of its statements
            try:
                step = next(reading)
                while True:
                    step = reading.send(list(await conn.fetch(dialect(step[0]), *step[1])))
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

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

    async def next_wake(self, now: datetime) -> datetime | None:
        assert self._pool is not None
        value = await self._pool.fetchval(
            "SELECT LEAST((SELECT MIN(at) FROM timers),"
            " (SELECT MIN(visible_at) FROM tasks WHERE state = 'ready' AND visible_at > $1))",
            now.timestamp(),
        )
        return c.dt(value)
