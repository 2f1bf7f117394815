"""A decider's failed execution is retried with the command Retried (reopened in its write, after
an ``execution.retried`` entry); a workflow turned decider keeps its workflow versions for the
executions they started. On both backends."""

from __future__ import annotations

from typing import Any

import pytest

import flowli
from flowli import Context, Registry
from flowli.domain import EntryKind, ExecutionStateError, RegistrationError
from flowli.engine.deciders import Complete, Event, Fail, Retried, Start

from .conftest import FAST, wait_status

pytestmark = pytest.mark.integration


def evolve(state: dict[str, Any], event: Event) -> dict[str, Any]:
    return {**state, "tries": state["tries"] + (event.kind == "tried"), "last": event.data}


def decide(state: dict[str, Any], command: Any) -> tuple[list[Event], list[Any]]:
    """Fails on its start; a retry completes it, naming who retried."""
    if isinstance(command, Start):
        return [Event("tried", command.input)], [Fail("the first try fails")]
    if isinstance(command, Retried):
        return [Event("tried", command.by)], [Complete({"tries": state["tries"] + 1, "by": command.by})]
    return [], []


def make_registry() -> Registry:
    registry = Registry()

    @registry.workflow("flaky", version="1")
    async def flaky(ctx: Context, x: Any) -> Any:
        return {"workflow": x}

    registry.decider("flaky", version="2", initial={"tries": 0, "last": None}, evolve=evolve)(decide)
    return registry


async def test_a_failed_decider_is_retried_by_the_command_retried(db_url: str, tmp_path: Any) -> None:
    registry = make_registry()
    engine = await flowli.connect(db_url, registry, bucket=str(tmp_path / "bucket"), **FAST)
    async with engine, engine.worker():
        eid = await engine.start("flaky", "go")
        await wait_status(engine, eid, "failed")
        assert await engine.retry(eid, by="olga@example.com", reason="fixed") is None
        assert await engine.result(eid, timeout=10) == {"tries": 2, "by": "human:olga@example.com"}
        journal = await engine.journal(eid)
        kinds = [e.kind for e in journal]
        assert kinds.index(EntryKind.EXECUTION_FAILED) < kinds.index(EntryKind.EXECUTION_RETRIED) \
            < kinds.index(EntryKind.EXECUTION_COMPLETED)
        retried = next(e for e in journal if e.kind is EntryKind.EXECUTION_RETRIED)
        assert retried.value["reason"] == "fixed" and retried.value["error"]["message"] == "the first try fails"
        decider = registry.decider_of("flaky")
        assert decider is not None
        events = [Event(e.value["event"], e.value["data"]) for e in journal if e.kind is EntryKind.EVENT]
        assert decider.fold(events) == (await engine.decider_state(eid))[1]
        with pytest.raises(ExecutionStateError):  # only a failed execution is retried
            await engine.retry(eid)


async def test_a_name_keeps_its_workflow_versions_beside_its_decider_versions(db_url: str, tmp_path: Any) -> None:
    registry = make_registry()
    assert registry.decider_of("flaky", "1") is None and registry.decider_of("flaky") is registry.decider_of("flaky", "2")
    with pytest.raises(RegistrationError, match="a workflow has that name and version already"):
        registry.decider("flaky", version="1", initial={}, evolve=evolve)(decide)

    async def other(ctx: Context) -> None:
        return None

    with pytest.raises(RegistrationError, match="a decider has that name and version already"):
        registry.add(other, "flaky", version="2")
    engine = await flowli.connect(db_url, registry, bucket=str(tmp_path / "bucket"), **FAST)
    async with engine, engine.worker():
        old = await engine.start("flaky", "w", version="1")  # an execution of the workflow version
        assert await engine.result(old, timeout=10) == {"workflow": "w"}
        assert (await engine.status(old)).version == "1" and (await engine.decider_state(old)) == (0, None)
        new = await engine.start("flaky", "d")  # the highest version: the decider's
        await wait_status(engine, new, "failed")
        assert (await engine.status(new)).version == "2"
