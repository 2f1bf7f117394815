"""The schema: open creates or upgrades it, idempotently; the data is shared by every store and
process that opens the same database."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap

import pytest

from flowli.domain import EntryKind
from flowli.store import NewMessage, Write
from flowli.testing import open_store

from .conftest import T0, create, prov


@pytest.mark.integration
async def test_a_fresh_store_is_empty(store):
    assert await store.read_control_log() == []
    assert await store.read_tasks(include_acked=True) == []
    assert await store.read_timers() == []
    assert await store.next_wake(T0) is None
    assert await store.read_execution("nope") is None
    assert await store.read_journal("nope") == []


@pytest.mark.integration
async def test_open_twice_on_one_database_keeps_the_data(shared_url):
    first = open_store(shared_url)
    await first.open()
    eid = await create(first)
    second = open_store(shared_url)
    await second.open()  # migrates again while the first is open: a no-op
    try:
        assert [e.kind for e in await second.read_journal(eid)] == [EntryKind.EXECUTION_STARTED]
    finally:
        await second.close()
        await first.close()

    third = open_store(shared_url)
    await third.open()  # and again, on a closed database
    try:
        record = await third.read_execution(eid)
        assert record is not None and record.eid == eid
        assert await create(third) != eid  # still writable
    finally:
        await third.close()


@pytest.mark.integration
async def test_a_second_store_sees_the_writes_of_the_first(shared_url):
    a, b = open_store(shared_url), open_store(shared_url)
    await a.open()
    await b.open()
    try:
        eid = await create(a)
        assert (await b.read_execution(eid)) is not None
        await b.write(Write(messages=[NewMessage("ch", {"n": 1}, prov())]), T0)
        assert [m.payload for m in await a.read_messages("ch")] == [{"n": 1}]
    finally:
        await a.close()
        await b.close()


_CHILD = textwrap.dedent(
    """
    import asyncio, json, sys
    from datetime import datetime
    from flowli.testing import open_store
    from flowli.domain import Actor, Code, Provenance, Site
    from flowli.store import NewMessage, Write

    async def main(url, eid):
        store = open_store(url)
        await store.open()
        try:
            journal = await store.read_journal(eid)
            now = datetime.fromisoformat("2030-01-01T12:00:00+00:00")
            p = Provenance(Actor("system", "child"), Site(), Code(), now)
            await store.write(Write(messages=[NewMessage("from-child", "hello", p)]), now)
            print(json.dumps([e.kind.value for e in journal]))
        finally:
            await store.close()

    asyncio.run(main(*sys.argv[1:]))
    """
)


@pytest.mark.e2e
async def test_a_second_process_sees_the_data_and_writes_to_it(shared_url):
    store = open_store(shared_url)
    await store.open()
    try:
        eid = await create(store)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _CHILD,
            shared_url,
            eid,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
        assert proc.returncode == 0, err.decode()
        assert json.loads(out) == ["execution.started"]
        messages = await store.read_messages("from-child")
        assert [(m.seq, m.payload) for m in messages] == [(1, "hello")]
    finally:
        await store.close()
