"""PostgreSQL: the store prepares the statements of the hot path on its connections when it
opens, so the first executions of an engine just opened do not wait for it. Observable through
asyncpg's query log: a new connection's first use of a statement that binds arrays of integers,
floats or booleans makes asyncpg look the types up (its ``typeinfo_tree`` query) before the
statement runs; after the warm-up, the first executions make none."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

import flowli
from flowli import Context, Registry

from .pg import fresh_schema

pytestmark = pytest.mark.integration


def one(x: int) -> int:
    return x + 1


registry = Registry()


@registry.workflow("warm.one")
async def one_step(ctx: Context, x: int) -> int:
    return await ctx.step(one, x)


async def test_the_first_executions_after_open_prepare_nothing_and_look_up_no_type(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    queries: list[str] = []
    opened = asyncio.Event()

    async def log_queries(conn: Any) -> None:
        """Each connection the store's pool makes while it opens logs its queries once it is open
        (not those of the open, whose warm-up is what looks the types up)."""
        if not opened.is_set():
            conn.add_query_logger(lambda record: queries.append(record.query) if opened.is_set() else None)

    real_create_pool = asyncpg.create_pool

    def create_pool(*args: Any, **kwargs: Any) -> Any:  # the store's pool, with the hook on its new connections
        return real_create_pool(*args, init=log_queries, **kwargs)

    monkeypatch.setattr(asyncpg, "create_pool", create_pool)
    async with fresh_schema() as url:
        engine = await flowli.connect(url, registry)
        opened.set()
        async with engine:
            async with engine.worker(concurrency=4):
                eids = [await engine.start(one_step, i) for i in range(3)]
                assert [await engine.result(eid, timeout=30) for eid in eids] == [1, 2, 3]
                await asyncio.sleep(0.1)  # the control log's bunch
        assert queries, "the query logger saw nothing: the test watches the wrong connections"
        lookups = [q for q in queries if "typeinfo_tree" in q]
        assert lookups == [], f"{len(lookups)} type lookups during the first executions"


async def test_the_stores_connections_price_out_seq_scans_and_never_compile_a_plan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With sequential scans priced out, a plan that still scans costs more than any JIT threshold:
    the store's connections keep JIT off, or each such statement compiled itself first (25-120 ms
    for a query of a millisecond: the schema check of every open was one)."""
    made: list[Any] = []

    async def keep(conn: Any) -> None:
        made.append(conn)

    real_create_pool = asyncpg.create_pool

    def create_pool(*args: Any, **kwargs: Any) -> Any:  # the store's pool, its connections kept to ask
        return real_create_pool(*args, init=keep, **kwargs)

    monkeypatch.setattr(asyncpg, "create_pool", create_pool)
    async with fresh_schema() as url:
        engine = await flowli.connect(url, registry)
        async with engine:
            assert made, "the store made no pooled connection"
            for conn in made:
                settings = await conn.fetchrow("SELECT current_setting('jit') AS jit,"
                                               " current_setting('enable_seqscan') AS seqscan")
                assert (settings["jit"], settings["seqscan"]) == ("off", "off")
                plan = await conn.fetchval("EXPLAIN (FORMAT JSON) SELECT max(version) FROM schema_version")
                assert "JIT" not in str(plan)
