"""The HTTP service: a FastAPI app over the Engine (through ``flowli.pipelines``), never a store.
Errors are ``{"error": "<one sentence>"}`` with the contract's status; never a 500 for bad
input, never a stack trace in a body."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from flowli.catalog import Catalog
from flowli.domain import DatabaseUnavailable, FlowliError
from flowli.engine import Engine
from flowli.mcp import build as build_mcp
from flowli.mcp import from_headers
from flowli.metrics import Metrics
from flowli.pipelines import (
    Access,
    Applications,
    PipelineInputError,
    Pipelines,
    Policies,
    Schedules,
    ServiceError,
    Session,
    Workers,
    key_of,
)

from . import _models as m
from ._catalog_routes import add_catalog_routes

log = logging.getLogger("flowli.http")
MAX_BODY = 1 << 20
"""The largest request body (1 MiB): a larger one is refused with 413."""


def error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


def _validation_sentence(exc: RequestValidationError, body: Any = None) -> str:
    first = exc.errors()[0] if exc.errors() else {}
    kind = first.get("type", "")
    if kind in ("json_invalid", "json_type"):
        return "the body is not valid JSON" + (f": {first.get('ctx', {}).get('error')}" if first.get("ctx") else "")
    loc = [x for x in first.get("loc", ()) if x != "body"]
    if len(loc) >= 2 and loc[0] in ("stages", "appendStages") and isinstance(loc[1], int):
        # name the stage, as the service does: stage 'validate': options.maxRetries ...
        stages = body.get(loc[0]) if isinstance(body, dict) else None
        name = stages[loc[1]].get("stageName") if isinstance(stages, list) and len(stages) > loc[1] and \
            isinstance(stages[loc[1]], dict) else None
        label = f"stage {name!r}" if isinstance(name, str) and name else f"{loc[0]}[{loc[1]}]"
        rest = ".".join(str(x) for x in loc[2:])
        where = f"{label}: {rest}" if rest else label
    else:
        where = ".".join(str(x) for x in loc) if loc else "the body"
    msg = first.get("msg", "is not valid")
    if kind == "missing":
        return f"{where} is required"
    if kind == "extra_forbidden":
        return f"{where} is not a known field"
    return f"{where}: {msg}"


async def _gone(request: Request) -> None:
    """Return once the client of ``request`` has gone (its connection closed): after the body,
    the server's next message is the disconnect."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return
        if not message.get("body") and not message.get("more_body"):
            await asyncio.Event().wait()  # a server that answers at once here cannot tell: no watch


class BodyLimit:
    """Refuse a body larger than MAX_BODY with 413 before the app reads it."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > MAX_BODY:
            await error(413, f"the body is larger than {MAX_BODY} bytes")(scope, receive, send)
            return
        seen = 0

        async def limited() -> Any:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > MAX_BODY:
                    raise _TooLarge()
            return message

        try:
            await self.app(scope, limited, send)
        except _TooLarge:
            await error(413, f"the body is larger than {MAX_BODY} bytes")(scope, receive, send)


class _TooLarge(Exception):
    pass


class WithMcp:
    """The service's ASGI app: ``/mcp`` (the MCP server's streamable HTTP) beside the FastAPI
    routes. ``state`` is the FastAPI app's."""

    def __init__(self, api: FastAPI, mcp: ASGIApp):
        self.api, self.mcp = api, mcp
        self.state = api.state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path == "/mcp" or path.startswith("/mcp/"):
            await self.mcp(scope, receive, send)
        else:
            await self.api(scope, receive, send)


def from_this_machine(request: Any) -> bool:
    """A request from this machine itself: a loopback peer, not relayed by a proxy."""
    host = request.client.host if request.client else ""
    relayed = any(h in request.headers for h in ("x-forwarded-for", "forwarded", "x-real-ip"))
    return host in ("127.0.0.1", "::1") and not relayed


def create_app(engine: Engine, *, lease_ttl: float = 30.0, host: str = "127.0.0.1") -> FastAPI:
    app = FastAPI(title="flowli", version="1", summary="Pipelines over HTTP: application workers in any language")
    pipelines = Pipelines(engine)
    workers = Workers(engine, pipelines, lease_ttl)
    apps = Applications(engine)
    policies = Policies(engine, pipelines)
    schedules = Schedules(engine, pipelines)
    catalog = Catalog(engine)
    app.state.pipelines, app.state.workers, app.state.applications = pipelines, workers, apps
    app.state.catalog, app.state.schedules = catalog, schedules

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        try:
            body = json.loads(await request.body() or b"null")
        except ValueError:
            body = None
        return error(400, _validation_sentence(exc, body))

    @app.exception_handler(ServiceError)
    async def refused(_: Request, exc: ServiceError) -> JSONResponse:
        return error(exc.status, exc.message, **exc.extra)

    @app.exception_handler(PipelineInputError)
    async def bad_input(_: Request, exc: PipelineInputError) -> JSONResponse:
        return error(400, str(exc))

    @app.exception_handler(DatabaseUnavailable)
    async def unavailable(_: Request, exc: DatabaseUnavailable) -> JSONResponse:
        return error(503, "the store is unavailable: not confirmed, send the request again")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error(exc.status_code, str(exc.detail))

    @app.exception_handler(FlowliError)
    async def engine_refused(_: Request, exc: FlowliError) -> JSONResponse:
        return error(409, str(exc))

    @app.exception_handler(Exception)
    async def crashed(_: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error")
        return error(500, "internal error (the service logged it)")

    async def access(request: Request) -> Access:
        return await apps.authenticate(key_of(request.headers))

    async def session(request: Request) -> Session:
        token = request.headers.get("x-worker-session")
        auth = request.headers.get("authorization", "")
        if not token and auth.lower().startswith("bearer "):
            token = auth[7:].strip()
        return await workers.session(token)

    async def raw(request: Request) -> Any:
        return await request.json()

    metrics = Metrics(engine)

    @app.get("/metrics", include_in_schema=False)
    async def metrics_text(request: Request) -> Response:
        if not from_this_machine(request):
            return error(403, "GET /metrics answers requests from this machine only (a loopback peer, not"
                              " relayed): scrape it with an agent beside the service")
        return Response(await metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz", response_class=PlainTextResponse)
    async def healthz() -> str:
        return "ok"

    # ---- pipelines ------------------------------------------------------------------------

    @app.post("/pipelines", responses={400: {"model": m.Error}})
    async def create_legacy(body: m.PipelineIn, request: Request, who: Access = Depends(access)) -> Any:
        view, _ = await pipelines.create(who, await raw(request), idempotent=False,
                                         traceparent=request.headers.get("traceparent"))
        return view

    @app.post("/pipelines/idempotent", status_code=201, responses={200: {}, 409: {"model": m.Error}})
    async def create_idempotent(body: m.IdempotentPipelineIn, request: Request, who: Access = Depends(access)) -> Any:
        view, created = await pipelines.create(who, await raw(request), idempotent=True,
                                               traceparent=request.headers.get("traceparent"))
        return JSONResponse({"pipeline": view, "created": created, "wasExisting": not created},
                            status_code=201 if created else 200)

    @app.post("/pipelines/by-idempotency-key")
    async def by_key(body: m.IdempotencyKeyIn, who: Access = Depends(access)) -> Any:
        return await pipelines.by_idempotency_key(who, body.idempotencyKey)

    @app.post("/pipelines/rerunStage")
    async def rerun(body: m.RerunIn, who: Access = Depends(access)) -> Any:
        return await pipelines.rerun(who, body.stageId, body.rerunAllNextStages)

    @app.post("/pipelines/skipStage")
    async def skip(body: m.SkipIn, who: Access = Depends(access)) -> Any:
        return await pipelines.skip(who, body.stageId)

    @app.get("/pipelines")
    async def list_(request: Request, pageNumber: int = 1, pageSize: int = 20, search: str | None = None,  # noqa: N803
                    name: str | None = None, who: Access = Depends(access)) -> Any:
        q = request.query_params
        return await pipelines.list(who, page=pageNumber, size=pageSize, search=search, name=name,
                                    statuses=q.getlist("statuses"), keywords=q.getlist("keywords"))

    @app.get("/pipelines/{pipeline_id}")
    async def get(pipeline_id: str, who: Access = Depends(access)) -> Any:
        return await pipelines.get(who, pipeline_id)

    @app.get("/pipelines/{pipeline_id}/history")
    async def history(pipeline_id: str, who: Access = Depends(access)) -> Any:
        return await pipelines.history(who, pipeline_id)

    @app.post("/pipelines/{pipeline_id}/stages")
    async def append(pipeline_id: str, body: m.StagesIn, request: Request, who: Access = Depends(access)) -> Any:
        return {"stages": await pipelines.append(who, pipeline_id, await raw(request))}

    @app.post("/pipelines/{pipeline_id}/pause")
    async def pause(pipeline_id: str, who: Access = Depends(access)) -> Any:
        return await pipelines.pause(who, pipeline_id)

    @app.post("/pipelines/{pipeline_id}/resume")
    async def resume(pipeline_id: str, who: Access = Depends(access)) -> Any:
        return await pipelines.resume(who, pipeline_id)

    @app.post("/pipelines/{pipeline_id}/cancel")
    async def cancel(pipeline_id: str, who: Access = Depends(access)) -> Any:
        return await pipelines.cancel(who, pipeline_id)

    @app.post("/stages/{stage_id}/resume", status_code=204, response_class=Response)
    async def decide(stage_id: str, body: m.DecisionIn, who: Access = Depends(access)) -> Response:
        await pipelines.decide(who, stage_id, body.approved, body.rejectionReason)
        return Response(status_code=204)

    # ---- workers --------------------------------------------------------------------------

    @app.post("/workers/bootstrap")
    async def bootstrap(body: m.BootstrapIn, request: Request, who: Access = Depends(access)) -> Any:
        return await workers.bootstrap(who, await raw(request))

    @app.post("/jobs/pull", responses={204: {"description": "no job within waitSeconds"}})
    async def pull(body: m.PullIn, request: Request, s: Session = Depends(session)) -> Any:
        job = await workers.pull(s, await raw(request), gone=lambda: _gone(request))
        return Response(status_code=204) if job is None else job

    @app.post("/stages/{stage_id}/lease/acquire")
    async def acquire(stage_id: str, body: m.LeaseIn, request: Request, s: Session = Depends(session)) -> Any:
        return await workers.acquire(s, stage_id, await raw(request))

    @app.post("/stages/{stage_id}/lease/renew")
    async def renew(stage_id: str, body: m.LeaseIn, request: Request, s: Session = Depends(session)) -> Any:
        return await workers.acquire(s, stage_id, await raw(request), renew=True)

    @app.post("/stages/{stage_id}/result", status_code=202, responses={409: {}, 503: {"model": m.Error}})
    async def result(stage_id: str, body: m.ResultIn, request: Request, s: Session = Depends(session)) -> Any:
        status, answer = await workers.result(s, stage_id, await raw(request))
        return JSONResponse(answer, status_code=status)

    @app.post("/jobs/ack")
    async def ack(body: m.AckIn, request: Request, s: Session = Depends(session)) -> Any:
        return await workers.ack(s, await raw(request))

    @app.post("/workers/heartbeat")
    async def heartbeat(body: m.HeartbeatIn, request: Request, s: Session = Depends(session)) -> Any:
        return await workers.heartbeat(s, await raw(request))

    @app.post("/workers/shutdown")
    async def shutdown(s: Session = Depends(session)) -> Any:
        return await workers.shutdown(s)

    @app.get("/workers")
    async def list_workers(who: Access = Depends(access)) -> Any:
        return await workers.list(who)

    # ---- schedules ------------------------------------------------------------------------

    @app.post("/schedules", status_code=201)
    async def create_schedule(body: m.ScheduleIn, request: Request, who: Access = Depends(access)) -> Any:
        return await schedules.create(who, await raw(request))

    @app.get("/schedules")
    async def list_schedules(who: Access = Depends(access)) -> Any:
        return await schedules.list(who)

    @app.get("/schedules/{schedule_id}")
    async def get_schedule(schedule_id: str, who: Access = Depends(access)) -> Any:
        return await schedules.get(who, schedule_id)

    @app.delete("/schedules/{schedule_id}", status_code=204, response_class=Response)
    async def delete_schedule(schedule_id: str, who: Access = Depends(access)) -> Response:
        await schedules.delete(who, schedule_id)
        return Response(status_code=204)

    @app.post("/schedules/{schedule_id}/pause")
    async def pause_schedule(schedule_id: str, who: Access = Depends(access)) -> Any:
        return await schedules.set_state(who, schedule_id, "paused")

    @app.post("/schedules/{schedule_id}/resume")
    async def resume_schedule(schedule_id: str, who: Access = Depends(access)) -> Any:
        return await schedules.set_state(who, schedule_id, "enabled")

    # ---- policies -------------------------------------------------------------------------

    @app.get("/policies")
    async def list_policies(who: Access = Depends(access)) -> Any:
        return await policies.list(who)

    @app.post("/policies", status_code=201)
    async def create_policy(body: m.PolicyIn, request: Request, who: Access = Depends(access)) -> Any:
        return await policies.create(who, await raw(request))

    @app.get("/policies/{policy_id}")
    async def get_policy(policy_id: str, who: Access = Depends(access)) -> Any:
        return await policies.get(who, policy_id)

    @app.put("/policies/{policy_id}")
    async def replace_policy(policy_id: str, body: m.PolicyIn, request: Request, who: Access = Depends(access)) -> Any:
        return await policies.replace(who, policy_id, await raw(request))

    @app.delete("/policies/{policy_id}", status_code=204, response_class=Response)
    async def delete_policy(policy_id: str, who: Access = Depends(access)) -> Response:
        await policies.delete(who, policy_id)
        return Response(status_code=204)

    @app.post("/policies/{policy_id}/enable")
    async def enable_policy(policy_id: str, who: Access = Depends(access)) -> Any:
        return await policies.set_state(who, policy_id, "enabled")

    @app.post("/policies/{policy_id}/disable")
    async def disable_policy(policy_id: str, who: Access = Depends(access)) -> Any:
        return await policies.set_state(who, policy_id, "disabled")

    @app.get("/stages/{stage_id}/effective-policy")
    async def effective_policy(stage_id: str, who: Access = Depends(access)) -> Any:
        return await policies.effective(who, stage_id)

    add_catalog_routes(app, catalog, access, error)

    def openapi() -> dict[str, Any]:
        """The generated document, with the errors every route may answer (and no 422: bad
        input is a 400 here)."""
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
            error_ref = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
            doc.setdefault("components", {}).setdefault("schemas", {})["Error"] = m.Error.model_json_schema()
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
    server = build_mcp(engine, from_headers(engine))
    mcp_app = server.streamable_http_app(streamable_http_path="/mcp", host=host)
    app.state.mcp = server  # flowli serve runs its session manager
    return BodyLimit(WithMcp(app, mcp_app))  # type: ignore[return-value]


_ERRORS = {
    "400": "malformed or invalid body (the error names the field)",
    "401": "no or unknown credential",
    "403": "the credential's role does not allow this",
    "404": "no such id in this application",
    "409": "conflict",
    "413": "body too large",
    "503": "not confirmed: send it again",
}
