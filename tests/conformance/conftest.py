"""The conformance suite of the Store protocol: one ``store`` fixture over every backend.

A backend joins the suite by adding one :class:`Backend` to :data:`BACKENDS`: an async context
manager that, given the test's ``tmp_path``, yields the URL of a fresh, empty database (and drops
it on exit). Every store of a test is opened through :func:`flowli.testing.open_store`, so the
tests know no backend module.

The helpers below build records with explicit instants: a store never reads the clock, every
call is given ``now``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from flowli.domain import (
    Actor,
    Code,
    Entry,
    EntryKind,
    ExecutionRecord,
    Provenance,
    Site,
    Status,
    Task,
    TaskKind,
    task_id,
)
from flowli.store import Fence, Intent, NewExecution, Store, Write, fits
from flowli.testing import open_store

from ..pg import fresh_schema

# ---- backends ------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def sqlite_file(tmp_path: Path) -> AsyncIterator[str]:
    yield f"sqlite:///{tmp_path / 'flowli.db'}"  # tmp_path is absolute: sqlite:////tmp/...


@contextlib.asynccontextmanager
async def sqlite_memory(tmp_path: Path) -> AsyncIterator[str]:
    yield "sqlite://:memory:"


@dataclass(frozen=True)
class Backend:
    name: str
    database: Callable[[Path], contextlib.AbstractAsyncContextManager[str]]
    """Yields the URL of a fresh database for one test."""
    shared: bool
    """Two stores opened on the URL see one database (false for an in-memory database)."""
    generic: bool = False
    """The writes of the ``store`` fixture carry no intent: every one takes the generic path."""
    announces: bool = False
    """Its store puts lifecycle entries on the control log in the writes that append them
    (``Store.announces_in_write``); else they wait for the second append."""


BACKENDS = [
    Backend("sqlite-file", sqlite_file, shared=True, announces=True),
    Backend("sqlite-memory", sqlite_memory, shared=False, announces=True),
    Backend("postgresql", fresh_schema, shared=True),
    Backend("postgresql-generic", fresh_schema, shared=True, generic=True),
]


@pytest.fixture(params=BACKENDS, ids=lambda b: b.name)
def backend(request: pytest.FixtureRequest) -> Backend:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
async def store_url(backend: Backend, tmp_path: Path) -> AsyncIterator[str]:
    async with backend.database(tmp_path) as url:
        yield url


INTENTS = (Intent.START, Intent.SIGNAL, Intent.FIRE, Intent.APPEND, Intent.FENCED, Intent.ANNOUNCE)


def intent_of(w: Write) -> Intent | None:
    """The intent the engine gives a write of this shape: the first one it fits (a plain append
    before a fenced write, as the engine marks them)."""
    return next((intent for intent in INTENTS if fits(intent, w)), None)


class Intended:
    """A store whose writes carry the intent the engine would give them, so that a backend's
    one-statement forms run (or, ``generic``, carry none, so that every write takes the generic
    path). Everything else goes to the store as it is."""

    def __init__(self, store: Store, generic: bool):
        self.wrapped = store
        self.generic = generic

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)

    async def write(self, w: Write, now: datetime) -> Any:
        intent = None if self.generic else (w.intent or intent_of(w))
        return await self.wrapped.write(dataclasses.replace(w, intent=intent), now)


@pytest.fixture(params=[b for b in BACKENDS if b.shared and not b.generic], ids=lambda b: b.name)
async def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """The URL of a database that several stores (and processes) share."""
    async with request.param.database(tmp_path) as url:
        yield url


@pytest.fixture
async def store(store_url: str, backend: Backend) -> AsyncIterator[Store]:
    async with _opened(store_url, backend) as s:
        yield s


@contextlib.asynccontextmanager
async def _opened(url: str, backend: Backend) -> AsyncIterator[Store]:
    s = open_store(url)
    await s.open()
    try:
        yield Intended(s, backend.generic)  # type: ignore[misc]
    finally:
        await s.close()


@pytest.fixture(params=[b for b in BACKENDS if not b.announces], ids=lambda b: b.name)
async def second_append_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A store of a backend whose lifecycle entries wait for the second append (``unannounced``)."""
    async with request.param.database(tmp_path) as url, _opened(url, request.param) as s:
        yield s


@pytest.fixture(params=[b for b in BACKENDS if b.announces], ids=lambda b: b.name)
async def in_write_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A store of a backend whose writes put their lifecycle entries on the control log."""
    async with request.param.database(tmp_path) as url, _opened(url, request.param) as s:
        yield s


# ---- instants ------------------------------------------------------------------------------

T0 = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)
TTL = timedelta(seconds=30)


def at(seconds: float) -> datetime:
    """The instant ``seconds`` after T0."""
    return T0 + timedelta(seconds=seconds)


# ---- records -------------------------------------------------------------------------------

_ids = itertools.count(1)


def new_id(prefix: str = "e") -> str:
    return f"{prefix}-{next(_ids):06d}"


def reset_ids() -> None:
    """Number the ids from 1 again: two runs of one test then write the same eids."""
    global _ids
    _ids = itertools.count(1)


def prov(
    actor: str = "w1",
    *,
    kind: str = "worker",
    when: datetime = T0,
    epoch: int | None = None,
    on_behalf_of: str | None = None,
    attempt: int | None = None,
) -> Provenance:
    return Provenance(
        actor=Actor(kind, actor),  # type: ignore[arg-type]
        site=Site(host="host-a", pid=4242, worker=actor, instance="i-1", region="eu", epoch=epoch),
        code=Code(workflow="wf", version="1", frame_kind="step", frame_name="fetch", ref="app.mod:fetch"),
        at=when,
        attempt=attempt,
        on_behalf_of=on_behalf_of,
    )


def record(
    eid: str, *, queue: str = "default", status: Status = Status.PENDING, now: datetime = T0, **fields: Any
) -> ExecutionRecord:
    return ExecutionRecord(
        eid=eid,
        workflow="wf",
        version="1",
        status=status,
        args=[1, "two"],
        queue=queue,
        created_at=now,
        updated_at=now,
        **fields,
    )


def entry(
    eid: str,
    kind: EntryKind = EntryKind.FRAME_STARTED,
    fid: str | None = "root/fetch#0",
    *,
    when: datetime = T0,
    epoch: int | None = None,
    **fields: Any,
) -> Entry:
    return Entry(eid=eid, kind=kind, provenance=prov(when=when, epoch=epoch), fid=fid, **fields)


def task(
    tid: str | None = None,
    *,
    kind: TaskKind = TaskKind.RESUME,
    queue: str = "default",
    eid: str | None = None,
    visible_at: datetime = T0,
    payload: Any = None,
) -> Task:
    return Task(
        id=tid or new_id("t"),
        kind=kind,
        queue=queue,
        eid=eid,
        payload=payload,
        provenance=prov(when=visible_at),
        visible_at=visible_at,
    )


def new_execution(eid: str | None = None, *, queue: str = "default", now: datetime = T0, **fields: Any) -> NewExecution:
    """A pending execution with its execution.started entry and its START task."""
    eid = eid or new_id()
    return NewExecution(
        record=record(eid, queue=queue, now=now, **fields),
        entry=entry(eid, EntryKind.EXECUTION_STARTED, "root", when=now, value={"args": [1, "two"]}),
        task=task(task_id(TaskKind.START, eid), kind=TaskKind.START, queue=queue, eid=eid, visible_at=now),
    )


async def create(store: Store, eid: str | None = None, *, queue: str = "default", now: datetime = T0) -> str:
    """Create a pending execution; return its eid."""
    new = new_execution(eid, queue=queue, now=now)
    result = await store.write(Write(executions=[new]), now)
    assert result.created == [True]
    return new.record.eid


async def started(
    store: Store, owner: str = "w1", *, queue: str = "default", now: datetime = T0, ttl: timedelta = TTL
) -> tuple[str, Fence]:
    """Create an execution and acquire its lease; return the eid and the fence of the lease."""
    eid = await create(store, queue=queue, now=now)
    acquired = await store.acquire(eid, owner, ttl, now, ack=task_id(TaskKind.START, eid))
    assert acquired.epoch is not None
    return eid, Fence(eid, owner, acquired.epoch)


async def snapshot(store: Store, eids: Iterable[str] = (), channels: Iterable[str] = ()) -> dict[str, Any]:
    """Everything a write could change for these executions and channels, and the control log
    (its entries of these executions, when given: where a store announces in its writes, the
    other executions' writes add theirs): for "nothing was applied" checks."""
    eids, channels = list(eids), list(channels)
    log = await store.read_control_log()
    return {
        "executions": {eid: await store.read_execution(eid) for eid in eids},
        "journals": {eid: await store.read_journal(eid) for eid in eids},
        "ready_tasks": {eid: await store.read_tasks(eid=eid) for eid in eids},
        "all_tasks": {eid: await store.read_tasks(eid=eid, include_acked=True) for eid in eids},
        "timers": {eid: await store.read_timers(eid) for eid in eids},
        "messages": {ch: await store.read_messages(ch) for ch in channels},
        "waiters": {ch: await store.waiters(ch) for ch in channels},
        "control_log": [e for e in log if e.eid in eids] if eids else log,
    }


async def made_known(store: Store, before: datetime, limit: int = 1000) -> list[Entry]:
    """The lifecycle entries the writes so far appended, as journal entries (``seq``: the
    journal's), on their way to the control log: where a store announces in its writes, those on
    the control log; else those that wait for the second append (``unannounced(before, limit)``)."""
    if store.announces_in_write:
        log = [e for e in await store.read_control_log(limit=limit) if e.kind.lifecycle]
        return [dataclasses.replace(e, seq=e.journal_seq) for e in log]
    return await store.unannounced(before, limit)
