"""``flowli serve`` and the commands of the HTTP service's records: ``flowli apps``, ``flowli
keys``, ``flowli users``."""

from __future__ import annotations

import json
import os
import sys
from typing import Annotated, Any

import typer
from rich.table import Table

from flowli.access import Applications

from ._app import AppOption, DbOption, _settings, app, fail, needs, open_engine, out, parse_value, registry_of, run
from ._processes import supervise

apps_app = typer.Typer(help="Applications: each owns its pipelines, API keys, schedules and workers.",
                       no_args_is_help=True)
keys_app = typer.Typer(help="API keys of an application (stored hashed; shown once).", no_args_is_help=True)
users_app = typer.Typer(help="Dashboard users, assigned to applications.", no_args_is_help=True)
app.add_typer(apps_app, name="apps")
app.add_typer(keys_app, name="keys")
app.add_typer(users_app, name="users")

RoleOption = Annotated[str, typer.Option("--role", help="admin, operator, viewer, or a role the application"
                                                        " declares (Registry.role: give its --app).")]


@app.command()
def serve(
    ctx: typer.Context,
    host: Annotated[str, typer.Option("--host", help="The address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="The port to listen on (0: any free one).")] = 8081,
    lease_ttl: Annotated[float, typer.Option("--lease-ttl", metavar="SECONDS",
                                             help="The lease of a job an application worker holds.")] = 30.0,
    no_worker: Annotated[bool, typer.Option("--no-worker", help="Serve the routes only: run no engine worker.")] = False,
    open_: Annotated[bool, typer.Option("--open", help="Local use: the dashboard needs no login from this machine "
                                        "(127.0.0.1 only; refused with another --host), and a browser opens it.")] = False,
    allowed_hosts: Annotated[list[str] | None, typer.Option(
        "--allowed-host", metavar="NAME",
        help="A name (NAME or NAME:PORT) the service answers to besides the loopback names and --host (repeat):"
             " a request whose Host header is another name is refused with 421.")] = None,
    workers: Annotated[int, typer.Option("--workers", min=1, metavar="N",
                                         help="Serve with N processes, one engine each, on one PostgreSQL database"
                                              " (refused on SQLite).")] = 1,
    fd: Annotated[int | None, typer.Option("--fd", hidden=True, help="Serve this inherited socket (--workers).")] = None,
    app_: AppOption = None,
    db: DbOption = None,
) -> None:
    """Run the HTTP service (pipelines, the worker protocol) and, in the same process, the
    engine's worker and sweeper, with the dashboard at ``/``. Prints ``listening on
    http://HOST:PORT`` once it accepts connections."""
    with needs("flowli serve", "server"):
        from flowli.dashboard import Dashboard
        from flowli.http import AllowedHosts
        from flowli.http import serve as serve_http

    s = _settings(ctx, app_, db)
    if open_ and host not in ("127.0.0.1", "localhost", "::1"):
        raise typer.BadParameter(f"--open skips the dashboard's login, so it serves 127.0.0.1 only, not --host {host}")
    try:
        AllowedHosts(host, allowed_hosts or ())
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None

    if workers > 1:
        if s.url.startswith("sqlite"):
            fail(f"flowli serve --workers {workers} runs {workers} processes on one database, which needs PostgreSQL:"
                 " a SQLite file is written by one process (serve it with one)")
        if open_:
            raise typer.BadParameter("--open is for one process on this machine: leave out --workers")

        async def migrated() -> int:
            async with open_engine(s):  # the schema, once, before the processes open it together
                return 0

        run(migrated())
        child = ["--db", s.url, *(["--app", s.app] if s.app else []), "serve", "--host", host,
                 "--lease-ttl", str(lease_ttl), *(["--no-worker"] if no_worker else []),
                 *[f"--allowed-host={h}" for h in allowed_hosts or ()]]
        raise typer.Exit(supervise(workers, host, port, child))

    def announce(line: str) -> None:
        print(line, flush=True)
        if open_ and (sys.platform != "linux" or os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
            import threading
            import webbrowser

            # a desktop's browser, off the event loop; on a server without one the line says where
            url = line.split("listening on ", 1)[1] + "/runs"
            threading.Thread(target=webbrowser.open, args=(url,), daemon=True).start()

    async def go() -> int:
        from flowli.pipelines import install  # here: the other commands do not import the pipelines' models

        registry = registry_of(s)
        install(registry)
        async with open_engine(s, registry) as engine:
            await serve_http(engine, host, port, lease_ttl=lease_ttl, worker=not no_worker, announce=announce,
                             pages=lambda routes, services: Dashboard(routes, engine, services, local=open_),
                             allowed_hosts=allowed_hosts or (), fd=fd, own_process=True)
        return 0

    run(go(), fast_loop=True)


@apps_app.command("create")
def apps_create(
    ctx: typer.Context, name: str,
    as_json: Annotated[bool, typer.Option("--json", help="One line of JSON: the application and its key.")] = False,
    db: DbOption = None,
) -> None:
    """Create an application and print its first API key (an admin key), once."""
    s = _settings(ctx, None, db)

    async def go() -> int:
        async with open_engine(s) as engine:
            application, key = await Applications(engine).create(name)
        if as_json:
            print(json.dumps({"application": application, "apiKey": key}))
        else:
            out.print(f"application {application['name']} (id {application['id']})")
            out.print(f"API key (shown once): {key}", soft_wrap=True)
        return 0

    run(go())


@apps_app.command("ls")
def apps_ls(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON array: each application and its settings.")] = False,
    db: DbOption = None,
) -> None:
    """The applications, with their id and settings (never a key)."""
    s = _settings(ctx, None, db)

    async def go() -> int:
        async with open_engine(s) as engine:
            apps = Applications(engine)
            listed = [{**a, **await apps.settings(a["name"])} for a in await apps.list()]
        if as_json:
            print(json.dumps(listed))
        elif not listed:
            out.print("no application yet: flowli apps create NAME")
        else:
            table = Table("id", "name", "mcp approval")
            for a in listed:
                table.add_row(str(a["id"]), a["name"], a["mcpApproval"])
            out.print(table)
        return 0

    run(go())


@apps_app.command("set")
def apps_set(
    ctx: typer.Context, name: Annotated[str, typer.Argument(metavar="APP")],
    mcp_approval: Annotated[str | None, typer.Option("--mcp-approval", metavar="required|none",
                                                     help="Whether an assistant's writes over MCP wait for a"
                                                          " person's approval.")] = None,
    db: DbOption = None,
) -> None:
    """Change the settings of an application."""
    s = _settings(ctx, None, db)
    values = {"mcpApproval": mcp_approval} if mcp_approval is not None else {}
    if not values:
        raise typer.BadParameter("give a setting to change, e.g. --mcp-approval required")

    async def go() -> int:
        async with open_engine(s) as engine:
            settings = await Applications(engine).configure(name, **values)
        out.print(f"application {name}: mcp approval {settings['mcpApproval']}")
        return 0

    run(go())


@keys_app.command("create")
def keys_create(
    ctx: typer.Context, application: Annotated[str, typer.Argument(metavar="APP")],
    name: Annotated[str | None, typer.Option("--name", help="A name for the key (the actor of its actions).")] = None,
    role: RoleOption = "operator",
    assistant: Annotated[bool, typer.Option("--assistant", help="A key for an AI assistant: it reads, and each of"
                                            " its writes waits for a person's approval, on every route.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One line of JSON: id, name, role, assistant,"
                                                         " apiKey.")] = False,
    db: DbOption = None,
) -> None:
    """Create an API key of an application and print it, once."""
    s = _settings(ctx, None, db)

    async def go() -> int:
        async with open_engine(s, registry_of(s)) as engine:  # its --app declares its custom roles
            key = await Applications(engine).create_key(application, name, role, assistant=assistant)
        if as_json:
            print(json.dumps(key))
        else:
            kind = f"{key['role']}, an assistant's: its writes wait for approval" if assistant else key["role"]
            out.print(f"key {key['id']} {key['name']} ({kind}) of {application}")
            out.print(f"API key (shown once): {key['apiKey']}", soft_wrap=True)
        return 0

    run(go())


@keys_app.command("ls")
def keys_ls(ctx: typer.Context, application: Annotated[str, typer.Argument(metavar="APP")], db: DbOption = None) -> None:
    """The keys of an application (never their secret)."""
    s = _settings(ctx, None, db)

    async def go() -> int:
        async with open_engine(s) as engine:
            keys = await Applications(engine).keys(application)
        table = Table("id", "name", "role", "state", "prefix", "created")
        for k in keys:
            table.add_row(str(k["id"]), k["name"], k["role"] + (" (assistant)" if k["assistant"] else ""),
                          "disabled" if k["disabled"] else "enabled", k["prefix"] + "…", k["createdAt"])
        out.print(table)
        return 0

    run(go())


@keys_app.command("disable")
def keys_disable(ctx: typer.Context, key_id: Annotated[int, typer.Argument(metavar="KEY_ID")], db: DbOption = None) -> None:
    """Disable a key: it is refused with 401 from now on."""
    s = _settings(ctx, None, db)

    async def go() -> int:
        async with open_engine(s) as engine:
            key = await Applications(engine).disable_key(key_id)
        out.print(f"key {key['id']} {key['name']} disabled")
        return 0

    run(go())


@users_app.command("create")
def users_create(
    ctx: typer.Context, email: str,
    password_stdin: Annotated[bool, typer.Option("--password-stdin", help="Read the password from standard input.")] = False,
    role: RoleOption = "viewer",
    applications: Annotated[list[str] | None, typer.Option("--app", help="An application the user may see (repeat).")] = None,
    db: DbOption = None,
) -> None:
    """Create a dashboard user: an admin sees every application; another user sees the
    applications given with --app (none without: give them later with ``flowli users grant``)."""
    s = _settings(ctx, None, db)
    if not password_stdin:
        raise typer.BadParameter("give the password on standard input with --password-stdin")
    password = sys.stdin.readline().rstrip("\n")

    async def go() -> int:
        async with open_engine(s, registry_of(s)) as engine:  # its --app declares its custom roles
            apps = Applications(engine)
            user = await apps.create_user(email, password, role, list(applications or []))
        out.print(f"user {user['email']} ({user['role']}) sees {_sees(user, apps)}")
        return 0

    run(go())


def _sees(user: dict[str, Any], apps: Applications) -> str:
    if apps.sees_all(user["role"]):
        return "every application"
    return ", ".join(user["applications"]) or "no application yet (flowli users grant EMAIL --app APP)"


@users_app.command("password")
def users_password(
    ctx: typer.Context, email: Annotated[str, typer.Argument(metavar="EMAIL")],
    password_stdin: Annotated[bool, typer.Option("--password-stdin", help="Read the new password from standard"
                                                                          " input (one line).")] = False,
    db: DbOption = None,
) -> None:
    """Give a user a new password (a reset): the old one is refused from now on, and their open
    dashboard sessions end at once."""
    s = _settings(ctx, None, db)
    if not password_stdin:
        raise typer.BadParameter("give the new password on standard input with --password-stdin")
    password = sys.stdin.readline().rstrip("\n")

    async def go() -> int:
        async with open_engine(s) as engine:
            user = await Applications(engine).set_password(email, password)
        out.print(f"user {user['email']}: new password set; their open sessions ended")
        return 0

    run(go())


@users_app.command("ls")
def users_ls(ctx: typer.Context, db: DbOption = None) -> None:
    """The dashboard users, with their role, state and applications (never a password)."""
    s = _settings(ctx, None, db)

    async def go() -> int:
        async with open_engine(s, registry_of(s)) as engine:
            apps = Applications(engine)
            users = await apps.users()
        table = Table("id", "email", "role", "state", "applications")
        for u in users:
            table.add_row(str(u["id"]), u["email"], u["role"], "disabled" if u["disabled"] else "enabled",
                          _sees(u, apps))
        out.print(table)
        return 0

    run(go())


def _user_action(ctx: typer.Context, email: str, db: str | None, action: str) -> None:
    s = _settings(ctx, None, db)

    async def go() -> int:
        async with open_engine(s) as engine:
            apps = Applications(engine)
            user = await (apps.disable_user(email) if action == "disable" else apps.delete_user(email))
        out.print(f"user {user['email']} {action}d: their login is refused and their dashboard sessions ended")
        return 0

    run(go())


@users_app.command("disable")
def users_disable(ctx: typer.Context, email: str, db: DbOption = None) -> None:
    """Disable a user: their login is refused and their open dashboard sessions end at once."""
    _user_action(ctx, email, db, "disable")


@users_app.command("delete")
def users_delete(ctx: typer.Context, email: str, db: DbOption = None) -> None:
    """Delete a user: their open dashboard sessions end at once; the email may be used again."""
    _user_action(ctx, email, db, "delete")


@users_app.command("grant")
def users_grant(
    ctx: typer.Context, email: str,
    applications: Annotated[list[str], typer.Option("--app", help="An application the user may see (repeat).")],
    db: DbOption = None,
) -> None:
    """Give a user more applications to see (their open sessions see them at once)."""
    s = _settings(ctx, None, db)

    async def go() -> int:
        async with open_engine(s, registry_of(s)) as engine:
            apps = Applications(engine)
            user = await apps.grant_user(email, list(applications))
        out.print(f"user {user['email']} ({user['role']}) sees {_sees(user, apps)}")
        return 0

    run(go())


schedules_app = typer.Typer(help="Schedules: a pipeline declaration and a trigger (cron, interval or once).",
                            no_args_is_help=True)
app.add_typer(schedules_app, name="schedules")


async def _schedules_of(engine: Any, application: str) -> tuple[Any, Any]:
    from flowli.access import Access
    from flowli.pipelines import Pipelines, Schedules

    found = await Applications(engine).get(application)
    access = Access(application, found["id"], "admin", "cli")
    return access, Schedules(engine, Pipelines(engine))


@schedules_app.command("create")
def schedules_create(
    ctx: typer.Context, application: Annotated[str, typer.Argument(metavar="APP")], name: str,
    pipeline: Annotated[typer.FileText, typer.Option("--pipeline", metavar="FILE",
                                                     help="The pipeline's create body, a JSON file (- for stdin).")],
    cron: Annotated[str | None, typer.Option("--cron", help="A cron expression, e.g. '0 9 * * 1-5'.")] = None,
    timezone: Annotated[str | None, typer.Option("--timezone", help="The cron's time zone, e.g. Europe/Berlin.")] = None,
    interval: Annotated[float | None, typer.Option("--interval", metavar="SECONDS", help="Fire every SECONDS.")] = None,
    run_at: Annotated[str | None, typer.Option("--run-at", metavar="INSTANT", help="Fire once, at an ISO instant.")] = None,
    db: DbOption = None,
) -> None:
    """Create a schedule of an application."""
    s = _settings(ctx, None, db)
    text = pipeline.read()

    async def go() -> int:
        declared = parse_value(text, "--pipeline")
        async with open_engine(s) as engine:
            access, schedules = await _schedules_of(engine, application)
            made = await schedules.create(access, {"name": name, "cron": cron, "timezone": timezone,
                                                   "intervalSeconds": interval, "runAt": run_at, "pipeline": declared})
        out.print(f"schedule {made['id']} {made['name']}: next firing {made['nextFireAt']}")
        return 0

    run(go())


@schedules_app.command("ls")
def schedules_ls(ctx: typer.Context, application: Annotated[str, typer.Argument(metavar="APP")],
                 db: DbOption = None) -> None:
    """The schedules of an application."""
    s = _settings(ctx, None, db)

    async def go() -> int:
        async with open_engine(s) as engine:
            access, schedules = await _schedules_of(engine, application)
            listed = await schedules.list(access)
        table = Table("id", "name", "trigger", "state", "next firing", "firings")
        for sc in listed:
            t = sc.get("cron") and f"cron {sc['cron']} {sc['timezone']}" or (
                f"every {sc['intervalSeconds']} s" if sc.get("intervalSeconds") else f"once {sc.get('runAt')}")
            table.add_row(str(sc["id"]), sc["name"], t, sc["state"], str(sc["nextFireAt"]), str(sc["firings"]))
        out.print(table)
        return 0

    run(go())


def _schedule_action(application: str, schedule_id: int, s: Any, action: str) -> None:
    async def go() -> int:
        async with open_engine(s) as engine:
            access, schedules = await _schedules_of(engine, application)
            if action == "rm":
                await schedules.delete(access, schedule_id)
                out.print(f"schedule {schedule_id} deleted")
            else:
                made = await schedules.set_state(access, schedule_id, "paused" if action == "pause" else "enabled")
                out.print(f"schedule {made['id']} {made['name']} {made['state']}")
        return 0

    run(go())


@schedules_app.command("pause")
def schedules_pause(ctx: typer.Context, application: Annotated[str, typer.Argument(metavar="APP")],
                    schedule_id: Annotated[int, typer.Argument(metavar="ID")], db: DbOption = None) -> None:
    """Stop a schedule's firings until it is resumed."""
    _schedule_action(application, schedule_id, _settings(ctx, None, db), "pause")


@schedules_app.command("resume")
def schedules_resume(ctx: typer.Context, application: Annotated[str, typer.Argument(metavar="APP")],
                     schedule_id: Annotated[int, typer.Argument(metavar="ID")], db: DbOption = None) -> None:
    """Fire a paused schedule again."""
    _schedule_action(application, schedule_id, _settings(ctx, None, db), "resume")


@schedules_app.command("rm")
def schedules_rm(ctx: typer.Context, application: Annotated[str, typer.Argument(metavar="APP")],
                 schedule_id: Annotated[int, typer.Argument(metavar="ID")], db: DbOption = None) -> None:
    """Delete a schedule (the pipelines it created stay)."""
    _schedule_action(application, schedule_id, _settings(ctx, None, db), "rm")


@app.command()
def check(
    url: Annotated[str, typer.Option("--url", envvar="FLOWLI_URL", help="The service's base URL.")] = "http://127.0.0.1:8081",
    api_key: Annotated[str | None, typer.Option("--api-key", envvar="FLOWLI_API_KEY",
                                                help="An operator key of an application (env FLOWLI_API_KEY).")] = None,
    timeout: Annotated[float, typer.Option("--timeout", metavar="SECONDS", help="How long the path may take.")] = 30.0,
) -> None:
    """The installation test: against a running service, start a temporary HTTP application
    worker, create a pipeline through POST /pipelines/idempotent, and print each step of the
    path until the pipeline completes."""
    import asyncio
    import time
    import uuid

    with needs("flowli check", "client"):
        import httpx

        from flowli.client import ClientError, HttpWorker, PipelinesClient

    if not api_key:
        raise typer.BadParameter("give an application's key with --api-key (or FLOWLI_API_KEY)")

    async def go() -> int:
        handler = f"FlowliCheck-{uuid.uuid4().hex[:8]}"
        started = time.monotonic()

        def step(text: str) -> None:
            out.print(f"[{time.monotonic() - started:6.2f}s] {text}", soft_wrap=True)

        try:
            async with httpx.AsyncClient(timeout=5) as probe:
                health = await probe.get(f"{url.rstrip('/')}/healthz")
        except httpx.HTTPError as exc:
            step(f"service {url}: not reachable ({exc})")
            return 2
        step(f"service {url}: /healthz {health.status_code} {health.text.strip()}")
        worker = HttpWorker(url, api_key, f"flowli-check-{os.getpid()}", wait_seconds=1)
        ran: list[str] = []

        @worker.handler(handler)
        async def work(job: dict[str, Any]) -> str:
            ran.append(job["stageName"])
            step(f"worker: got job {job['stageName']} (pipeline {job['pipelineId']}, stage {job['stageId']},"
                 f" attempt {job['attempt']}); lease acquired")
            return f"checked {job['stageName']}"

        running = asyncio.create_task(worker.run(concurrency=2))
        try:
            async with PipelinesClient(url, api_key) as client:
                made = await client.create_idempotent({"name": "flowli-check", "stages": [
                    {"stageName": "first", "stageHandlerName": handler},
                    {"stageName": "second", "stageHandlerName": handler}]}, f"flowli-check:{uuid.uuid4()}")
                pid = made["pipeline"]["id"]
                step(f"created pipeline {pid} through POST /pipelines/idempotent ({made['pipeline']['status']})")
                if worker.session is not None:
                    step(f"worker bootstrapped: {worker.session['workerId']}")
                seen: dict[str, str] = {}
                while time.monotonic() - started < timeout:
                    view = await client.get(pid)
                    for s in view["stages"]:
                        if seen.get(s["name"]) != s["status"]:
                            seen[s["name"]] = s["status"]
                            step(f"stage {s['name']}: {s['status']}" + (f" -> {s['output']!r}" if s["output"] else ""))
                    if view["status"] in ("Completed", "Failed", "Cancelled"):
                        step(f"pipeline {pid}: {view['status']}")
                        return 0 if view["status"] == "Completed" else 1
                    await asyncio.sleep(0.1)
                step(f"pipeline {pid}: not completed within {timeout:g} s (is a worker of the service running?)")
                return 1
        except ClientError as exc:
            step(f"refused: {exc}")
            return 2
        finally:
            worker.stop()
            await asyncio.gather(running, return_exceptions=True)

    run(go())
