from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import pytest

import flowli
from flowli import Registry
from flowli.testing import Clock

from ..pg import fresh_schema

FAST = {
    "lease_ttl": timedelta(seconds=5),
    "poll_interval": 0.05,
    "sweep_interval": 0.05,
    "repair_grace": timedelta(0),
    "grace": 2.0,
}


@pytest.fixture(params=["sqlite", "postgresql"])
async def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> AsyncIterator[str]:
    """Every engine test runs on both backends: a SQLite file, and a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/flowli.db"
    else:
        async with fresh_schema() as url:
            yield url


@pytest.fixture
def open_engine(db_url: str, tmp_path: Any) -> Callable[..., contextlib.AbstractAsyncContextManager[flowli.Engine]]:
    """``async with open_engine(registry, clock=None, worker=True) as engine``: an engine on a real file."""

    @contextlib.asynccontextmanager
    async def make(
        registry: Registry, *, clock: Clock | None = None, worker: bool = True, **tuning: Any
    ) -> AsyncIterator[flowli.Engine]:
        tuning.setdefault("bucket", str(tmp_path / "bucket"))
        engine = await flowli.connect(db_url, registry, clock=clock, **{**FAST, **tuning})
        async with engine:
            if worker:
                async with engine.worker(concurrency=16):
                    yield engine
            else:
                yield engine

    return make


async def wait_status(engine: flowli.Engine, eid: str, status: str, timeout: float = 10.0) -> None:
    """Poll until the execution has ``status`` (bounded)."""
    import asyncio

    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        if (await engine.status(eid)).status == status:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"execution {eid} is {(await engine.status(eid)).status}, not {status}, after {timeout} s")


async def wait_idle(engine: flowli.Engine, timeout: float = 10.0) -> None:
    """Poll until no activation runs in this process (a suspension ends with its control-log append)."""
    import asyncio

    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while engine.running() and loop.time() < end:
        await asyncio.sleep(0.01)


def kinds(journal: list[Any], fid: str | None = None) -> list[str]:
    return [str(e.kind) for e in journal if fid is None or e.fid == fid]


@pytest.fixture(autouse=True)
async def _dump_tasks_if_stuck():
    """A test that hangs prints the stack of every asyncio task before pytest-timeout ends it."""
    import asyncio
    import sys

    async def watchdog() -> None:
        await asyncio.sleep(15)
        print("\n=== asyncio tasks of a stuck test ===", file=sys.stderr)
        for task in asyncio.all_tasks():
            task.print_stack(file=sys.stderr)

    dog = asyncio.ensure_future(watchdog())
    yield
    dog.cancel()
