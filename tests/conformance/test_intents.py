"""The differential test of the write paths: every conformance test of writes runs twice on
PostgreSQL, once with each write carrying its intent (so the store's one-statement forms apply
it) and once with none (every write takes the generic path of ``_apply``), and the two databases
must hold the same rows, table by table.

The eids of a conformance test come from a counter, and every instant is given, so two runs of
one test write the same values: any difference is a difference of the paths."""

from __future__ import annotations

import inspect
from typing import Any

import asyncpg
import pytest

from flowli.store import Intent, Write
from flowli.testing import open_store

from ..pg import fresh_schema
from ..rows import dump
from . import (
    conftest,
    test_acquire_many,
    test_batched_writes,
    test_executions,
    test_fenced_writes,
    test_fencing,
    test_journal,
    test_messages,
    test_tasks,
    test_timers,
    test_waiters,
    test_wake_check,
)

pytestmark = pytest.mark.integration

MODULES = [test_batched_writes, test_fenced_writes, test_fencing, test_journal, test_messages, test_tasks,
           test_timers, test_wake_check, test_waiters, test_executions, test_acquire_many]


def _cases() -> list[Any]:
    """Every conformance test of these modules that takes only the ``store`` fixture, but those
    of concurrent dequeues and acquisitions: which caller wins is a race, on either path."""
    found = []
    for module in MODULES:
        for name, fn in sorted(vars(module).items()):
            if name.startswith("test_") and inspect.iscoroutinefunction(fn) and \
                    list(inspect.signature(fn).parameters) == ["store"] and not hasattr(fn, "pytestmark") \
                    and not name.startswith("test_concurrent_"):
                found.append(pytest.param(fn, id=f"{module.__name__.rsplit('.', 1)[-1]}::{name}"))
    return found


async def _dump(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, sorted; the control log without its seqs (writes gathered on
    different writers take them in the order their commits come, which two runs need not share),
    and the order of each execution's entries in it on its own."""
    found = await dump(url, control_log_seqs=False)
    base, _, schema = url.partition("?schema=")
    conn = await asyncpg.connect(base)
    try:
        rows = await conn.fetch(f'SELECT eid, journal_seq FROM "{schema}".control_log ORDER BY seq')
    finally:
        await conn.close()
    found["control_log order"] = [tuple(r) for r in sorted(rows, key=lambda r: r["eid"])]
    # the same for the messages of a channel that gathered writes send to (their seqs follow the
    # commits): each channel's seqs run 1..n, and the messages compare without them
    seqs: dict[str, list[int]] = {}
    for channel, seq, *_ in found["messages"]:
        seqs.setdefault(channel, []).append(seq)
    found["message seqs"] = sorted((ch, sorted(got) == list(range(1, len(got) + 1))) for ch, got in seqs.items())
    found["messages"] = sorted(((row[0], *row[2:]) for row in found["messages"]), key=repr)
    return found


class _Counting(conftest.Intended):
    """Counts the writes that carry each intent (the fast paths the run exercised)."""

    def __init__(self, store: Any, generic: bool, seen: dict[Intent | None, int]):
        super().__init__(store, generic)
        self.seen = seen

    async def write(self, w: Write, now: Any) -> Any:
        intent = None if self.generic else (w.intent or conftest.intent_of(w))
        self.seen[intent] = self.seen.get(intent, 0) + 1
        return await super().write(w, now)


async def _run(case: Any, generic: bool, seen: dict[Intent | None, int]) -> dict[str, list[tuple[Any, ...]]]:
    conftest.reset_ids()  # the same eids in both runs
    async with fresh_schema() as url:
        store = open_store(url)
        await store.open()
        try:
            try:
                await case(_Counting(store, generic, seen))
            except AssertionError as failed:  # the conformance suite reports it on its own
                raise AssertionError(f"the conformance test failed on the {'generic' if generic else 'fast'} path") \
                    from failed
        finally:
            await store.close()
        return await _dump(url)


CASES = _cases()
FAST_SEEN: dict[Intent | None, int] = {}
RAN: set[str] = set()


@pytest.mark.parametrize("case", CASES)
async def test_the_fast_and_the_generic_path_leave_the_same_rows(case):
    fast = await _run(case, False, FAST_SEEN)
    generic = await _run(case, True, {})
    RAN.add(case.__qualname__)
    assert fast.keys() == generic.keys()
    for table in fast:
        assert fast[table] == generic[table], f"table {table} differs between the fast and the generic path"


async def test_the_cases_write_every_intent_that_has_a_form_of_its_own():
    """The differential test is only as good as its cases: together they must write each intent
    (the cases that did not run in this session run here, on the fast path alone)."""
    assert len(CASES) > 40
    for param in CASES:
        (case,) = param.values
        if case.__qualname__ not in RAN:
            await _run(case, False, FAST_SEEN)
    assert {Intent.START, Intent.SIGNAL, Intent.FIRE, Intent.APPEND, Intent.FENCED, Intent.ANNOUNCE} <= set(FAST_SEEN), \
        FAST_SEEN
