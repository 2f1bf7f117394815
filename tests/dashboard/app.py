"""The workflow types ``flowli serve`` knows in the dashboard's tests: the catalog's test types,
and an expense claim that asks a person through the review inbox."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from flowli import Context
from flowli.domain import RetryPolicy
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


class CardDeclined(Exception):
    code = "CARD_DECLINED"


def authorize(amount: int) -> dict[str, Any]:
    if amount > 100:
        raise CardDeclined(f"the card was declined for {amount}")
    return {"authorized": amount}


@registry.workflow("desk.charge", description="Authorizes a charge on a card, twice at most.")
async def charge(ctx: Context, amount: int, card: dict[str, Any]) -> dict[str, Any]:
    return await ctx.step(authorize, amount, retry=RetryPolicy(max_attempts=2, backoff=timedelta(milliseconds=10)))


# three versions of one workflow: a run of version 1 migrates to 3 (which appends a step after
# what it recorded) and not to 2 (which inserts one before)
def prepare() -> str:
    return "prepared"


@registry.workflow("desk.hold", version="1")
async def hold_v1(ctx: Context) -> Any:
    return await ctx.receive("go")


@registry.workflow("desk.hold", version="2")
async def hold_v2(ctx: Context) -> Any:
    await ctx.step(prepare)
    return await ctx.receive("go")


@registry.workflow("desk.hold", version="3")
async def hold_v3(ctx: Context) -> Any:
    got = await ctx.receive("go")
    return {"got": got, "then": await ctx.step(prepare)}
