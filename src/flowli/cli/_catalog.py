"""The catalog in the CLI: ``flowli types``, ``flowli type NAME``, ``flowli compose validate|save
FILE``, ``flowli stuck``. The CLI acts as an ``admin`` principal on a local database."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from flowli.catalog import Catalog, install
from flowli.domain import Principal

from ._app import EXIT_REFUSED, AppOption, CLIError, DbOption, _settings, app, open_engine, out, registry_of, run

compose_app = typer.Typer(help="Compositions: validate one against the live catalog, or save it.", no_args_is_help=True)
app.add_typer(compose_app, name="compose")

CLI = Principal("cli", "system", ("admin",))
"""Who the CLI acts as: an admin of the local database."""
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
ApplicationOption = Annotated[str | None, typer.Option("--application", metavar="APP",
                                                       help="The application the composition belongs to.")]


def _principal(application: str | None) -> Principal:
    return Principal(CLI.id, CLI.kind, CLI.roles, application)


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str))


@app.command("types")
def types_(
    ctx: typer.Context,
    prefix: Annotated[str | None, typer.Option("--prefix", help="Only the types whose name starts with it.")] = None,
    q: Annotated[str | None, typer.Option("-q", "--query", help="Only the types whose name or description has it.")] = None,
    as_json: JsonOption = False,
    app_: AppOption = None,
    db: DbOption = None,
) -> None:
    """The catalog's workflow types (of --app): name, kind, featured, scope, description."""
    s = _settings(ctx, app_, db)

    async def go() -> int:
        async with open_engine(s, registry_of(s)) as engine:
            found = await Catalog(engine).types(prefix, q, by=CLI)
        if as_json:
            _print_json(found)
            return 0
        table = Table("name", "kind", "featured", "scope", "version", "description")
        for t in found:
            table.add_row(t["name"], t["workflow_kind"], "yes" if t["featured"] else "", t["scope"], t["version"],
                          t["description"])
        out.print(table)
        return 0

    run(go())


@app.command("type")
def type_(
    ctx: typer.Context, name: Annotated[str, typer.Argument(help="The type's name.")],
    application: ApplicationOption = None, app_: AppOption = None, db: DbOption = None,
) -> None:
    """One type as JSON: its metadata, input and output schemas, fields, prerequisites and dag."""
    s = _settings(ctx, app_, db)

    async def go() -> int:
        async with open_engine(s, registry_of(s)) as engine:
            catalog = Catalog(engine)
            by = _principal(application)
            shown = {**await catalog.definition(name, by=by), **await catalog.schema(name, by=by),
                     "dag": (await catalog.dag(name, by=by))["layers"]}
        _print_json(shown)
        return 0

    run(go())


def _read(file: Path) -> str:
    try:
        return file.read_text()
    except OSError as exc:
        raise CLIError(f"cannot read the composition {file}: {exc.strerror}") from None


@compose_app.command("validate")
def compose_validate(
    ctx: typer.Context, file: Annotated[Path, typer.Argument(metavar="FILE", help="The definition, as JSON.")],
    as_json: JsonOption = False, app_: AppOption = None, db: DbOption = None,
) -> None:
    """Validate a composition against the live catalog (of --app); exit 2 when it has errors."""
    s = _settings(ctx, app_, db)

    async def go() -> int:
        text = _read(file)
        async with open_engine(s, registry_of(s)) as engine:
            result = await Catalog(engine).validate_composition(text, by=CLI)
        if as_json:
            _print_json(result)
        else:
            for e in result["errors"]:
                out.print(f"[red]error[/red] {e}", soft_wrap=True, markup=True, highlight=False)
            for w in result["warnings"]:
                out.print(f"[yellow]warning[/yellow] {w}", soft_wrap=True, markup=True, highlight=False)
            if not result["errors"]:
                out.print(f"{file}: valid ({len(result['warnings'])} warning(s))")
        return EXIT_REFUSED if result["errors"] else 0

    run(go())


@compose_app.command("save")
def compose_save(
    ctx: typer.Context, file: Annotated[Path, typer.Argument(metavar="FILE", help="The definition, as JSON.")],
    application: ApplicationOption = None, app_: AppOption = None, db: DbOption = None,
) -> None:
    """Save a composition (composition.save runs here): it becomes runnable as
    virtual.<name>@<version>. The same definition again is the same save."""
    s = _settings(ctx, app_, db)

    async def go() -> int:
        text = _read(file)
        registry = registry_of(s)
        install(registry)
        async with open_engine(s, registry) as engine:
            catalog = Catalog(engine)
            async with engine.worker(concurrency=4):
                saved = await catalog.save_composition(text, by=_principal(application))
        state = "saved" if saved["created"] else "saved already"
        out.print(f"{saved['workflow_type']} {state} ({saved['content_hash']})", soft_wrap=True, highlight=False)
        for w in saved.get("warnings", []):
            out.print(f"[yellow]warning[/yellow] {w}", soft_wrap=True, markup=True, highlight=False)
        return 0

    run(go())


@app.command()
def stuck(
    ctx: typer.Context,
    older_than: Annotated[float, typer.Option("--older-than", metavar="SECONDS", min=0,
                                              help="No journal progress for this long.")] = 3600,
    application: ApplicationOption = None, as_json: JsonOption = False, app_: AppOption = None, db: DbOption = None,
) -> None:
    """Runs that stalled: not terminal, idle for --older-than, not waiting on a future timer;
    with what each waits on."""
    s = _settings(ctx, app_, db)

    async def go() -> int:
        async with open_engine(s, registry_of(s)) as engine:
            found = await Catalog(engine).stuck(older_than, by=_principal(application))
        if as_json:
            _print_json(found)
            return 0
        if not found:
            out.print(f"no run has been idle for {older_than:g} s or more")
            return 0
        table = Table("workflow_id", "type", "state", "idle", "waiting on")
        for r in found:
            table.add_row(r["workflow_id"], r["workflow_type"], r["status"], f"{r['idle_seconds']:.0f} s",
                          r["waiting_on"]["summary"])
        out.print(table)
        return 0

    run(go())
