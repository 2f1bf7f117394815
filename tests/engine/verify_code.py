"""The workflow ``order`` (version 1) and the ways a deploy changes it, for ``flowli verify``'s
tests (``--app tests.engine.verify_code:inserted``)."""

from __future__ import annotations

from typing import Any

from flowli import Context, Registry


def fetch(n: int) -> int:
    return n * 10


def ship(x: Any) -> Any:
    return x


def audit(n: int) -> int:
    return n


def code(variant: str = "v1") -> Registry:
    """The workflow ``order`` (version 1) as a deploy would change it."""
    registry = Registry()

    @registry.workflow("child.a")
    async def child_a(ctx: Context, x: int) -> int:
        return x + 1

    @registry.workflow("child.b")
    async def child_b(ctx: Context, x: int) -> int:
        return x + 2

    if variant == "missing":
        return registry

    @registry.workflow("order")
    async def order(ctx: Context, n: int) -> Any:
        if variant == "inserted":
            await ctx.step(audit, n)
        if variant == "renamed":
            fetched = await ctx.step(fetch, n)
            kid = await ctx.child("child.a", fetched)
        else:
            got = await ctx.step(fetch, n + 1 if variant == "argument" else n) if variant != "removed" else n * 10
            kid = await ctx.child("child.b" if variant == "child" else "child.a", got)
        await ctx.receive("go")
        shipped = await ctx.step(ship, kid)
        if variant == "appended":
            await ctx.step(audit, n)
        return shipped

    return registry


v1 = code()
inserted = code("inserted")
appended = code("appended")
