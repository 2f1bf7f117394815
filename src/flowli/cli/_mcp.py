"""``flowli mcp``: the MCP server over stdio, for an assistant on this machine."""

from __future__ import annotations

import contextlib
from typing import Annotated

import typer

from flowli.catalog import install

from ._app import AppOption, CLIError, DbOption, _settings, app, needs, open_engine, registry_of, run


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
    with needs("flowli mcp", "mcp"):
        from flowli.mcp import build, fixed, from_key, local_admin, principal_of_key
    from flowli.services import Services

    s = _settings(ctx, app_, db)

    async def go() -> int:
        registry = registry_of(s)
        install(registry)
        async with open_engine(s, registry) as engine:
            services = Services(engine)
            apps = services.applications
            try:
                principal = await principal_of_key(apps)(api_key) if api_key else local_admin()
            except Exception as exc:  # an unknown or disabled key
                raise CLIError(f"--api-key: {exc}") from None
            server = build(services, from_key(apps, api_key) if api_key else fixed(principal))
            async with contextlib.AsyncExitStack() as stack:
                if not no_worker:
                    await stack.enter_async_context(engine.worker(grace=2.0))
                await server.run_stdio_async()
        return 0

    run(go())


approvals_app = typer.Typer(help="The approvals of assistants' writes over MCP (flowli apps set APP --mcp-approval"
                                 " required).", no_args_is_help=True)
app.add_typer(approvals_app, name="approvals")


def _decide(ctx: typer.Context, approval_id: str, approved: bool, by: str | None, reason: str | None,
            db: str | None) -> None:
    from flowli.patterns import answer_review

    if not by:
        raise typer.BadParameter("give who decides: --by EMAIL (the decision carries the person's provenance)")
    if not approved and not (reason and reason.strip()):
        raise typer.BadParameter("a rejection needs --reason: the assistant reads it")
    s = _settings(ctx, None, db)

    async def go() -> int:
        async with open_engine(s) as engine:
            await answer_review(engine, approval_id, approved, by=by, reason=reason)
        verdict = "approved: the write is carried out" if approved else "rejected"
        print(f"approval {approval_id} {verdict} (by {by})")
        return 0

    run(go())


ByOption = Annotated[str | None, typer.Option("--by", metavar="EMAIL", help="Who decides: your email address.")]
ReasonOption = Annotated[str | None, typer.Option("--reason", help="Why (required to reject).")]


@approvals_app.command("approve")
def approve(ctx: typer.Context, approval_id: Annotated[str, typer.Argument(metavar="ID")], by: ByOption = None,
            reason: ReasonOption = None, db: DbOption = None) -> None:
    """Approve an assistant's write: it is carried out, as the assistant, with your decision."""
    _decide(ctx, approval_id, True, by, reason, db)


@approvals_app.command("reject")
def reject(ctx: typer.Context, approval_id: Annotated[str, typer.Argument(metavar="ID")], by: ByOption = None,
           reason: ReasonOption = None, db: DbOption = None) -> None:
    """Reject an assistant's write: nothing is carried out; the assistant reads your reason."""
    _decide(ctx, approval_id, False, by, reason, db)
