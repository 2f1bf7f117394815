"""What an operator does to a run: cancel, migrate, retry, explain, terminate, and the review inbox."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

import typer
from rich.text import Text

from flowli.domain import Status, UnknownWorkflowError
from flowli.patterns import answer_review
from flowli.patterns import inbox as read_inbox

from ._app import (
    AppOption,
    DbOption,
    Settings,
    _settings,
    app,
    err,
    fail,
    missing_database,
    open_engine,
    out,
    registry_of,
    require_database,
    run,
    with_app_hint,
)
from ._render import (
    reviews_table,
    stamp,
    status_text,
)


@app.command()
def cancel(
    ctx: typer.Context,
    eid: Annotated[str, typer.Argument(help="The execution's eid.")],
    by: Annotated[str | None, typer.Option("--by", metavar="EMAIL", help="Who cancels it.")] = None,
    app_: AppOption = None,
    db: DbOption = None,
) -> None:
    """Request the cancellation of an execution; a worker cancels it at its next frame boundary."""
    run(_cancel(_settings(ctx, app_, db), eid, by))


async def _cancel(s: Settings, eid: str, by: str | None) -> int:
    require_database(s, eid)
    async with open_engine(s) as engine:
        await engine.cancel(eid, by=by)
    out.print(f"cancel requested for execution {eid}: a worker cancels it at its next frame boundary", soft_wrap=True)
    return 0


@app.command()
def migrate(
    ctx: typer.Context,
    eid: Annotated[str, typer.Argument(help="The execution's eid.")],
    version: Annotated[str, typer.Argument(help="The version of its workflow to run from now on.")],
    by: Annotated[str | None, typer.Option("--by", metavar="EMAIL", help="Who migrates it.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Migrate even when that version does not replay it.")] = False,
    app_: AppOption = None,
    db: DbOption = None,
) -> None:
    """Point a suspended execution at another version of its workflow (checked first: that version
    must replay its journal), and resume it."""
    run(_migrate(_settings(ctx, app_, db), eid, version, by, force))


async def _migrate(s: Settings, eid: str, version: str, by: str | None, force: bool = False) -> int:
    require_database(s, eid)
    async with open_engine(s, registry_of(s)) as engine:
        try:
            await engine.migrate(eid, version, by=by, force=force)
        except UnknownWorkflowError as exc:
            raise with_app_hint(exc, s) from None
        workflow = (await engine.status(eid)).workflow
        runs_it = [w for w in await engine.workers() if version in (w.get("workflows") or {}).get(workflow, [])]
    out.print(f"execution {eid} now runs version {version}; a worker resumes it", soft_wrap=True)
    if not runs_it:
        err.print(Text(f"warning: no live worker registers {workflow} version {version}: the execution waits until"
                       " one runs it", style="yellow"), soft_wrap=True)
    return 0


@app.command("retry")
def retry_(
    ctx: typer.Context,
    eid: Annotated[str, typer.Argument(help="The failed execution's eid.")],
    by: Annotated[str | None, typer.Option("--by", metavar="EMAIL", help="Who reopens it.")] = None,
    reason: Annotated[str | None, typer.Option("--reason", help="Why (it goes into the journal).")] = None,
    app_: AppOption = None,
    db: DbOption = None,
) -> None:
    """Reopen a failed execution from its last good point: the failed frame runs again, the rest is memoized."""
    run(_retry(_settings(ctx, app_, db), eid, by, reason))


async def _retry(s: Settings, eid: str, by: str | None, reason: str | None) -> int:
    require_database(s, eid)
    async with open_engine(s) as engine:
        fid = await engine.retry(eid, by=by, reason=reason)
    where = f"frame {fid} runs again" if fid else "it runs again from its start"
    out.print(f"execution {eid} reopened: {where} when a worker resumes it", soft_wrap=True)
    return 0


@app.command()
def explain(
    ctx: typer.Context,
    eid: Annotated[str, typer.Argument(help="The execution's eid.")],
    app_: AppOption = None,
    db: DbOption = None,
) -> None:
    """Say what an execution waits on: a timer, a message, a child, a task on a queue, a worker."""
    run(_explain(_settings(ctx, app_, db), eid))


async def _explain(s: Settings, eid: str) -> int:
    require_database(s, eid)
    async with open_engine(s) as engine:
        why = await engine.explain(eid)
    out.print(Text.assemble((f"{eid} ", "bold"), status_text(Status(why.status))), soft_wrap=True)
    if not why.waits:
        out.print(why.summary, soft_wrap=True)
    for wait in why.waits:
        out.print(Text.assemble(("  " + wait["kind"].ljust(9), "yellow"), wait["message"]), soft_wrap=True)
    if why.last_at is not None:
        out.print(f"last entry: seq {why.last_seq} at {stamp(why.last_at)}", style="dim", soft_wrap=True)
    return 0


@app.command()
def terminate(
    ctx: typer.Context,
    eid: Annotated[str, typer.Argument(help="The stale execution's eid.")],
    reason: Annotated[str, typer.Option("--reason", help="Why: it is recorded with the terminal state.")],
    by: Annotated[str | None, typer.Option("--by", metavar="EMAIL", help="Who terminates it.")] = None,
    min_idle: Annotated[float, typer.Option("--min-idle", min=0, help="Refuse if it progressed within these seconds.")] = 600,
    expected_last_seq: Annotated[int | None, typer.Option("--expected-last-seq", help="Refuse unless its journal ends here.")] = None,
    app_: AppOption = None,
    db: DbOption = None,
) -> None:
    """Fail a stale execution for good (refused if it progressed lately, a live worker holds it, or its journal moved on)."""
    run(_terminate(_settings(ctx, app_, db), eid, reason, by, min_idle, expected_last_seq))


async def _terminate(s: Settings, eid: str, reason: str, by: str | None, min_idle: float, expected: int | None) -> int:
    require_database(s, eid)
    async with open_engine(s) as engine:
        await engine.terminate(eid, reason, by=by, min_idle=timedelta(seconds=min_idle), expected_last_seq=expected)
    out.print(f"execution {eid} terminated: failed, {reason}", soft_wrap=True)
    return 0


@app.command()
def inbox(
    ctx: typer.Context,
    closed: Annotated[bool, typer.Option("--all", help="Also the reviews answered already.")] = False,
    app_: AppOption = None,
    db: DbOption = None,
) -> None:
    """List the reviews that wait for a person (flowli.patterns.review)."""
    run(_inbox(_settings(ctx, app_, db), closed))


async def _inbox(s: Settings, closed: bool) -> int:
    if missing_database(s.url) is not None:
        out.print("no reviews: no database yet")
        return 0
    async with open_engine(s) as engine:
        rows = await read_inbox(engine, open_only=not closed)
    out.print(reviews_table(rows))
    return 0


@app.command()
def review(
    ctx: typer.Context,
    eid: Annotated[str, typer.Argument(help="The execution whose review you answer.")],
    approve: Annotated[bool, typer.Option("--approve", help="Approve it.")] = False,
    reject: Annotated[bool, typer.Option("--reject", help="Reject it (with --reason).")] = False,
    reason: Annotated[str | None, typer.Option("--reason", help="Why (required to reject).")] = None,
    by: Annotated[str | None, typer.Option("--by", metavar="EMAIL", help="Who answers: your email address.")] = None,
    app_: AppOption = None,
    db: DbOption = None,
) -> None:
    """Answer the open review of an execution; the answer carries your provenance."""
    if approve and reject:
        fail("give one decision: --approve or --reject, not both")
    if not approve and not reject:
        fail("give the decision: --approve or --reject")
    if reject and not (reason and reason.strip()):
        fail("a rejection needs --reason: the workflow receives it with the decision")
    if not by:
        fail("give who answers: --by EMAIL (the answer carries the person's provenance)")
    run(_review(_settings(ctx, app_, db), eid, approve, reason, by))


async def _review(s: Settings, eid: str, approve: bool, reason: str | None, by: str) -> int:
    require_database(s, eid)
    async with open_engine(s) as engine:
        await answer_review(engine, eid, approve, reason=reason, by=by)
    verdict = "approved" if approve else "rejected"
    out.print(f"review of execution {eid} {verdict} by {by}: a worker resumes it", soft_wrap=True)
    return 0
