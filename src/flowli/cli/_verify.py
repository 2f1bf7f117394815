"""``flowli verify``: before a deploy, replay the stored journals against the new code (in
memory, writing nothing) and say which executions it would break."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from ._app import (
    AppOption,
    CLIError,
    DbOption,
    Settings,
    _settings,
    app,
    err,
    missing_database,
    open_engine,
    out,
    registry_of,
    run,
)


@app.command()
def verify(
    ctx: typer.Context,
    workflow: Annotated[str | None, typer.Option("--workflow", metavar="NAME", help="Check this workflow only.")] = None,
    limit: Annotated[int, typer.Option("--limit", metavar="N", min=0,
                                       help="Finished executions checked per workflow version, newest first.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per workflow version.")] = False,
    app_: AppOption = None,
    db: DbOption = None,
) -> None:
    """Replay every live execution, and the last --limit finished ones of each workflow version,
    against the code of --app (the new code), in memory: nothing is written and no step runs.
    Prints per workflow and version how many were checked, compatible and incompatible, the first
    difference of each incompatible one, and the version a version bump would pin them to. Exits
    1 when a live execution would break."""
    run(_verify(_settings(ctx, app_, db), workflow, limit, as_json))


async def _verify(s: Settings, workflow: str | None, limit: int, as_json: bool) -> int:
    if not s.app:
        raise CLIError("flowli verify checks new code: pass it as --app MODULE:REGISTRY (or set FLOWLI_APP)")
    path = missing_database(s.url)
    if path is not None:
        raise CLIError(f"there is no database at {path} to verify against (pass --db URL or set FLOWLI_DB)")
    registry = registry_of(s)
    async with open_engine(s, registry) as engine:
        found = await engine.verify(registry, workflow=workflow, limit=limit)
    rows = found.summary()
    if as_json:
        for row in rows:
            out.print_json(json.dumps(row))
    else:
        table = Table("workflow", "version", "checked", "compatible", "incompatible", "a version bump pins them to",
                      box=None, pad_edge=False)
        for row in rows:
            table.add_row(row["workflow"], row["version"], str(row["checked"]), str(row["compatible"]),
                          Text(str(row["incompatible"]), style="red" if row["incompatible"] else ""),
                          row["pin"] or "")
        out.print(table)
        for row in rows:
            for d in row["differences"]:
                recorded = d["recorded"] or {}
                out.print(Text.assemble((f"{row['workflow']} v{row['version']} ", "bold"), f"{d['eid']} ({d['status']}): ",
                                        (f"{d['fid']}: {d['detail']}", "red")), soft_wrap=True)
                if recorded:
                    out.print(f"  recorded: {json.dumps(recorded, default=str)}", soft_wrap=True, highlight=False)
                if d["current"]:
                    out.print(f"  new code: {json.dumps(d['current'], default=str)}", soft_wrap=True, highlight=False)
    if not rows:
        out.print("no execution to check", soft_wrap=True)
    if found.breaking:
        err.print(Text(f"{len(found.breaking)} live execution(s) would break on this code: keep their version"
                       " registered beside the new one (a version bump), or migrate them first", style="red"),
                  soft_wrap=True)
        return 1
    return 0
