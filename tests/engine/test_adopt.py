"""``engine.adopt``: an execution of a Python workflow handed to the decider of the same name, from
a state its caller folded from the journal, in one write: its version and state, its open
DELEGATE attempt withdrawn (a late answer finds nothing), its timers cleared, and what the
decider decides of ``Adopted`` applied. Refused when the journal moved on since the fold; a
second adoption changes nothing. On both backends."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import flowli
from flowli import Context, Registry
from flowli.domain import EntryKind, OperationRefused, UnknownTaskError
from flowli.engine.deciders import Adopted, Answered, Complete, Delegate, Event

from .conftest import FAST, wait_status

pytestmark = pytest.mark.integration


def evolve(state: dict[str, Any], event: Event) -> dict[str, Any]:
    if event.kind == "asked":
        return {**state, "attempt": event.data}
    return {**state, "answer": event.data}


def decide(state: dict[str, Any], command: Any) -> tuple[list[Event], list[Any]]:
    """Asks again what the workflow was asking (its next attempt); completes with the answer."""
    if isinstance(command, Adopted):
        attempt = state["attempt"] + 1
        return [Event("asked", attempt)], [Delegate("ask", "clerks", {"question": state["question"]}, attempt)]
    if isinstance(command, Answered) and command.attempt == state["attempt"]:
        return [Event("answered", command.value)], [Complete(command.value)]
    return [], []


def make_registry() -> Registry:
    registry = Registry()

    @registry.workflow("ask", version="1")
    async def ask(ctx: Context, question: str) -> Any:
        return await ctx.delegate("clerks", {"question": question}, timeout=timedelta(hours=1))

    registry.decider("ask", version="2", initial={"question": None, "attempt": 0, "answer": None},
                     evolve=evolve)(decide)
    return registry


async def test_an_execution_of_a_workflow_is_adopted_by_its_decider_once(db_url: str, tmp_path: Any) -> None:
    registry = make_registry()
    engine = await flowli.connect(db_url, registry, bucket=str(tmp_path / "bucket"), **FAST)
    async with engine, engine.worker():
        eid = await engine.start("ask", "why?", version="1")
        await wait_status(engine, eid, "suspended")
        [old] = await engine.tasks("clerks", eid)
        assert await engine.timers(eid)  # the delegate's deadline
        journal = await engine.journal(eid)
        last = journal[-1].seq or 0
        state = {"question": "why?", "attempt": 1, "answer": None}  # what a fold of its journal gives
        with pytest.raises(OperationRefused, match="journal moved on"):
            await engine.adopt(eid, "2", state, last - 1)
        assert (await engine.status(eid)).version == "1"

        assert await engine.adopt(eid, "2", state, last) is True
        record = await engine.status(eid)
        assert (record.version, record.status.value) == ("2", "suspended")
        assert (await engine.decider_state(eid)) == (1, {"question": "why?", "attempt": 2, "answer": None})
        assert await engine.timers(eid) == []
        with pytest.raises(UnknownTaskError):  # the workflow's attempt is withdrawn: its late answer finds nothing
            await engine.answer(old.id, "late")
        [new] = await engine.tasks("clerks", eid)
        assert new.attempt == 2 and new.frame is not None and new.frame["decider"] is True

        assert await engine.adopt(eid, "2", state, last) is False  # once
        await engine.answer(new.id, "because")
        assert await engine.result(eid, timeout=10) == "because"
        journal = await engine.journal(eid)
        assert sum(1 for e in journal if e.kind is EntryKind.EXECUTION_MIGRATED) == 1
        await engine.list(workflow="ask")  # this process's control-log appends are in (verify reads the log)
        checked = (await engine.verify(registry, workflow="ask")).checked
        assert [c.difference for c in checked] == [None]
