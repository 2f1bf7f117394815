"""The dashboard's ASGI app: ``Dashboard(api, engine)`` serves its own pages and hands every other
request to ``api`` (the HTTP service), whose services (pipelines, workers, schedules, catalog) it
shares. A path both serve (``/workers``, ``/schedules``, ``/catalog``, ``/pipelines/{id}``) is the
dashboard's for a browser (no API key, HTML accepted or a session cookie sent), the API's for the
rest. Every page reads through the Engine and those services, scoped to the applications of the
user logged in; every action goes through them with the user as the actor."""

from __future__ import annotations

import logging
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

from flowli.access import Access, Applications, NotFound
from flowli.catalog import Catalog
from flowli.domain import DECIDE_RUNS, EVERY_CAPABILITY, OPERATE_RUNS, lacking
from flowli.engine import Engine
from flowli.http import STATUS, from_this_machine
from flowli.pipelines import Pipelines, Schedules, Workers
from flowli.services import Services

from . import _live, _ops, _overview, _run, _runs
from ._auth import LOGIN_CSRF_COOKIE, SESSION_COOKIE, SESSION_TTL, Sessions, TooManyLogins, User, same
from ._refusals import Refused
from ._tones import tone

HERE = Path(__file__).parent
log = logging.getLogger("flowli.dashboard")
ONLY_OURS = ("/", "/login", "/logout", "/overview", "/runs", "/inbox", "/stuck")
OURS_PREFIX = ("/overview/", "/runs/", "/dashboard-static/", "/stuck/", "/inbox/")
SHARED = ("/workers", "/schedules", "/catalog")
SHARED_PREFIX = ("/pipelines/", "/schedules/")
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self';"
       " font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
"""The dashboard's Content-Security-Policy: its own script and stylesheet files only (no inline
script or style), nothing from another site, never in a frame."""
SECURITY_HEADERS = [(b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"same-origin"), (b"x-frame-options", b"DENY")]
"""Sent with every answer of the dashboard. ``same-origin``: no page address leaves for another
site, and a form keeps its Origin header (the Host and Origin check needs it)."""


HOME = "/overview"
"""The first page after login (and the page ``/`` opens)."""
LOCAL_USER = "localhost"
"""Who acts from this machine under ``flowli serve --open`` (the journal says ``human:localhost``)."""


def _browser(scope: Scope) -> bool:
    headers = dict(scope.get("headers") or [])
    if b"x-api-key" in headers or b"authorization" in headers:
        return False
    return b"text/html" in headers.get(b"accept", b"") or SESSION_COOKIE.encode() + b"=" in headers.get(b"cookie", b"")


def ours(scope: Scope) -> bool:
    """Whether a request is the dashboard's (see the module's note)."""
    if scope["type"] != "http":
        return False
    path = scope.get("path", "")
    if path in ONLY_OURS or path.startswith(OURS_PREFIX):
        return True
    return (path in SHARED or path.startswith(SHARED_PREFIX)) and _browser(scope)


class Dashboard:
    """The dashboard in front of the service's routes: the dashboard's paths here, the rest to
    ``api`` (served as ``flowli.http.create_app(engine, pages=...)``'s pages). ``services`` are the
    service's own, built once."""

    def __init__(self, api: ASGIApp, engine: Engine, services: Services, *, local: bool = False):
        self.api = api
        self.engine = engine
        self.pipelines: Pipelines = services.pipelines
        self.workers: Workers = services.workers
        self.schedules: Schedules = services.schedules
        self.catalog: Catalog = services.catalog
        self.applications: Applications = services.applications
        self.sessions = Sessions(engine, services.applications)
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        self.templates.env.filters["tone"] = tone
        self._app_ids: dict[str, int] = {}
        self.local = local
        """``flowli serve --open``: a request from this machine needs no login."""
        self._local_csrf = secrets.token_urlsafe(24)
        routes = [
            Route("/", self.home),
            Route("/login", self.login_form, methods=["GET"]),
            Route("/login", self.login, methods=["POST"]),
            Route("/logout", self.logout, methods=["POST"]),
            *_overview.routes(self), *_runs.routes(self), *_live.routes(self), *_run.routes(self), *_ops.routes(self),
            Mount("/dashboard-static", StaticFiles(directory=str(HERE / "static")), name="static"),
        ]
        self.app = Starlette(routes=routes, exception_handlers={Refused: self._refused, Exception: self._crashed})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not ours(scope):
            await self.api(scope, receive, send)
            return

        async def secured(message: Any) -> None:
            if message["type"] == "http.response.start":
                names = {name for name, _ in SECURITY_HEADERS}
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
                message = {**message, "headers": kept + SECURITY_HEADERS}
            await send(message)

        await self.app(scope, receive, secured)

    # ---- for the pages --------------------------------------------------------------------

    async def user(self, request: Request) -> User:
        """The user logged in; a page without one answers with the login page (Refused 401 is
        turned into a redirect by ``_refused``)."""
        user = await self.sessions.user(request.cookies.get(SESSION_COOKIE))
        if user is None and self.local and from_this_machine(request):
            apps = tuple(a["name"] for a in await self.applications.list())
            user = User(LOCAL_USER, "admin", apps, self._local_csrf, frozenset({EVERY_CAPABILITY}))
        if user is None:
            raise Refused(401, "log in first")
        return user

    def page(self, request: Request, name: str, user: User | None, http_status: int = 200, **context: Any) -> HTMLResponse:
        return self.templates.TemplateResponse(request, name, {"user": user, **context}, status_code=http_status)

    def application(self, request: Request, user: User, wanted: str | None = None) -> str | None:
        """The application a page shows: ``wanted`` (or ``?application=``) when the user may see
        it, else their first one; None when they may see none."""
        wanted = wanted or request.query_params.get("application")
        if wanted in user.applications:
            return wanted
        return user.applications[0] if user.applications else None

    async def access(self, user: User, application: str) -> Access:
        """The user as the services' caller in ``application``: their role, their email as the
        actor (a person: the journal records ``human:EMAIL``)."""
        if application not in user.applications:
            raise Refused(404, f"There is no application {application} among yours.")
        if application not in self._app_ids:
            try:
                self._app_ids[application] = (await self.applications.get(application))["id"]
            except NotFound:
                raise Refused(404, f"There is no application {application}.") from None
        return Access(application, self._app_ids[application], user.role, user.email, actor_kind="human",
                      roles=self.applications.roles)

    async def form(self, request: Request, user: User, capability: str | None = OPERATE_RUNS) -> Any:
        """The form of an action, its CSRF token checked; a user whose role lacks ``capability``
        is refused before anything (None: the caller checks it with ``require`` once the form
        says which action it is)."""
        form = await request.form()
        if not same(form.get("csrf"), user.csrf):
            raise Refused(403, "The form expired or was not sent from this dashboard: reload the page and try again.")
        if capability is not None:
            self.require(user, capability)
        return form

    @staticmethod
    def require(user: User, capability: str) -> None:
        """Refuse (403) a user whose role lacks ``capability``."""
        if not user.holds(capability):
            what = "answer a decision of a run" if capability == DECIDE_RUNS else "act on runs"
            raise Refused(403, f"{user.email} has role {user.role}, which lacks {lacking(capability)[1]}:"
                               f" it cannot {what}.")

    async def _refused(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, Refused)
        if exc.status == 401:
            return RedirectResponse("/login", status_code=303)
        user = await self.sessions.user(request.cookies.get(SESSION_COOKIE))
        return self.page(request, "error.html", user, exc.status, message=exc.message)

    async def _crashed(self, request: Request, exc: Exception) -> Response:
        log.error("the page %s failed", request.url.path, exc_info=exc)
        return self.page(request, "error.html", None, 500,
                         message="The dashboard failed to answer this request; the service's log says why.")

    # ---- login ----------------------------------------------------------------------------

    async def home(self, request: Request) -> Response:
        return RedirectResponse(HOME, status_code=303)

    async def login_form(self, request: Request, error: str | None = None, status: int = 200) -> Response:
        token = secrets.token_urlsafe(24)
        response = self.page(request, "login.html", None, status, csrf=token, error=error)
        response.set_cookie(LOGIN_CSRF_COOKIE, token, httponly=True, samesite="lax", max_age=3600,
                            secure=request.url.scheme == "https")
        return response

    async def login(self, request: Request) -> Response:
        form = await request.form()
        if not same(form.get("csrf"), request.cookies.get(LOGIN_CSRF_COOKIE)):
            return await self.login_form(request, "The form expired: log in again.", 403)
        try:
            token = await self.sessions.login(form.get("email"), form.get("password"),
                                              request.client.host if request.client else "")
        except TooManyLogins as exc:
            refused = await self.login_form(request, str(exc), STATUS[exc.refusal])
            refused.headers["Retry-After"] = str(exc.retry_after)
            return refused
        if token is None:
            return await self.login_form(request, "Wrong email or password.", 401)
        response = RedirectResponse(HOME, status_code=303)
        # Secure over HTTPS: the scheme of the request, or the one a proxy on this machine relays
        # in X-Forwarded-Proto (uvicorn trusts FORWARDED_ALLOW_IPS, 127.0.0.1 and ::1 by default)
        response.set_cookie(SESSION_COOKIE, token, httponly=True, samesite="lax",
                            max_age=int(SESSION_TTL.total_seconds()), secure=request.url.scheme == "https")
        response.delete_cookie(LOGIN_CSRF_COOKIE)
        return response

    async def logout(self, request: Request) -> Response:
        user = await self.sessions.user(request.cookies.get(SESSION_COOKIE))
        form = await request.form()
        if user is not None and not same(form.get("csrf"), user.csrf):
            return self.page(request, "error.html", user, 403, message="The form expired: reload the page.")
        await self.sessions.logout(request.cookies.get(SESSION_COOKIE))
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE)
        return response
