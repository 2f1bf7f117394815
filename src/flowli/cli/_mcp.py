"""``flowli mcp``: the MCP server over stdio, for an assistant on this machine."""

from __future__ import annotations

import contextlib
from typing import Annotated

import typer

from flowli.catalog import install

from ._app import AppOption, CLIError, DbOption, _settings, app, open_engine, registry_of, run


@app.command()
def mcp(
    ctx: typer.Context,
    api_key: Annotated[str | None, typer.Option("--api-key", envvar="FLOWLI_API_KEY", metavar="KEY",
                                                help="Act as this API key's application and role (default: the"
                                                     " local admin).")] = None,
    no_worker: Annotated[bool, typer.Option("--no-worker", help="Run no engine worker in this process.")] = False,
    app_: AppOption = None,
    db: DbOption = None,
) -> None:
    """Serve the MCP tools, prompt and resources over stdio (the official SDK). With --api-key the
    assistant acts as that key; without, as the local admin. An engine worker runs the runs it
    starts, unless --no-worker."""
    from flowli.mcp import build, fixed, local_admin, principal_of_key

    s = _settings(ctx, app_, db)

    async def go() -> int:
        registry = registry_of(s)
        install(registry)
        async with open_engine(s, registry) as engine:
            try:
                principal = await principal_of_key(engine)(api_key) if api_key else local_admin()
            except Exception as exc:  # an unknown or disabled key
                raise CLIError(f"--api-key: {exc}") from None
            server = build(engine, fixed(principal))
            async with contextlib.AsyncExitStack() as stack:
                if not no_worker:
                    await stack.enter_async_context(engine.worker())
                await server.run_stdio_async()
        return 0

    run(go())
