"""A database made by an earlier release (the schema before this one's migrations) opens with
this one: the numbered migrations upgrade it, and what it held reads back and runs on."""

from __future__ import annotations

import sqlite3
from importlib import resources
from pathlib import Path

import asyncpg
import pytest

import flowli
from flowli import Context, Registry

from .pg import fresh_schema

pytestmark = pytest.mark.integration

registry = Registry()


@registry.workflow("waits")
async def waits(ctx: Context) -> str:
    return await ctx.receive("go")


def _sql(backend: str, up_to: int) -> list[str]:
    folder = resources.files("flowli.store") / "sql" / backend
    files = sorted((int(f.name.split("_", 1)[0]), f.read_text()) for f in folder.iterdir() if f.name.endswith(".sql"))
    return [sql for n, sql in files if n <= up_to]


OLD_ROW = ("e-old", "waits", "1", "suspended", "[]", "default", 1.0e9, 1.0e9, None, None, None, None, None, None, 0,
           None, None, None)
OLD_ENTRY = ("e-old", 1, "execution.started", "root", None, None, '{"workflow": "waits", "version": "1"}', None,
             '{"actor": {"kind": "system", "id": "old"}, "at": "2001-09-09T01:46:40+00:00"}')


async def _runs_on(url: str) -> None:
    engine = await flowli.connect(url, registry, poll_interval=0.05, sweep_interval=0.05)
    async with engine, engine.worker():
        record = await engine.status("e-old")
        assert (record.workflow, record.application) == ("waits", None)
        await engine.signal("e-old", "go", "upgraded")
        assert await engine.result("e-old", timeout=30) == "upgraded"
        eid = await engine.start("waits", application="acme")  # the new columns work
        assert (await engine.status(eid)).application == "acme"


async def test_a_sqlite_database_of_schema_version_2_upgrades(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    for sql in _sql("sqlite", 2):
        for statement in sql.split(";\n"):
            if statement.strip():
                conn.execute(statement)
    conn.execute("INSERT INTO schema_version (version) VALUES (2)")
    conn.execute(f"INSERT INTO executions VALUES ({','.join('?' * 18)}, 2)", OLD_ROW)
    conn.execute(f"INSERT INTO journal VALUES ({','.join('?' * 9)})", OLD_ENTRY)
    conn.commit()
    conn.close()
    await _runs_on(f"sqlite:///{db}")
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] == len(_sql("sqlite", 99))
    conn.close()


async def test_a_postgresql_database_of_schema_version_3_upgrades() -> None:
    async with fresh_schema(empty=True) as url:
        base, _, schema = url.partition("?schema=")
        conn = await asyncpg.connect(base, server_settings={"search_path": schema})
        try:
            await conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
            for sql in _sql("postgres", 3):
                await conn.execute(sql)
            await conn.execute("INSERT INTO schema_version (version) VALUES (3)")
            await conn.execute(f"INSERT INTO executions VALUES ({', '.join(f'${i}' for i in range(1, 19))}, 2)",
                               *OLD_ROW)
            await conn.execute(f"INSERT INTO journal VALUES ({', '.join(f'${i}' for i in range(1, 10))})", *OLD_ENTRY)
        finally:
            await conn.close()
        await _runs_on(url)
