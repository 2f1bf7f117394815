"""A real ``flowli serve`` on loopback for the HTTP, dashboard and MCP tests, and the applications,
keys and users a test makes on it.

One server per backend serves a whole session (per xdist worker: each has its own session): it
loads ``tests.dashboard.app:registry`` (the catalog's test types and the expense review), with a
3-second lease, and writes the test types' effects to one file of the session. A test gets fresh
applications and users of its own, made in process on the server's database (no CLI process), with
names no other test uses (:class:`Names`), so what one test sees of its application is its own.
A test that needs a server of its own (a crash, a restart, other flags) starts one with
:func:`serving` and says why in a comment.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flowli import Registry, connect
from flowli.pipelines import Applications

from . import forked
from .pg import fresh_schema, server_url

APP = "tests.dashboard.app:registry"
"""The workflow types a shared server knows: the catalog's test types and the expense review."""
PASSWORD = "correct horse battery"
"""The password of every dashboard user a test makes."""
LEASE_TTL = 3.0


def flowli(db: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``flowli --db DB ARGS``, as a process (for the tests of the CLI itself)."""
    return forked.run(["--db", db, *args], input=stdin)


def new_app(db: str, name: str) -> tuple[dict[str, Any], str]:
    """``flowli apps create NAME`` as a process: the application and its first key."""
    done = flowli(db, "apps", "create", name, "--json")
    assert done.returncode == 0, done.stderr
    made = json.loads(done.stdout)
    return made["application"], made["apiKey"]


def new_key(db: str, app: str, role: str = "operator", name: str | None = None) -> str:
    """``flowli keys create APP`` as a process."""
    done = flowli(db, "keys", "create", app, "--role", role, "--json", *(["--name", name] if name else []))
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["apiKey"])


class Names:
    """Names of one test, unique in the session: ``names("billing")`` is ``billing-3f9a1c``, the
    same each time it is asked within the test; ``names.email("ann")`` is ``ann-3f9a1c@example.com``."""

    def __init__(self) -> None:
        self.tag = uuid.uuid4().hex[:6]

    def __call__(self, name: str) -> str:
        return f"{name}-{self.tag}"

    def email(self, user: str) -> str:
        return f"{user}-{self.tag}@example.com"


@dataclass
class Service:
    db: str
    url: str = ""
    process: subprocess.Popen[str] | None = None
    log: Path | None = None
    extra: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    def start(self, lease_ttl: float = 30.0) -> Service:
        assert self.log is not None
        out = open(self.log, "a")  # noqa: SIM115
        self.process = subprocess.Popen([*forked.FLOWLI, "--db", self.db, "serve", "--port", "0", "--lease-ttl", str(lease_ttl),
                                         *self.extra], stdout=subprocess.PIPE, stderr=out, text=True,
                                        env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env})
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

    async def application(self, name: str, *keys: tuple[str, str]) -> tuple[dict[str, Any], str, list[str]]:
        """A new application ``name`` on the server's database: see :func:`application`."""
        return await application(self.db, name, *keys)

    async def key(self, app: str, role: str = "operator", name: str | None = None) -> str:
        """A new key of application ``app`` with ``role``."""
        async with clerk(self.db) as apps:
            return str((await apps.create_key(app, name, role))["apiKey"])


@contextlib.asynccontextmanager
async def clerk(db: str) -> AsyncIterator[Applications]:
    """Applications, keys and users of the database ``db``, in this process (no CLI process)."""
    engine = await connect(db, Registry())
    async with engine:
        yield Applications(engine)


async def application(db: str, name: str, *keys: tuple[str, str]) -> tuple[dict[str, Any], str, list[str]]:
    """A new application ``name`` (its record and admin key), and a key per ``(role, key name)``."""
    async with clerk(db) as apps:
        made, admin = await apps.create(name)
        more = [(await apps.create_key(name, key_name, role))["apiKey"] for role, key_name in keys]
    return made, admin, more


class Servers:
    """The session's shared servers, one per backend, started on first use and stopped at the end."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.effects = folder / "effects"
        self.running: dict[str, Service] = {}
        self.schemas: list[str] = []

    def get(self, backend: str) -> Service:
        if backend not in self.running:
            if backend == "sqlite":
                db = f"sqlite:///{self.folder / 'flowli.db'}"
            else:
                db = _schema_made(self)
            svc = Service(db, log=self.folder / f"serve-{backend}.log", extra=["--app", APP],
                          env={"FLOWLI_TEST_EFFECTS": str(self.effects)})
            self.running[backend] = svc.start(lease_ttl=LEASE_TTL)
        return self.running[backend]

    def stop(self) -> None:
        for svc in self.running.values():
            svc.stop()
        for url in self.schemas:
            asyncio.run(_drop_schema(url))


def _schema_made(servers: Servers) -> str:
    """A new PostgreSQL schema for a shared server, dropped when the session ends."""
    url = server_url()  # skips (or fails, with the variable set) without a server
    schema = f"t_{uuid.uuid4().hex[:16]}"

    async def make() -> None:
        import asyncpg

        conn = await asyncpg.connect(url)
        try:
            await conn.execute(f'CREATE SCHEMA "{schema}"')
        finally:
            await conn.close()

    asyncio.run(make())
    made = f"{url}{'&' if '?' in url else '?'}schema={schema}"
    servers.schemas.append(made)
    return made


async def _drop_schema(url: str) -> None:
    import asyncpg

    base, _, query = url.partition("?")
    schema = dict(p.split("=", 1) for p in query.split("&"))["schema"]
    conn = await asyncpg.connect(base)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


@contextlib.contextmanager
def log_checked(svc: Service) -> Iterator[None]:
    """The block writes no traceback to the server's log (what other tests wrote before is theirs)."""
    start = len(svc.logs())
    yield
    assert "Traceback" not in svc.logs()[start:], svc.logs()[start:][-4000:]


@contextlib.asynccontextmanager
async def serving(backend: str, tmp_path: Path, *extra: str) -> AsyncIterator[Service]:
    """A server of the test's own: ``flowli serve ...extra`` on a fresh SQLite file or a fresh
    PostgreSQL schema, stopped after."""
    async with contextlib.AsyncExitStack() as stack:
        if backend == "sqlite":
            db = f"sqlite:///{tmp_path / 'flowli.db'}"
        else:
            db = await stack.enter_async_context(fresh_schema())
        svc = Service(db, log=tmp_path / "serve.log", extra=list(extra))
        svc.start(lease_ttl=LEASE_TTL)
        try:
            yield svc
        finally:
            svc.stop()


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
