"""The HTTP service: a FastAPI app over the Engine (through ``flowli.pipelines``), never a store.
Errors are ``{"error": "<one sentence>"}`` with the contract's status; never a 500 for bad
input, never a stack trace in a body."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from mcp.server.transport_security import TransportSecuritySettings
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic.json_schema import models_json_schema
from starlette.types import ASGIApp, Receive, Scope, Send

from flowli.access import Access, key_of
from flowli.engine import Engine
from flowli.mcp import MCP_SESSION_IDLE_SECONDS, from_headers
from flowli.mcp import McpGate as mcp_gate
from flowli.mcp import build as build_mcp
from flowli.metrics import Metrics
from flowli.pipelines import Session
from flowli.services import Services

from . import _batch as batch
from . import _models as m
from ._body import BODIES, MAX_BODY, BodyLimit, json_body, takes
from ._catalog_routes import add_catalog_routes
from ._docs import add_docs
from ._errors import error, register
from ._hosts import AllowedHosts, HostGuard
from ._lean import Lean, gone, session_token
from ._schedule_routes import add_schedule_routes

__all__ = ["MAX_BODY", "BodyLimit", "create_app", "error"]


class WithMcp:
    """The service's ASGI app: ``/mcp`` (the MCP server's streamable HTTP) and the lean routes
    (``_lean``) beside the FastAPI routes. ``state`` is the FastAPI app's."""

    def __init__(self, api: FastAPI, mcp: ASGIApp, lean: Lean | None = None):
        self.api, self.mcp, self.lean = api, mcp, lean
        self.state = api.state

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


def guarded(app: Any, hosts: AllowedHosts) -> HostGuard:
    """``app`` behind what every request passes first: the check of its Host and Origin
    (``HostGuard``), then the body limit."""
    return HostGuard(BodyLimit(app), hosts, service=app)


def create_app(engine: Engine, *, lease_ttl: float = 30.0, host: str = "127.0.0.1",
               allowed_hosts: Iterable[str] = ()) -> FastAPI:
    """The service: its routes and ``/mcp``, answering requests whose Host is a loopback name,
    ``host`` (unless a wildcard) or one of ``allowed_hosts`` (see ``flowli.http._hosts``)."""
    app = FastAPI(title="flowli", version="1", summary="Pipelines over HTTP: application workers in any language",
                  docs_url=None, redoc_url=None)
    add_docs(app)  # /docs and /redoc, their files from the package, never from a CDN
    services = Services(engine, lease_ttl=lease_ttl)
    pipelines, workers, apps = services.pipelines, services.workers, services.applications
    policies, schedules, catalog = services.policies, services.schedules, services.catalog
    app.state.services = services  # the dashboard and ``serve`` take theirs from here

    register(app)  # the refusals (``_errors.REFUSALS``), the lean routes' too

    async def access(request: Request) -> Access:
        return await apps.authenticate(key_of(request.headers))

    async def session(request: Request) -> Session:
        return await workers.session(session_token(request.headers))

    metrics = Metrics(engine)

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

    # ---- pipelines ------------------------------------------------------------------------
    # The routes of ``_lean.LEAN_ROUTES`` are answered by ``_lean.Lean`` in front of FastAPI (the
    # same calls without the framework's machinery); their declarations here make the OpenAPI
    # document and answer for an app reached without that dispatcher.
    # Each route's credential is a dependency declared before its body (FastAPI solves them in
    # order): a request without a valid credential gets 401 before its body is read.

    @app.post("/pipelines", openapi_extra=takes(m.PipelineIn), responses={200: {"model": m.PipelineOut}})
    async def create_legacy(request: Request, who: Access = Depends(access),
                            body: m.PipelineIn = json_body(m.PipelineIn)) -> Any:
        view, _ = await pipelines.create(who, body, idempotent=False,
                                         traceparent=request.headers.get("traceparent"))
        return view

    @app.post("/pipelines/idempotent", status_code=201, openapi_extra=takes(m.IdempotentPipelineIn),
              responses={201: {"model": m.CreatedOut}, 200: {"model": m.CreatedOut,
                                                              "description": "an equivalent request created it"},
                         409: {"model": m.Error, "description": "the key was used for another intent"}})
    async def create_idempotent(request: Request, who: Access = Depends(access),
                                body: m.IdempotentPipelineIn = json_body(m.IdempotentPipelineIn)) -> Any:
        view, created = await pipelines.create(who, body, idempotent=True,
                                               traceparent=request.headers.get("traceparent"))
        return JSONResponse({"pipeline": view, "created": created, "wasExisting": not created},
                            status_code=201 if created else 200)

    @app.post("/pipelines/by-idempotency-key", openapi_extra=takes(m.IdempotencyKeyIn),
              responses={200: {"model": m.PipelineOut}})
    async def by_key(who: Access = Depends(access), body: m.IdempotencyKeyIn = json_body(m.IdempotencyKeyIn)) -> Any:
        return await pipelines.by_idempotency_key(who, body.idempotencyKey)

    @app.post("/pipelines/rerunStage", openapi_extra=takes(m.RerunIn), responses={200: {"model": m.PipelineOut}})
    async def rerun(who: Access = Depends(access), body: m.RerunIn = json_body(m.RerunIn)) -> Any:
        return await pipelines.rerun(who, body.stageId, body.rerunAllNextStages)

    @app.post("/pipelines/skipStage", openapi_extra=takes(m.SkipIn), responses={200: {"model": m.PipelineOut}})
    async def skip(who: Access = Depends(access), body: m.SkipIn = json_body(m.SkipIn)) -> Any:
        return await pipelines.skip(who, body.stageId)

    @app.get("/pipelines", responses={200: {"model": m.PipelinePage}})
    async def list_(request: Request, pageNumber: int = 1, pageSize: int = 20, search: str | None = None,  # noqa: N803
                    name: str | None = None, who: Access = Depends(access)) -> Any:
        q = request.query_params
        return await pipelines.list(who, page=pageNumber, size=pageSize, search=search, name=name,
                                    statuses=q.getlist("statuses"), keywords=q.getlist("keywords"))

    @app.get("/pipelines/{pipeline_id}", responses={200: {"model": m.PipelineOut}})
    async def get(pipeline_id: str, who: Access = Depends(access)) -> Any:
        return await pipelines.get(who, pipeline_id)

    @app.get("/pipelines/{pipeline_id}/history", responses={200: {"model": list[m.HistoryEntry]}})
    async def history(pipeline_id: str, who: Access = Depends(access)) -> Any:
        return await pipelines.history(who, pipeline_id)

    @app.post("/pipelines/{pipeline_id}/stages", openapi_extra=takes(m.StagesIn),
              responses={200: {"model": m.StagesOut}})
    async def append(pipeline_id: str, who: Access = Depends(access), body: m.StagesIn = json_body(m.StagesIn)) -> Any:
        return {"stages": await pipelines.append(who, pipeline_id, body)}

    @app.post("/pipelines/{pipeline_id}/pause", responses={200: {"model": m.PipelineOut}})
    async def pause(pipeline_id: str, who: Access = Depends(access)) -> Any:
        return await pipelines.pause(who, pipeline_id)

    @app.post("/pipelines/{pipeline_id}/resume", responses={200: {"model": m.PipelineOut}})
    async def resume(pipeline_id: str, who: Access = Depends(access)) -> Any:
        return await pipelines.resume(who, pipeline_id)

    @app.post("/pipelines/{pipeline_id}/cancel", responses={200: {"model": m.PipelineOut}})
    async def cancel(pipeline_id: str, who: Access = Depends(access)) -> Any:
        return await pipelines.cancel(who, pipeline_id)

    @app.post("/stages/{stage_id}/resume", status_code=204, response_class=Response, openapi_extra=takes(m.DecisionIn))
    async def decide(stage_id: str, who: Access = Depends(access),
                     body: m.DecisionIn = json_body(m.DecisionIn)) -> Response:
        await pipelines.decide(who, stage_id, body.approved, body.rejectionReason)
        return Response(status_code=204)

    # ---- workers --------------------------------------------------------------------------

    @app.post("/workers/bootstrap", openapi_extra=takes(m.BootstrapIn), responses={200: {"model": m.BootstrapOut}})
    async def bootstrap(who: Access = Depends(access), body: m.BootstrapIn = json_body(m.BootstrapIn)) -> Any:
        return {**await workers.bootstrap(who, body), "batch": batch.OFFER}

    @app.post("/jobs/pull", openapi_extra=takes(m.PullIn),
              responses={200: {"model": m.JobOut}, 204: {"description": "no job within waitSeconds"}})
    async def pull(request: Request, s: Session = Depends(session), body: m.PullIn = json_body(m.PullIn)) -> Any:
        job = await workers.pull(s, body, gone=lambda: gone(request.receive))
        return Response(status_code=204) if job is None else job

    @app.post("/stages/{stage_id}/lease/acquire", openapi_extra=takes(m.LeaseIn),
              responses={200: {"model": m.LeaseOut}})
    async def acquire(stage_id: str, s: Session = Depends(session), body: m.LeaseIn = json_body(m.LeaseIn)) -> Any:
        return await workers.acquire(s, stage_id, body)

    @app.post("/stages/{stage_id}/lease/renew", openapi_extra=takes(m.LeaseIn), responses={200: {"model": m.LeaseOut}})
    async def renew(stage_id: str, s: Session = Depends(session), body: m.LeaseIn = json_body(m.LeaseIn)) -> Any:
        return await workers.acquire(s, stage_id, body, renew=True)

    @app.post("/stages/{stage_id}/result", status_code=202, openapi_extra=takes(m.ResultIn),
              responses={202: {"model": m.ResultOut},
                         409: {"model": m.ResultOut | m.Error, "description": "a stale result (accepted: false)"}})
    async def result(stage_id: str, s: Session = Depends(session), body: m.ResultIn = json_body(m.ResultIn)) -> Any:
        status, answer = await workers.result(s, stage_id, body)
        return JSONResponse(answer, status_code=status)

    # ---- the batch routes (``_batch``): many items in one request, each as its one-item route --

    @app.post("/jobs/pull-batch", openapi_extra=takes(m.PullBatchIn),
              responses={200: {"model": m.JobsOut}, 204: {"description": "no job within waitSeconds"}})
    async def pull_batch(request: Request, s: Session = Depends(session),
                         body: m.PullBatchIn = json_body(m.PullBatchIn)) -> Any:
        status, answer = await batch.pull(workers, s, body, gone=lambda: gone(request.receive))
        return Response(status_code=204) if answer is None else JSONResponse(answer, status_code=status)

    @app.post("/stages/results", openapi_extra=takes(m.ResultsIn), responses={200: {"model": m.ResultsOut}})
    async def results(s: Session = Depends(session), body: m.ResultsIn = json_body(m.ResultsIn)) -> Any:
        _, answer = await batch.results(workers, s, body)
        return answer

    @app.post("/pipelines/idempotent/batch", openapi_extra=takes(m.CreatesIn), responses={200: {"model": m.CreatesOut}})
    async def creates(request: Request, who: Access = Depends(access), body: m.CreatesIn = json_body(m.CreatesIn)) -> Any:
        _, answer = await batch.creates(pipelines, who, body, request.headers.get("traceparent"))
        return answer

    @app.post("/jobs/ack", openapi_extra=takes(m.AckIn), responses={200: {"model": m.AckOut}})
    async def ack(s: Session = Depends(session), body: m.AckIn = json_body(m.AckIn)) -> Any:
        return await workers.ack(s, body)

    @app.post("/workers/heartbeat", openapi_extra=takes(m.HeartbeatIn), responses={200: {"model": m.OkOut}})
    async def heartbeat(s: Session = Depends(session), body: m.HeartbeatIn = json_body(m.HeartbeatIn)) -> Any:
        return await workers.heartbeat(s, body)

    @app.post("/workers/shutdown", responses={200: {"model": m.OkOut}})
    async def shutdown(s: Session = Depends(session)) -> Any:
        return await workers.shutdown(s)

    @app.get("/workers", responses={200: {"model": list[m.WorkerOut]}})
    async def list_workers(who: Access = Depends(access)) -> Any:
        return await workers.list(who)

    add_schedule_routes(app, schedules, policies, access)
    add_catalog_routes(app, catalog, access)

    def openapi() -> dict[str, Any]:
        """The generated document, with the errors every route may answer (and no 422: bad
        input is a 400 here)."""
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
            error_ref = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
            schemas = doc.setdefault("components", {}).setdefault("schemas", {})
            schemas["Error"] = m.Error.model_json_schema()
            # the bodies the routes read themselves (after the credential): see ``json_body``
            _, bodies = models_json_schema([(model, "validation") for model in BODIES.values()],
                                           ref_template="#/components/schemas/{model}")
            schemas.update(bodies.get("$defs", {}))
            for path, methods in doc["paths"].items():
                for op in methods.values():
                    responses = op.setdefault("responses", {})
                    responses.pop("422", None)
                    for code, why in _ERRORS.items():
                        if path == "/healthz" or path == "/openapi.json":
                            continue
                        responses.setdefault(code, {"description": why, **error_ref})
            doc["components"]["schemas"].pop("HTTPValidationError", None)
            doc["components"]["schemas"].pop("ValidationError", None)
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    server = build_mcp(services, from_headers(apps))
    # the Host and Origin of /mcp are checked with every other route's (HostGuard), not by the SDK
    mcp_app = mcp_gate(server.streamable_http_app(streamable_http_path="/mcp", host=host, transport_security=NO_SDK_CHECK,
                                                  session_idle_timeout=MCP_SESSION_IDLE_SECONDS), apps)
    app.state.mcp = server  # flowli serve runs its session manager
    lean = Lean(pipelines, workers, apps)
    return guarded(WithMcp(app, mcp_app, lean), AllowedHosts(host, allowed_hosts))  # type: ignore[return-value]


NO_SDK_CHECK = TransportSecuritySettings(enable_dns_rebinding_protection=False)


_ERRORS = {
    "400": "malformed or invalid body (the error names the field)",
    "401": "no or unknown credential",
    "403": "the credential's role does not allow this",
    "404": "no such id in this application",
    "409": "conflict",
    "413": "body too large",
    "503": "not confirmed: send it again",
}
