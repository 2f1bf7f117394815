"""The pipelines over HTTP: their creation (one, or many in one request), reads, history,
actions (pause, resume, cancel, rerun and skip a stage, append stages) and a person's decision on
a stage that waits for one. Each route hands the body it read (the operation's own input, see
``flowli.pipelines``) to the ``Pipelines`` service.

The routes of ``_lean.LEAN_ROUTES`` are answered by ``_lean.Lean`` in front of FastAPI (the same
calls without the framework's machinery); their declarations here make the OpenAPI document and
answer for an app reached without that dispatcher. Each route's credential is a dependency
declared before its body (FastAPI solves them in order): a request without a valid credential
gets 401 before its body is read."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from flowli.access import Access
from flowli.pipelines import Pipelines

from . import _batch as batch
from . import _models as m
from ._body import json_body, takes


def pipeline_routes(pipelines: Pipelines, access: Callable[..., Any]) -> APIRouter:
    router = APIRouter()

    @router.post("/pipelines", openapi_extra=takes(m.PipelineIn), responses={200: {"model": m.PipelineOut}})
    async def create_legacy(request: Request, who: Access = Depends(access),
                            body: m.PipelineIn = json_body(m.PipelineIn)) -> Any:
        view, _ = await pipelines.create(who, body, idempotent=False,
                                         traceparent=request.headers.get("traceparent"))
        return view

    @router.post("/pipelines/idempotent", status_code=201, openapi_extra=takes(m.IdempotentPipelineIn),
                 responses={201: {"model": m.CreatedOut},
                            200: {"model": m.CreatedOut, "description": "an equivalent request created it"},
                            409: {"model": m.Error, "description": "the key was used for another intent"}})
    async def create_idempotent(request: Request, who: Access = Depends(access),
                                body: m.IdempotentPipelineIn = json_body(m.IdempotentPipelineIn)) -> Any:
        view, created = await pipelines.create(who, body, idempotent=True,
                                               traceparent=request.headers.get("traceparent"))
        return JSONResponse({"pipeline": view, "created": created, "wasExisting": not created},
                            status_code=201 if created else 200)

    @router.post("/pipelines/by-idempotency-key", openapi_extra=takes(m.IdempotencyKeyIn),
                 responses={200: {"model": m.PipelineOut}})
    async def by_key(who: Access = Depends(access), body: m.IdempotencyKeyIn = json_body(m.IdempotencyKeyIn)) -> Any:
        return await pipelines.by_idempotency_key(who, body.idempotencyKey)

    @router.post("/pipelines/rerunStage", openapi_extra=takes(m.RerunIn), responses={200: {"model": m.PipelineOut}})
    async def rerun(who: Access = Depends(access), body: m.RerunIn = json_body(m.RerunIn)) -> Any:
        return await pipelines.rerun(who, body.stageId, body.rerunAllNextStages)

    @router.post("/pipelines/skipStage", openapi_extra=takes(m.SkipIn), responses={200: {"model": m.PipelineOut}})
    async def skip(who: Access = Depends(access), body: m.SkipIn = json_body(m.SkipIn)) -> Any:
        return await pipelines.skip(who, body.stageId)

    @router.get("/pipelines", responses={200: {"model": m.PipelinePage}})
    async def list_(request: Request, pageNumber: int = 1, pageSize: int = 20, search: str | None = None,  # noqa: N803
                    name: str | None = None, who: Access = Depends(access)) -> Any:
        q = request.query_params
        return await pipelines.list(who, page=pageNumber, size=pageSize, search=search, name=name,
                                    statuses=q.getlist("statuses"), keywords=q.getlist("keywords"))

    @router.get("/pipelines/{pipeline_id}", responses={200: {"model": m.PipelineOut}})
    async def get(pipeline_id: str, who: Access = Depends(access)) -> Any:
        return await pipelines.get(who, pipeline_id)

    @router.get("/pipelines/{pipeline_id}/history", responses={200: {"model": list[m.HistoryEntry]}})
    async def history(pipeline_id: str, who: Access = Depends(access)) -> Any:
        return await pipelines.history(who, pipeline_id)

    @router.post("/pipelines/{pipeline_id}/stages", openapi_extra=takes(m.StagesIn),
                 responses={200: {"model": m.StagesOut}})
    async def append(pipeline_id: str, who: Access = Depends(access), body: m.StagesIn = json_body(m.StagesIn)) -> Any:
        return {"stages": await pipelines.append(who, pipeline_id, body)}

    @router.post("/pipelines/{pipeline_id}/pause", responses={200: {"model": m.PipelineOut}})
    async def pause(pipeline_id: str, who: Access = Depends(access)) -> Any:
        return await pipelines.pause(who, pipeline_id)

    @router.post("/pipelines/{pipeline_id}/resume", responses={200: {"model": m.PipelineOut}})
    async def resume(pipeline_id: str, who: Access = Depends(access)) -> Any:
        return await pipelines.resume(who, pipeline_id)

    @router.post("/pipelines/{pipeline_id}/cancel", responses={200: {"model": m.PipelineOut}})
    async def cancel(pipeline_id: str, who: Access = Depends(access)) -> Any:
        return await pipelines.cancel(who, pipeline_id)

    @router.post("/stages/{stage_id}/resume", status_code=204, response_class=Response, openapi_extra=takes(m.DecisionIn))
    async def decide(stage_id: str, who: Access = Depends(access),
                     body: m.DecisionIn = json_body(m.DecisionIn)) -> Response:
        await pipelines.decide(who, stage_id, body.approved, body.rejectionReason)
        return Response(status_code=204)

    @router.post("/pipelines/idempotent/batch", openapi_extra=takes(m.CreatesIn), responses={200: {"model": m.CreatesOut}})
    async def creates(request: Request, who: Access = Depends(access), body: m.CreatesIn = json_body(m.CreatesIn)) -> Any:
        _, answer = await batch.creates(pipelines, who, body, request.headers.get("traceparent"))
        return answer

    return router
