"""D3's workflow type for ``flowli serve --app bench.dash_app:registry``: ``bench.long`` runs
``n`` trivial steps, so its journal grows by the entries each step appends (``bench/dashboard.py --d3``)."""

from __future__ import annotations

from flowli import Context, Registry

registry = Registry()


def noop(i: int) -> int:
    return i


@registry.workflow("bench.long", description="n trivial steps: a long journal for the dashboard's D3.")
async def long(ctx: Context, n: int) -> int:
    for i in range(n):
        await ctx.step(noop, i)
    return n
