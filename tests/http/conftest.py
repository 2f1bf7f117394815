"""A real ``flowli serve`` on loopback, on a fresh database, and an application with its keys."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ..pg import fresh_schema

FLOWLI = [sys.executable, "-m", "flowli.cli"]


def flowli(db: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*FLOWLI, "--db", db, *args], capture_output=True, text=True, input=stdin, timeout=60,
                          check=False)


def new_app(db: str, name: str) -> tuple[dict[str, Any], str]:
    done = flowli(db, "apps", "create", name, "--json")
    assert done.returncode == 0, done.stderr
    made = json.loads(done.stdout)
    return made["application"], made["apiKey"]


def new_key(db: str, app: str, role: str = "operator", name: str | None = None) -> str:
    done = flowli(db, "keys", "create", app, "--role", role, "--json", *(["--name", name] if name else []))
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["apiKey"])


@dataclass
class Service:
    db: str
    url: str = ""
    process: subprocess.Popen[str] | None = None
    log: Path | None = None
    extra: list[str] = field(default_factory=list)

    def start(self, lease_ttl: float = 30.0) -> Service:
        assert self.log is not None
        out = open(self.log, "a")  # noqa: SIM115
        self.process = subprocess.Popen([*FLOWLI, "--db", self.db, "serve", "--port", "0", "--lease-ttl", str(lease_ttl),
                                         *self.extra], stdout=subprocess.PIPE, stderr=out, text=True,
                                        env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert self.process.stdout is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if line.startswith("listening on "):
                self.url = line.split("listening on ", 1)[1].strip()
                return self
            if not line and self.process.poll() is not None:
                break
        raise AssertionError(f"flowli serve did not start: {self.log.read_text()[-2000:]}")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def logs(self) -> str:
        return self.log.read_text() if self.log and self.log.exists() else ""


@contextlib.asynccontextmanager
async def serving(backend: str, tmp_path: Path, *extra: str) -> AsyncIterator[Service]:
    """``flowli serve ...extra`` on a fresh SQLite file or a fresh PostgreSQL schema, stopped after."""
    async with contextlib.AsyncExitStack() as stack:
        if backend == "sqlite":
            db = f"sqlite:///{tmp_path / 'flowli.db'}"
        else:
            db = await stack.enter_async_context(fresh_schema())
        svc = Service(db, log=tmp_path / "serve.log", extra=list(extra))
        svc.start(lease_ttl=3.0)
        try:
            yield svc
        finally:
            svc.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
async def service(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Service]:
    """The service on a fresh SQLite file, and on a fresh PostgreSQL schema."""
    async with serving(request.param, tmp_path) as svc:
        yield svc


@pytest.fixture
def billing(service: Service) -> tuple[dict[str, Any], str]:
    return new_app(service.db, "billing")


TABLES = ("items", "journal", "executions", "tasks", "messages", "control_log")


async def rows(db: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Rows of a statement on the service's database (``?`` placeholders), SQLite or PostgreSQL;
    a change it makes is committed."""
    if db.startswith("sqlite:///"):
        import sqlite3

        with contextlib.closing(sqlite3.connect(db.removeprefix("sqlite:///"))) as conn:
            found = [tuple(r) for r in conn.execute(sql, params).fetchall()]
            conn.commit()  # a change a test makes (an UPDATE) is the service's to see
            return found
    import re
    from urllib.parse import parse_qs, urlparse

    import asyncpg

    parsed = urlparse(db)
    schema = parse_qs(parsed.query)["schema"][0]
    conn = await asyncpg.connect(db.split("?", 1)[0])
    try:
        await conn.execute(f'SET search_path TO "{schema}"')
        n = iter(range(1, 1000))
        return [tuple(r) for r in await conn.fetch(re.sub(r"\?", lambda _: f"${next(n)}", sql), *params)]
    finally:
        await conn.close()


async def everything(db: str) -> str:
    """Every row of the tables that could hold a secret, as text."""
    out = []
    for table in TABLES:
        out += [str(r) for r in await rows(db, f"SELECT * FROM {table}")]
    return "\n".join(out)
