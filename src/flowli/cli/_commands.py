"""The commands of workers and executions: worker, start, ls, show, signal, demo."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from flowli.catalog import Catalog
from flowli.catalog import install as install_catalog
from flowli.domain import Cancelled, UnknownExecutionError, UnknownWorkflowError
from flowli.engine import WorkflowDef, input_model, problems, tuned_collector, validation_error

from ._app import (
    EXIT_EXECUTION_FAILED,
    AppOption,
    CLIError,
    DbOption,
    ListState,
    Settings,
    _settings,
    app,
    err,
    fail,
    load_registry,
    missing_database,
    open_engine,
    out,
    parse_value,
    registry_of,
    require_database,
    run,
    setup_logging,
    with_app_hint,
)
from ._render import (
    child_eids,
    evidence_view,
    execution_view,
    executions_table,
    frames_view,
)


@app.command()
def worker(
    ctx: typer.Context,
    concurrency: Annotated[int, typer.Option("--concurrency", "-c", min=1, help="Executions run at once.")] = 64,
    queue: Annotated[list[str] | None, typer.Option("--queue", "-q", help="A queue to dequeue from (repeat it).")] = None,
    grace: Annotated[float, typer.Option("--grace", min=0, metavar="SECONDS",
                                         help="On a stop, wait this long for the steps under way.")] = 30.0,
    lease_ttl: Annotated[float, typer.Option("--lease-ttl", min=0.1, metavar="SECONDS",
                                             help="How long a lease lasts unrenewed: a crashed worker's runs"
                                                  " move on after it.")] = 30.0,
    metrics_port: Annotated[int | None, typer.Option("--metrics-port", metavar="PORT",
                                                     help="Serve Prometheus metrics on 127.0.0.1:PORT.")] = None,
    workflow_cache: Annotated[int, typer.Option("--workflow-cache", min=0, metavar="RUNS",
                                                help="Waiting runs kept in memory, continued without a replay"
                                                     " when they resume (0: replay every time).")] = 512,
    app_: AppOption = None,
    db: DbOption = None,
) -> None:
    """Run a worker in the foreground until Ctrl-C or SIGTERM (a second one stops it at once)."""
    run(_worker(_settings(ctx, app_, db), concurrency, queue or ["default"], grace, lease_ttl, metrics_port,
                workflow_cache), fast_loop=True)


async def _worker(s: Settings, concurrency: int, queues: list[str], grace: float = 30.0, lease_ttl: float = 30.0,
                  metrics_port: int | None = None, workflow_cache: int = 512) -> int:
    if not s.app:
        raise CLIError("flowli worker needs --app module:registry (or FLOWLI_APP): a worker runs the workflows of a registry")
    registry = load_registry(s.app)
    own = registry.names()  # the application's workflows, which the banner names (not the machinery's)
    install_catalog(registry)  # the dag runner and composition.save: a worker runs compositions too
    setup_logging()
    async with contextlib.AsyncExitStack() as stack:
        engine = await stack.enter_async_context(open_engine(s, registry, lease_ttl=timedelta(seconds=lease_ttl),
                                                             workflow_cache=workflow_cache))
        if metrics_port is not None:
            from flowli.metrics import serve as serve_metrics

            await stack.enter_async_context(serve_metrics(engine, metrics_port))
            out.print(f"metrics on http://127.0.0.1:{metrics_port}/metrics", soft_wrap=True)
        Catalog(engine)  # the catalog's RBAC and its data types in this process
        if engine.options.bucket == "flowli-bucket" and not s.url.startswith("sqlite"):
            err.print(Text(f"warning: evidence goes to {Path.cwd() / 'flowli-bucket'} on this host while the"
                           " database is shared: give every worker one bucket (--bucket DIR or FLOWLI_BUCKET)",
                           style="yellow"), soft_wrap=True)
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        installed = []
        running: asyncio.Task[None] | None = None

        def on_signal() -> None:
            if stop.is_set() and running is not None:
                out.print("stopping at once: what still runs is handed back")
                running.cancel()  # the second signal: the worker stops draining
            stop.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, on_signal)
                installed.append(sig)
        out.print(
            f"flowli worker: {', '.join(own) or 'no workflows'} from {s.app} on {s.url}; "
            f"queues {', '.join(queues)}; concurrency {concurrency}; lease {lease_ttl:g} s. Ctrl-C or SIGTERM"
            f" stops it (the steps under way get {grace:g} s; a second signal stops it at once).",
            soft_wrap=True,
        )
        stack.enter_context(tuned_collector())  # the process runs nothing but the worker: see COLLECTOR_THRESHOLDS
        running = asyncio.create_task(engine.run_worker(concurrency=concurrency, queues=queues, grace=grace),
                                      name="flowli-cli-worker")
        stopping = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if running.done():
                running.result()  # the worker ended on its own: show why
                return 1
            out.print(f"stopping: the running activations end first (up to {grace:g} s)")
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running
        finally:
            stopping.cancel()
            for sig in installed:
                loop.remove_signal_handler(sig)
    out.print("worker stopped")
    return 0


@app.command()
def start(
    ctx: typer.Context,
    workflow: Annotated[str, typer.Argument(help="The workflow's name.")],
    args: Annotated[list[str] | None, typer.Argument(help="Its arguments, each JSON (with --string: plain strings).")] = None,
    by: Annotated[str | None, typer.Option("--by", metavar="EMAIL", help="Who starts it.")] = None,
    key: Annotated[str | None, typer.Option("--key", help="Idempotency key: a second start returns the first eid.")] = None,
    version: Annotated[str | None, typer.Option("--version", help="The workflow version (default: the highest).")] = None,
    queue: Annotated[str, typer.Option("--queue", help="The queue of its tasks.")] = "default",
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Run a worker here and wait for the result.")] = False,
    timeout: Annotated[float | None, typer.Option("--timeout", help="With --wait: give up after this many seconds.")] = None,
    string: Annotated[bool, typer.Option("--string", help="Take each argument as a plain string, not JSON.")] = False,
    application: Annotated[str | None, typer.Option(
        "--application", metavar="APP",
        help="The application it belongs to (default: the default application, which a dashboard admin"
             " sees).")] = None,
    app_: AppOption = None,
    db: DbOption = None,
) -> None:
    """Start an execution and print its eid (and, with --wait, its result as JSON)."""
    try:
        values = [parse_value(a, f"argument {i + 1}", string) for i, a in enumerate(args or [])]
    except CLIError as exc:
        fail(str(exc))
    run(_start(_settings(ctx, app_, db), workflow, values, by, key, version, queue, wait, timeout, application))


async def _start(
    s: Settings, workflow: str, values: list[Any], by: str | None, key: str | None, version: str | None,
    queue: str, wait: bool, timeout: float | None, application: str | None = None,
) -> int:
    registry = registry_of(s)
    try:
        wf = registry.get(workflow, version)  # refuse an unknown workflow before a database file appears
    except UnknownWorkflowError as exc:
        raise with_app_hint(exc, s) from None
    values = checked_arguments(wf, values)
    async with open_engine(s, registry) as engine:
        try:
            eid = await engine.start(workflow, *values, by=by, key=key, version=version, queue=queue,
                                     application=application)
        except UnknownWorkflowError as exc:
            raise with_app_hint(exc, s) from None
        print(eid, flush=True)
        if not wait:
            return 0
        setup_logging()
        async with engine.worker(queues=[queue]):
            try:
                value = await engine.result(eid, timeout=timeout)
            except TimeoutError as exc:
                fail(str(exc), EXIT_EXECUTION_FAILED)
            except (Exception, Cancelled) as exc:
                record = await engine.status(eid)
                fail(f"execution {eid} {record.status.value}: {exc}", EXIT_EXECUTION_FAILED)
        print(json.dumps(value, ensure_ascii=False), flush=True)
    return 0


def checked_arguments(wf: WorkflowDef, values: list[Any]) -> list[Any]:
    """The arguments of a start from the command line, checked against the workflow's signature
    as the catalog checks its inputs (a parameter's annotation is its type: ``"5"`` for an ``int``
    becomes 5, ``"abc"`` is refused); CLIError names each argument that does not fit."""
    wf.bind(values)  # how many: WorkflowArgumentsError names the signature
    names = [p.name for p in list(wf.signature.parameters.values())[1:]][:len(values)]
    try:
        given = input_model(wf.name, wf.fn).model_validate(dict(zip(names, values, strict=True)))
    except validation_error() as exc:
        raise CLIError(f"{wf.name}({wf.parameters}): " + "; ".join(problems(exc))) from None
    dumped = given.model_dump(mode="json")
    return [dumped[name] for name in names]


@app.command("ls")
def ls_(
    ctx: typer.Context,
    status: Annotated[ListState | None, typer.Option("--status", help="Only executions with this status"
                                                    " (blocked: suspended for an operator).")] = None,
    workflow: Annotated[str | None, typer.Option("--workflow", help="Only executions of this workflow.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many, newest first.")] = 50,
    app_: AppOption = None,
    db: DbOption = None,
) -> None:
    """List executions, newest first."""
    run(_ls(_settings(ctx, app_, db), status, workflow, limit))


async def _ls(s: Settings, status: ListState | None, workflow: str | None, limit: int) -> int:
    path = missing_database(s.url)
    if path is not None:
        out.print(f"no executions: there is no database at {path}")
        return 0
    async with open_engine(s) as engine:
        rows = await engine.list(status=status.value if status else None, workflow=workflow, limit=limit)
    if not rows:
        filters = [f"status {status.value}" if status else "", f"workflow {workflow}" if workflow else ""]
        out.print("no executions" + (" with " + " and ".join(f for f in filters if f) if any(filters) else ""))
        return 0
    out.print(executions_table(rows))
    return 0


@app.command()
def show(
    ctx: typer.Context,
    eid: Annotated[str, typer.Argument(help="The execution's eid.")],
    evidence: Annotated[bool, typer.Option("--evidence", help="Also print what the steps wrote, attempt by attempt.")] = False,
    app_: AppOption = None,
    db: DbOption = None,
) -> None:
    """Show an execution's journal as a timeline, then its record."""
    run(_show(_settings(ctx, app_, db), eid, evidence))


async def _show(s: Settings, eid: str, evidence: bool = False) -> int:
    require_database(s, eid)
    async with open_engine(s) as engine:
        entries = await engine.journal(eid)
        try:
            record = await engine.status(eid)
        except UnknownExecutionError:
            record = None  # archived: the journal is all there is
        children = []
        for ceid in child_eids(entries):
            with contextlib.suppress(UnknownExecutionError):
                children.append(await engine.status(ceid))
        written = await engine.evidence(eid) if evidence else []
        bucket = str(Path.cwd() / engine.options.bucket)
        view = await engine.run_view(eid)
    out.print(execution_view(record, entries, children))
    out.print(frames_view(view))
    if evidence:
        out.print(evidence_view(written, bucket))
    return 0


@app.command("signal")
def signal_(
    ctx: typer.Context,
    eid: Annotated[str, typer.Argument(help="The execution's eid.")],
    channel: Annotated[str, typer.Argument(help="The channel, e.g. decision.")],
    payload: Annotated[str, typer.Argument(help="The payload, JSON (with --string: a plain string).")],
    by: Annotated[str | None, typer.Option("--by", metavar="EMAIL", help="Who sends it.")] = None,
    string: Annotated[bool, typer.Option("--string", help="Take the payload as a plain string, not JSON.")] = False,
    app_: AppOption = None,
    db: DbOption = None,
) -> None:
    """Send one message to an execution's channel; a worker resumes it."""
    try:
        value = parse_value(payload, "the payload", string)
    except CLIError as exc:
        fail(str(exc))
    run(_signal(_settings(ctx, app_, db), eid, channel, value, by))


async def _signal(s: Settings, eid: str, channel: str, payload: Any, by: str | None) -> int:
    require_database(s, eid)
    async with open_engine(s) as engine:
        seq = await engine.signal(eid, channel, payload, by=by)
        record = await engine.status(eid)
    out.print(f"sent message #{seq} on {channel!r} to execution {eid}", soft_wrap=True)
    if record.blocked:
        b = record.blocked
        err.print(Text(f"warning: execution {eid} is blocked ({b.get('reason')} at {b.get('fid')}): the message waits"
                       " until it is migrated to a version that replays it, or cancelled", style="yellow"),
                  soft_wrap=True)
    return 0


@app.command()
def demo(
    ctx: typer.Context,
    app_: AppOption = None,
    db: DbOption = None,
) -> None:
    """Run an example invoice approval end to end, then print its journal."""
    run(_demo(_settings(ctx, app_, db)))


async def _demo(s: Settings) -> int:
    from . import _demo as demo_module

    registry = load_registry(s.app) if s.app else demo_module.registry
    setup_logging()
    async with open_engine(s, registry) as engine:
        return await demo_module.run_demo(engine, out, url=s.url)
