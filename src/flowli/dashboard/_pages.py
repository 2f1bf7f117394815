"""The dashboard's pages: server-rendered (Jinja2, autoescaped), read through the Engine, scoped
to the applications of the user logged in. ``Dashboard(api, engine)`` is an ASGI app that serves
its own paths and hands every other one to ``api`` (the HTTP service)."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Receive, Scope, Send

from flowli.domain import Status, UnknownExecutionError
from flowli.engine import Engine

from ._auth import LOGIN_CSRF_COOKIE, SESSION_COOKIE, SESSION_TTL, Sessions, User, same

HERE = Path(__file__).parent
PAGE_SIZE = 50
VALUE_CHARS = 400
"""A journal entry's value shows this many characters at most in the timeline."""
OWN_PATHS = ("/", "/login", "/logout", "/runs")
STATUSES = tuple(s.value for s in Status)


class Dashboard:
    """The service with the dashboard in front: the dashboard's paths here, the rest to ``api``."""

    def __init__(self, api: ASGIApp, engine: Engine):
        self.api = api
        self.engine = engine
        self.sessions = Sessions(engine)
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        self.app = Starlette(routes=[
            Route("/", self.home),
            Route("/login", self.login_form, methods=["GET"]),
            Route("/login", self.login, methods=["POST"]),
            Route("/logout", self.logout, methods=["POST"]),
            Route("/runs", self.runs),
            Route("/runs/{eid:path}", self.run),
            Mount("/dashboard-static", StaticFiles(directory=str(HERE / "static")), name="static"),
        ])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path in OWN_PATHS or path.startswith(("/runs/", "/dashboard-static/")):
            await self.app(scope, receive, send)
        else:
            await self.api(scope, receive, send)

    # ---- sessions -------------------------------------------------------------------------

    async def _user(self, request: Request) -> User | None:
        return await self.sessions.user(request.cookies.get(SESSION_COOKIE))

    def _page(self, request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        return self.templates.TemplateResponse(request, name, context, status_code=status)

    async def home(self, request: Request) -> Response:
        return RedirectResponse("/runs", status_code=303)

    async def login_form(self, request: Request, error: str | None = None, status: int = 200) -> Response:
        token = secrets.token_urlsafe(24)
        response = self._page(request, "login.html", status, csrf=token, error=error, user=None)
        response.set_cookie(LOGIN_CSRF_COOKIE, token, httponly=True, samesite="lax", max_age=3600)
        return response

    async def login(self, request: Request) -> Response:
        form = await request.form()
        if not same(form.get("csrf"), request.cookies.get(LOGIN_CSRF_COOKIE)):
            return await self.login_form(request, "The form expired: log in again.", 403)
        token = await self.sessions.login(form.get("email"), form.get("password"))
        if token is None:
            return await self.login_form(request, "Wrong email or password.", 401)
        response = RedirectResponse("/runs", status_code=303)
        response.set_cookie(SESSION_COOKIE, token, httponly=True, samesite="lax",
                            max_age=int(SESSION_TTL.total_seconds()))
        response.delete_cookie(LOGIN_CSRF_COOKIE)
        return response

    async def logout(self, request: Request) -> Response:
        user = await self._user(request)
        form = await request.form()
        if user is not None and not same(form.get("csrf"), user.csrf):
            return self._page(request, "error.html", 403, user=user, message="The form expired: reload the page.")
        await self.sessions.logout(request.cookies.get(SESSION_COOKIE))
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE)
        return response

    # ---- runs -----------------------------------------------------------------------------

    def _application(self, request: Request, user: User) -> str | None:
        """The application a page shows: ``?application=`` when the user may see it, else their
        first one; None when they may see none."""
        wanted = request.query_params.get("application")
        if wanted in user.applications:
            return wanted
        return user.applications[0] if user.applications else None

    async def runs(self, request: Request) -> Response:
        user = await self._user(request)
        if user is None:
            return RedirectResponse("/login", status_code=303)
        application = self._application(request, user)
        status = request.query_params.get("status") or None
        workflow = request.query_params.get("workflow") or None
        cursor = request.query_params.get("cursor") or None
        if status is not None and status not in STATUSES:
            return self._page(request, "error.html", 400, user=user,
                              message=f"status must be one of {', '.join(STATUSES)}, not {status!r}")
        page = None
        if application is not None:
            try:
                page = await self.engine.list(status, workflow, PAGE_SIZE, application=application, cursor=cursor)
            except ValueError as exc:
                return self._page(request, "error.html", 400, user=user, message=str(exc))
        return self._page(request, "runs.html", user=user, application=application, page=page,
                          filters={"status": status or "", "workflow": workflow or ""}, statuses=STATUSES)

    async def run(self, request: Request) -> Response:
        user = await self._user(request)
        if user is None:
            return RedirectResponse("/login", status_code=303)
        eid = request.path_params["eid"]
        # the run of any application of the user's; another application's is unknown
        for application in user.applications:
            try:
                record = await self.engine.status(eid, application=application)
            except UnknownExecutionError:
                continue
            journal = await self.engine.journal(eid, application=application)
            return self._page(request, "run.html", user=user, application=application, record=record,
                              entries=[_row(e) for e in journal])
        return self._page(request, "error.html", 404, user=user, message=f"There is no run {eid} in your applications.")


def _row(entry: Any) -> dict[str, Any]:
    """A journal entry as the timeline shows it (the template escapes every field)."""
    value = "" if entry.value is None else json.dumps(entry.value, default=str)
    if len(value) > VALUE_CHARS:
        value = value[:VALUE_CHARS] + "…"
    error = entry.error or {}
    prov = entry.provenance
    return {"seq": entry.seq, "kind": entry.kind.value, "fid": entry.fid or "", "attempt": entry.attempt,
            "value": value, "error_type": error.get("type"), "error_code": error.get("code"),
            "error_message": error.get("message"), "actor": str(prov.actor) if prov else "",
            "site": prov.site.worker or prov.site.host if prov and prov.site else "", "at": prov.at if prov else None}
