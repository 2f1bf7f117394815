"""The PostgreSQL store applies the writes that the engine gives an intent by their one-statement
forms, never by the generic path; the control-log appends of executions of several writers are
split per writer, and each part keeps its intent (a part that lost it ran the generic path: one
statement per entry and per counter increment, which cost W1 a third of its rate)."""

from __future__ import annotations

from typing import Any

import pytest

import flowli
from flowli import Context, Registry
from flowli.store import postgres
from flowli.testing import drain

from .pg import fresh_schema

pytestmark = pytest.mark.integration

registry = Registry()


def step(i: int) -> int:
    return i


@registry.workflow("ten")
async def ten(ctx: Context) -> int:
    for i in range(10):
        await ctx.step(step, i)
    return 10


async def test_a_run_of_plain_executions_takes_no_generic_write(monkeypatch: pytest.MonkeyPatch) -> None:
    generic: list[Any] = []
    real = postgres.apply_write

    def recorded(w: Any, now: Any) -> Any:
        generic.append(w)
        return real(w, now)

    monkeypatch.setattr(postgres, "apply_write", recorded)
    async with fresh_schema() as url:
        engine = await flowli.connect(url, registry)
        async with engine, engine.worker(concurrency=64):
            eids = [await engine.start("ten") for _ in range(60)]
            for eid in eids:
                assert await engine.result(eid, timeout=60) == 10
            await drain(engine)
            announced = await engine.control_log(0, 10_000)
    assert {e.eid for e in announced} >= set(eids)  # their lifecycle reached the control log, and no
    # write of them went the generic way
    assert [sorted(f for f in ("entries", "announcements", "executions", "tasks") if getattr(w, f)) for w in generic] == []
