"""The ``flowli`` command: a thin layer over :class:`flowli.Engine`.

Every command opens one engine with ``async with engine:`` and runs under ``asyncio.run``. A
flowli error (a refused command: unknown workflow or execution, bad arguments, a terminal
execution, a bad database URL or ``--app``) prints one red line and exits with code 2; the
failure of an execution that ``start --wait`` waited for exits with code 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import importlib
import json
import logging
import os
import signal
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, AsyncIterator, Coroutine, NoReturn
from urllib.parse import unquote, urlparse

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.text import Text

import flowli
from flowli._connect import default_url
from flowli.domain import Cancelled, FlowliError, Status, UnknownExecutionError, UnknownWorkflowError
from flowli.engine import Engine, Registry
from flowli.patterns import answer_review
from flowli.patterns import inbox as read_inbox

from ._render import (
    child_eids,
    evidence_view,
    execution_view,
    executions_table,
    frames_view,
    reviews_table,
    stamp,
    status_text,
)

EXIT_REFUSED = 2
EXIT_EXECUTION_FAILED = 1


class CLIError(FlowliError):
    """A command that the CLI refuses before the engine sees it (a bad ``--app``, no database)."""


def _console(stderr: bool = False) -> Console:
    # piped output is read by people with wide terminals and by grep: do not wrap it at 80
    probe = Console(stderr=stderr)
    if not probe.is_terminal and "COLUMNS" not in os.environ:
        return Console(stderr=stderr, width=200)
    return probe


out = _console()
err = _console(stderr=True)

app = typer.Typer(
    name="flowli",
    help="flowli: durable execution for Python workflows. Run a worker, start executions, read their journals.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


# ---- global options ------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    app: str | None = None
    db: str | None = None

    @property
    def url(self) -> str:
        url = self.db if self.db is not None else default_url()
        if not url.strip():
            raise CLIError("the database URL is empty (--db or FLOWLI_DB): give one, e.g. sqlite:///flowli.db"
                           " or postgresql://user@host:5432/db")
        return url


_APP_HELP = "The registry of your workflows, as module:attribute (env FLOWLI_APP)."
_DB_HELP = "The database URL, e.g. sqlite:///flowli.db (env FLOWLI_DB; default sqlite:///flowli.db)."
AppOption = Annotated[str | None, typer.Option("--app", metavar="MODULE:REGISTRY", help=_APP_HELP, show_default=False)]
DbOption = Annotated[str | None, typer.Option("--db", metavar="URL", help=_DB_HELP, show_default=False)]


@app.callback()
def _root(
    ctx: typer.Context,
    app_: Annotated[str | None, typer.Option("--app", envvar="FLOWLI_APP", metavar="MODULE:REGISTRY", help=_APP_HELP)] = None,
    db: Annotated[str | None, typer.Option("--db", envvar="FLOWLI_DB", metavar="URL", help=_DB_HELP)] = None,
    bucket: Annotated[str | None, typer.Option("--bucket", envvar="FLOWLI_BUCKET", metavar="DIR",
                                               help="Where evidence goes (env FLOWLI_BUCKET; default: beside a SQLite"
                                                    " file, else ./flowli-bucket).")] = None,
) -> None:
    if bucket:
        os.environ["FLOWLI_BUCKET"] = bucket  # flowli.connect reads it
    ctx.obj = Settings(app_, db)


def _settings(ctx: typer.Context, app_: str | None, db: str | None) -> Settings:
    """A command's own --app/--db win over the global ones, which win over the environment."""
    base = ctx.obj if isinstance(ctx.obj, Settings) else Settings()
    return Settings(app_ or base.app, db if db is not None else base.db)


# ---- helpers -------------------------------------------------------------------------------


def fail(message: str, code: int = EXIT_REFUSED) -> NoReturn:
    err.print(Text.assemble(("error: ", "bold red"), (message, "red")), soft_wrap=True)
    raise typer.Exit(code)


def run(coro: Coroutine[Any, Any, int | None]) -> None:
    """Run a command's coroutine; a flowli error is one red line and exit code 2."""
    try:
        code = asyncio.run(coro)
    except FlowliError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        fail("interrupted", 130)
    if code:
        raise typer.Exit(code)


def load_registry(spec: str) -> Registry:
    """The Registry named by ``module:attribute`` (the working directory is importable)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise CLIError(f"--app {spec!r}: expected module:attribute, e.g. myapp.workflows:registry")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise CLIError(f"--app {spec!r}: no module named {module_name!r} (is its directory on PYTHONPATH?)") from None
        raise CLIError(f"--app {spec!r}: importing {module_name!r} failed: {exc}") from None
    except Exception as exc:
        raise CLIError(f"--app {spec!r}: importing {module_name!r} failed: {type(exc).__name__}: {exc}") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise CLIError(f"--app {spec!r}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not isinstance(obj, Registry):
        raise CLIError(f"--app {spec!r}: {attr} is a {type(obj).__name__}, not a flowli.Registry")
    return obj


def registry_of(s: Settings) -> Registry:
    return load_registry(s.app) if s.app else Registry()


def missing_database(url: str) -> str | None:
    """The path of a SQLite database file that does not exist, else None.

    Commands that act on stored executions refuse a missing file rather than create an empty
    database (a typo in --db would otherwise leave a stray file and a misleading answer).
    """
    parsed = urlparse(url)
    if parsed.scheme != "sqlite" or parsed.netloc:
        return None  # :memory:, other backends and malformed URLs: connect decides
    path = unquote(parsed.path[1:] if parsed.path.startswith("/") else parsed.path)
    if not path or path == ":memory:" or os.path.exists(path):
        return None
    return path


@contextlib.asynccontextmanager
async def open_engine(s: Settings, registry: Registry | None = None, **tuning: Any) -> AsyncIterator[Engine]:
    engine = await flowli.connect(s.url, registry if registry is not None else Registry(), **tuning)
    async with engine:
        yield engine


def require_database(s: Settings, eid: str) -> None:
    path = missing_database(s.url)
    if path is not None:
        raise CLIError(f"unknown execution {eid}: there is no database at {path} (pass --db URL or set FLOWLI_DB)")


def parse_value(text: str, what: str, plain: bool = False) -> Any:
    """A command-line value: JSON (``plain``: the string as it is). What is not JSON is refused,
    with the position of the error: a string is turned into nothing it was not meant to be."""
    if plain:
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CLIError(f"{what} {text!r} is not JSON: {exc.msg} at column {exc.colno}; quote a string as"
                       f" '\"{text}\"', or pass --string to take every value as a plain string") from None


def with_app_hint(exc: UnknownWorkflowError, s: Settings) -> FlowliError:
    if s.app:
        return exc
    return CLIError(f"{exc}; no --app given: pass --app module:registry or set FLOWLI_APP")


def setup_logging() -> None:
    """The engine logs its troubles (a lost lease, a failing sweep) on the ``flowli`` loggers."""
    logger = logging.getLogger("flowli")
    if not logger.handlers:
        logger.addHandler(RichHandler(console=err, show_path=False))
        logger.setLevel(logging.INFO)


# ---- commands ------------------------------------------------------------------------------


ListState = enum.StrEnum("ListState", [(st.value.upper(), st.value) for st in Status] + [("BLOCKED", "blocked")])  # type: ignore[misc]
"""What ``flowli ls --status`` takes: a status, or blocked."""


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
    app_: AppOption = None,
    db: DbOption = None,
) -> None:
    """Run a worker in the foreground until Ctrl-C or SIGTERM (a second one stops it at once)."""
    run(_worker(_settings(ctx, app_, db), concurrency, queue or ["default"], grace, lease_ttl))


async def _worker(s: Settings, concurrency: int, queues: list[str], grace: float = 30.0, lease_ttl: float = 30.0) -> int:
    if not s.app:
        raise CLIError("flowli worker needs --app module:registry (or FLOWLI_APP): a worker runs the workflows of a registry")
    registry = load_registry(s.app)
    setup_logging()
    async with open_engine(s, registry, lease_ttl=timedelta(seconds=lease_ttl)) as engine:
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
            f"flowli worker: {', '.join(registry.names()) or 'no workflows'} from {s.app} on {s.url}; "
            f"queues {', '.join(queues)}; concurrency {concurrency}; lease {lease_ttl:g} s. Ctrl-C or SIGTERM"
            f" stops it (the steps under way get {grace:g} s; a second signal stops it at once).",
            soft_wrap=True,
        )
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
    app_: AppOption = None,
    db: DbOption = None,
) -> None:
    """Start an execution and print its eid (and, with --wait, its result as JSON)."""
    try:
        values = [parse_value(a, f"argument {i + 1}", string) for i, a in enumerate(args or [])]
    except CLIError as exc:
        fail(str(exc))
    run(_start(_settings(ctx, app_, db), workflow, values, by, key, version, queue, wait, timeout))


async def _start(
    s: Settings, workflow: str, values: list[Any], by: str | None, key: str | None, version: str | None,
    queue: str, wait: bool, timeout: float | None,
) -> int:
    registry = registry_of(s)
    try:
        registry.get(workflow, version)  # refuse an unknown workflow before a database file appears
    except UnknownWorkflowError as exc:
        raise with_app_hint(exc, s) from None
    async with open_engine(s, registry) as engine:
        try:
            eid = await engine.start(workflow, *values, by=by, key=key, version=version, queue=queue)
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


def main() -> None:
    """The console script ``flowli``."""
    app(prog_name="flowli")
