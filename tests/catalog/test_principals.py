"""Who the engine's RBAC trusts, and what answering a decision needs (both backends).

The application's own code is trusted: a ``by=`` string, no ``by=``, a principal marked
``trusted`` (``flowli.domain.SYSTEM``). Every other principal is checked, and one without roles
holds no capability: it is refused, naming itself, and nothing is written (the check fails
closed). A message or an answer that is a person's decision (``decision=True``) needs
``runs:decide``, which ``runs:operate`` includes; any other needs ``runs:operate``: a role may
answer decisions and act on nothing else."""

from __future__ import annotations

from typing import Any

import pytest

from flowli import Context, Principal
from flowli.catalog import PermissionDenied
from flowli.domain import SYSTEM
from flowli.patterns import answer_review, review

from ..crash import until
from .app import app

pytestmark = pytest.mark.integration


def registry_with_decisions() -> Any:
    registry = app()
    registry.role("auditor", ["runs:read", "runs:decide"])
    registry.role("mover", ["runs:read", "runs:operate"])
    registry.role("reader", ["runs:read"])

    @registry.workflow("ops.ask", description="Waits for a person's decision on channel 'verdict'.")
    async def ask(ctx: Context, note: str) -> Any:
        return {"note": note, "verdict": await ctx.receive("verdict")}

    @registry.workflow("ops.reviewed", description="Asks a person through the review inbox.")
    async def reviewed(ctx: Context, note: str) -> Any:
        return await review(ctx, f"check {note}", {"note": note})

    return registry


async def _status(engine: Any, eid: str) -> str:
    return str((await engine.status(eid)).status.value)


async def test_a_principal_without_roles_is_refused_unless_it_is_the_applications_own_code(open_engine):
    async with open_engine(registry_with_decisions()) as engine:
        nobody = Principal("mallory@example.com")
        with pytest.raises(PermissionDenied, match=r"human:mallory@example.com \(no role\) may not start ops.ask"):
            await engine.start("ops.ask", "n", by=nobody)
        assert len(await engine.list()) == 0  # nothing written
        # the application's own code: a string, no by=, a trusted principal, SYSTEM
        mine = [await engine.start("ops.ask", "a", by="clerk@example.com"), await engine.start("ops.ask", "b"),
                await engine.start("ops.ask", "c", by=Principal("clerk@example.com", trusted=True)),
                await engine.start("ops.ask", "d", by=SYSTEM)]
        assert len(set(mine)) == 4
        await until(lambda: _all_suspended(engine, mine), 10, "the runs wait")
        before = await engine.journal(mine[0])
        with pytest.raises(PermissionDenied, match=r"\(no role\) may not signal run"):
            await engine.signal(mine[0], "verdict", "ok", by=nobody)
        with pytest.raises(PermissionDenied, match=r"\(no role\) may not cancel run"):
            await engine.cancel(mine[0], by=nobody)
        assert await engine.journal(mine[0]) == before
        journal = await engine.journal(mine[3])
        assert str(journal[0].provenance.actor) == "system:application"


async def test_a_decision_needs_runs_decide_and_nothing_else_does(open_engine):
    async with open_engine(registry_with_decisions()) as engine:
        auditor = Principal("aud@example.com", roles=("auditor",))
        mover = Principal("mo@example.com", roles=("mover",))
        reader = Principal("rita@example.com", roles=("reader",))
        first, second = await engine.start("ops.ask", "1"), await engine.start("ops.ask", "2")
        await until(lambda: _all_suspended(engine, [first, second]), 10, "the runs wait")
        # the auditor answers a decision, and may not send any other message or cancel
        with pytest.raises(PermissionDenied, match="lacks the capability 'runs:operate'"):
            await engine.signal(first, "verdict", "ok", by=auditor)
        with pytest.raises(PermissionDenied, match="lacks the capability 'runs:operate'"):
            await engine.cancel(first, by=auditor)
        await engine.signal(first, "verdict", "ok", by=auditor, decision=True)
        # a reader may not answer it (the refusal names both capabilities that would do);
        # the mover operates runs, which includes answering their decisions
        with pytest.raises(PermissionDenied) as refused:
            await engine.signal(second, "verdict", "ok", by=reader, decision=True)
        assert "lacks the capability 'runs:operate' (or 'runs:decide', which answers decisions alone)" in \
            str(refused.value) and refused.value.capability == "runs:operate"
        await engine.signal(second, "verdict", "moved", by=mover, decision=True)
        assert (await engine.result(first, timeout=10))["verdict"] == "ok"
        assert (await engine.result(second, timeout=10))["verdict"] == "moved"
        # a review's answer is a decision: the auditor answers it, the reader may not
        asked = await engine.start("ops.reviewed", "3")
        await until(lambda: _all_suspended(engine, [asked]), 10, "the review waits")
        await until(lambda: _has_task(engine, asked), 10, "the review's task is open")
        with pytest.raises(PermissionDenied, match=r"lacks the capability 'runs:operate' \(or 'runs:decide'"):
            await answer_review(engine, asked, True, by=reader)
        await answer_review(engine, asked, True, by=auditor, reason="fine")
        assert (await engine.result(asked, timeout=10))["approved"] is True


async def _all_suspended(engine: Any, eids: list[str]) -> bool:
    return all([await _status(engine, eid) == "suspended" for eid in eids])


async def _has_task(engine: Any, eid: str) -> bool:
    return bool(await engine.tasks(eid=eid))
