"""The workflow types ``flowli serve`` knows in the dashboard's tests: the catalog's test types,
and an expense claim that asks a person through the review inbox."""

from __future__ import annotations

from typing import Any

from flowli import Context
from flowli.patterns import review

from ..catalog.app import app

registry = app()
# the application's own roles, known to every process that loads this registry (the served
# tests' flowli serve, and the CLI given --app)
registry.role("auditor", ["runs:read", "runs:decide"])  # reads runs, answers their decisions
registry.role("launcher", ["runs:read", "runs:start", "s3:write"])


@registry.workflow("ops.expense", description="Pays an expense claim once a person approves it.")
async def expense(ctx: Context, claim: dict[str, Any]) -> dict[str, Any]:
    decision = await review(ctx, f"expense {claim['id']}", claim)
    return {"paid": bool(decision["approved"]), "by": decision["by"], "reason": decision.get("reason")}


@registry.workflow("ops.await_message", description="Waits for a message on its channel 'go' and returns it.")
async def await_message(ctx: Context, note: str) -> dict[str, Any]:
    return {"note": note, "message": await ctx.receive("go")}
