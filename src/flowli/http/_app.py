"""The HTTP service: a FastAPI app over the Engine (through ``flowli.pipelines``), never a store.
Errors are ``{"error": "<one sentence>"}`` with the contract's status; never a 500 for bad
input, never a stack trace in a body."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.types import ASGIApp, Receive, Scope, Send

from flowli.access import Access, key_of
from flowli.engine import Engine
from flowli.mcp import install_approvals
from flowli.metrics import Metrics
from flowli.pipelines import Session
from flowli.services import Services

from ._body import MAX_BODY, BodyLimit
from ._catalog_routes import catalog_routes
from ._docs import add_docs
from ._errors import error, register
from ._hosts import AllowedHosts, HostGuard
from ._lean import Lean, session_token
from ._mcp_mount import McpMount
from ._openapi import document
from ._pipeline_routes import pipeline_routes
from ._schedule_routes import policy_routes, schedule_routes
from ._worker_routes import worker_routes

__all__ = ["MAX_BODY", "BodyLimit", "Pages", "Service", "create_app", "error"]

Pages = Callable[[ASGIApp, Services], ASGIApp]
"""Pages served in front of the service's routes (the dashboard): given the routes (what the
pages do not answer goes on to them) and the services, the app that answers first."""


class Routes:
    """The service's routes: ``/mcp`` (the MCP server's streamable HTTP) and the lean routes
    (``_lean``) beside the FastAPI routes (``api``)."""

    def __init__(self, api: FastAPI, mcp: ASGIApp, lean: Lean | None = None):
        self.api, self.mcp, self.lean = api, mcp, lean

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = scope["path"]
            if path == "/mcp" or path.startswith("/mcp/"):
                await self.mcp(scope, receive, send)
                return
            if self.lean is not None and (routed := self.lean.route(scope)) is not None:
                await self.lean.answer(*routed, scope, receive, send)
                return
        await self.api(scope, receive, send)


def from_this_machine(request: Any) -> bool:
    """A request from this machine itself: a loopback peer, not relayed by a proxy."""
    host = request.client.host if request.client else ""
    relayed = any(h in request.headers for h in ("x-forwarded-for", "forwarded", "x-real-ip"))
    return host in ("127.0.0.1", "::1") and not relayed


def guarded(app: ASGIApp, hosts: AllowedHosts) -> HostGuard:
    """``app`` behind what every request passes first: the check of its Host and Origin
    (``HostGuard``), then the body limit."""
    return HostGuard(BodyLimit(app), hosts)


class Service:
    """The ASGI app of ``flowli serve``: every request passes the check of its Host and Origin
    and the body limit (``guarded``), then goes to the pages in front, if any (the dashboard),
    else to the routes (``/mcp``, a lean route, the FastAPI routes of ``api``). ``services`` are
    the ones every part of it uses, built once; ``mcp`` is ``/mcp`` (built at its first request;
    ``serve`` closes it when it stops)."""

    def __init__(self, api: FastAPI, routes: Routes, services: Services, mcp: McpMount, hosts: AllowedHosts,
                 pages: Pages | None = None):
        self.api, self.routes, self.services, self.mcp, self.hosts = api, routes, services, mcp, hosts
        self.app = guarded(routes if pages is None else pages(routes, services), hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


def create_app(engine: Engine, *, lease_ttl: float = 30.0, host: str = "127.0.0.1",
               allowed_hosts: Iterable[str] = (), pages: Pages | None = None) -> Service:
    """The service: its routes and ``/mcp`` (and ``pages`` in front of them), answering requests
    whose Host is a loopback name, ``host`` (unless a wildcard) or one of ``allowed_hosts`` (see
    ``flowli.http._hosts``)."""
    app = FastAPI(title="flowli", version="1", summary="Pipelines over HTTP: application workers in any language",
                  docs_url=None, redoc_url=None)
    add_docs(app)  # /docs and /redoc, their files from the package, never from a CDN
    services = Services(engine, lease_ttl=lease_ttl)
    pipelines, workers, apps = services.pipelines, services.workers, services.applications

    register(app)  # the refusals (``_errors.REFUSALS``), the lean routes' too

    async def access(request: Request) -> Access:
        return await apps.authenticate(key_of(request.headers))

    async def session(request: Request) -> Session:
        return await workers.session(session_token(request.headers))

    metrics = Metrics(engine)
    # the stage metrics of this process, beside the engine's (a collector by its collect(): see StageTimings)
    metrics.registry.register(workers.timings)  # type: ignore[arg-type]

    @app.get("/metrics", include_in_schema=False)
    async def metrics_text(request: Request) -> Response:
        if not from_this_machine(request):
            return error(403, "GET /metrics answers requests from this machine only (a loopback peer, not"
                              " relayed): scrape it with an agent beside the service")
        return Response(await metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz", response_class=PlainTextResponse,
             responses={200: {"content": {"text/plain": {"schema": {"type": "string", "const": "ok"}}}}})
    async def healthz() -> str:
        return "ok"

    for router in (pipeline_routes(pipelines, access), worker_routes(workers, access, session),
                   schedule_routes(services.schedules, access), policy_routes(services.policies, access),
                   catalog_routes(services.catalog, access)):
        app.include_router(router)

    document(app, {access: "apiKey", session: "workerSession"})  # the OpenAPI document: every refusal, the bodies read after the credential
    install_approvals(engine.registry)  # an assistant's writes waiting for a person run here, /mcp built or not
    mcp = McpMount(services, apps, host)
    routes = Routes(app, mcp, Lean(pipelines, workers, apps))
    return Service(app, routes, services, mcp, AllowedHosts(host, allowed_hosts), pages)
