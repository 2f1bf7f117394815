"""The ``flowli`` command: a thin layer over :class:`flowli.Engine`.

This module holds the app, its global options and the helpers of every command; the commands
are in ``_commands`` (workers and executions) and ``_operators`` (what an operator does to a run).
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
import sys
from dataclasses import dataclass
from typing import Annotated, Any, AsyncIterator, Callable, Coroutine, Iterator, NoReturn
from urllib.parse import unquote, urlparse

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.text import Text

import flowli
from flowli._connect import default_url
from flowli.domain import FlowliError, Status, UnknownWorkflowError, checked_eid
from flowli.engine import Engine, Registry

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


class _Group(typer.core.TyperGroup):
    """flowli's commands: their help names an option's value by what it is (``--queue QUEUE``,
    ``--format [table|json]``) and shows nothing beside a flag, where typer's shows a Python type
    (``<str>``, ``<bool>``)."""

    def get_params(self, ctx: Any) -> Any:
        return _named(super().get_params(ctx))

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            _name_values(command)
        return command


def _name_values(command: Any) -> None:
    if not isinstance(command, _Group):  # its help option is made on each call: named on each call
        params = type(command).get_params
        command.get_params = lambda ctx: _named(params(command, ctx))
    for sub in (getattr(command, "commands", None) or {}).values():
        _name_values(sub)


def _named(params: Any) -> Any:
    """Give each parameter without a metavar of its own the one its help shows (typer's classes,
    whichever release: a choice's choices are on its type or its type descriptor)."""
    for p in params:
        if getattr(p, "param_type_name", None) == "argument":  # its name says it already
            p.display_type_rich = lambda ctx: None
            continue
        if p.metavar is not None:
            continue
        desc = getattr(p, "type_descriptor", None)
        choices = desc.choices if getattr(desc, "is_choice", False) else getattr(getattr(p, "type", None), "choices", None)
        if getattr(p, "is_flag", False):
            p.metavar = ""
        elif choices:
            p.metavar = "[" + "|".join(str(getattr(c, "value", c)) for c in choices) + "]"
        else:
            p.metavar = (p.name or "value").upper()
    return params


app = typer.Typer(
    name="flowli",
    cls=_Group,
    help="flowli: durable execution for Python workflows. Run a worker, start executions, read their journals.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode="markdown",  # a docstring's ``code`` shows as code, and its lines wrap as one paragraph
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


def _fast_loop() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:  # not on every platform: the standard loop then
        return None
    return uvloop.new_event_loop


EXTRAS = {"fastapi": "server", "fastapi_offline": "server", "starlette": "server", "uvicorn": "server",
          "jinja2": "server", "multipart": "server", "python_multipart": "server", "sse_starlette": "server",
          "httptools": "server", "mcp": "mcp", "httpx": "client", "httpcore": "client", "certifi": "client",
          "sniffio": "client"}
"""The packages of each optional extra of flowli (``pyproject.toml``): a command that imports one
that is missing says which extra to install."""


@contextlib.contextmanager
def needs(command: str, extra: str) -> Iterator[None]:
    """The imports of ``command``, which needs ``extra`` (``server``, ``mcp``, ``client``): one
    that is not installed ends the command with the ``pip install`` that adds it."""
    try:
        yield
    except ModuleNotFoundError as exc:
        top = (exc.name or "").split(".")[0]
        if top not in EXTRAS:
            raise
        fail(f"{command} needs flowli's {extra} extra ({top} is not installed): pip install 'flowli[{extra}]'")


def fail(message: str, code: int = EXIT_REFUSED) -> NoReturn:
    err.print(Text.assemble(("error: ", "bold red"), (message, "red")), soft_wrap=True)
    raise typer.Exit(code)


def run(coro: Coroutine[Any, Any, int | None], *, fast_loop: bool = False) -> None:
    """Run a command's coroutine; a flowli error is one red line and exit code 2. With
    ``fast_loop`` (the long-running service and worker), on uvloop's event loop when it is
    installed."""
    try:
        with asyncio.Runner(loop_factory=_fast_loop() if fast_loop else None) as runner:
            code = runner.run(coro)
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
    """Before a command reads execution ``eid``: the database exists, and ``eid`` has an eid's
    form (UnknownExecutionError, one line, for another)."""
    checked_eid(eid)
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
