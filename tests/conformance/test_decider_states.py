"""The state of a decider's execution (``Write.advance``): a compare-and-set on its version in
the write's own transaction, on every backend. The first advance creates it (version 1); each
next one moves it from the version read; a write that advances from a version not stored any
more is refused with StaleState and changes nothing at all, also when it is gathered with
others (a batch of a group commit); retention deletes it with its execution."""

from __future__ import annotations

import asyncio

import pytest

from flowli.domain import TERMINAL, EntryKind, StaleState, Status, TaskKind, task_id
from flowli.store import Advance, StatusChange, Write

from .conftest import at, create, entry, snapshot, task

pytestmark = pytest.mark.integration

NOW = at(20)


def command(eid: str, version: int, state: object, n: int) -> Write:
    """A command's write as the engine makes it: an event entry, a task, the state's advance."""
    return Write(entries=[entry(eid, EntryKind.EVENT, "decider", when=NOW, value={"event": "x", "data": n})],
                 tasks=[task(task_id(TaskKind.DELEGATE, eid, f"decider/w@{n}"), kind=TaskKind.DELEGATE, eid=eid,
                             visible_at=NOW)],
                 advance=Advance(eid, version, state))


async def test_the_state_is_created_then_advanced_version_by_version(store):
    eid = await create(store)
    assert await store.read_state(eid) is None
    await store.write(command(eid, 1, {"n": 1}, 1), NOW)
    assert await store.read_state(eid) == (1, {"n": 1})
    await store.write(command(eid, 2, {"n": 2, "list": [1, "two"]}, 2), NOW)
    assert await store.read_state(eid) == (2, {"n": 2, "list": [1, "two"]})


async def test_an_advance_from_a_stale_version_is_refused_and_writes_nothing(store):
    eid = await create(store)
    await store.write(command(eid, 1, {"n": 1}, 1), NOW)
    before = await snapshot(store, [eid])
    for stale in (command(eid, 1, {"n": "again"}, 9), command(eid, 3, {"n": "ahead"}, 9)):
        with pytest.raises(StaleState):
            await store.write(stale, NOW)
    assert await snapshot(store, [eid]) == before
    assert await store.read_state(eid) == (1, {"n": 1})


async def test_of_gathered_advances_from_one_version_exactly_one_wins(store):
    eids = [await create(store) for _ in range(3)]
    for eid in eids:
        await store.write(command(eid, 1, 0, 0), NOW)
    writes = [command(eid, 2, i, i) for eid in eids for i in (1, 2)]  # two racing commands per execution
    outcomes = await asyncio.gather(*(store.write(w, NOW) for w in writes), return_exceptions=True)
    for k, eid in enumerate(eids):
        pair = outcomes[2 * k: 2 * k + 2]
        [won] = [i + 1 for i, o in enumerate(pair) if not isinstance(o, BaseException)]
        assert [type(o) for o in pair if isinstance(o, BaseException)] == [StaleState]
        assert await store.read_state(eid) == (2, won)
        journal = await store.read_journal(eid)
        assert [e.value["data"] for e in journal if e.kind is EntryKind.EVENT] == [0, won]
        assert sorted(t.id for t in await store.read_tasks(eid=eid) if t.kind is TaskKind.DELEGATE) == \
            sorted(task_id(TaskKind.DELEGATE, eid, f"decider/w@{i}") for i in (0, won))


async def test_retention_deletes_the_state_with_its_execution(store):
    eid = await create(store)
    await store.write(command(eid, 1, {"n": 1}, 1), NOW)
    await store.write(Write(status=StatusChange(eid, Status.COMPLETED)), NOW)
    await store.write(Write(expect=(eid, TERMINAL), delete_executions=[eid]), NOW)
    assert await store.read_state(eid) is None and await store.read_execution(eid) is None
