"""The catalog over HTTP: ``/catalog/namespaces``, ``/catalog/types``, ``/catalog/runs``,
``/catalog/compositions``, ``/catalog/stuck``, with the API keys and roles of the pipelines
routes (a key's role is the principal's role; RBAC is the engine's). As on every route, the
credential is read before the body."""

from __future__ import annotations

from typing import Any, Callable, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from flowli.access import Access
from flowli.catalog import MAX_IDLE_SECONDS as MAX_IDLE
from flowli.catalog import (
    Catalog,
)

from ._body import json_body, read_json, takes


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class StartIn(_Body):
    workflow_type: str = Field(min_length=1)
    inputs: dict[str, Any] = Field(default_factory=dict)
    key: str | None = None


class ResolveIn(_Body):
    resolution: str


class SignalIn(_Body):
    channel: str = Field(min_length=1)
    payload: Any = None


class CancelIn(_Body):
    reason: str


class TerminateIn(_Body):
    reason: str
    min_idle_seconds: float = Field(600, json_schema_extra={"minimum": 0, "maximum": MAX_IDLE})
    expected_last_seq: int | None = Field(None, json_schema_extra={"minimum": 0})


class CompositionIn(BaseModel):
    """A composition's definition (the catalog validates it and says what is wrong, step by step)."""

    model_config = ConfigDict(extra="allow")
    name: str
    version: str
    layers: list[dict[str, Any]]


# ---- answers (each lists what it always carries; it may carry more) --------------------------


class _Out(BaseModel):
    model_config = ConfigDict(extra="allow")


class NamespaceOut(_Out):
    namespace: str
    types: int


class NamespacesOut(_Out):
    namespaces: list[NamespaceOut]


class TypeOut(_Out):
    name: str
    namespace: str
    workflow_kind: str
    featured: bool
    scope: str
    description: str | None
    version: str


class TypesOut(_Out):
    types: list[TypeOut]


class TypeDetailOut(_Out):
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    read_only: bool
    has_prerequisites: bool
    workflow_kind: str


class PrerequisitesOut(_Out):
    workflow_type: str
    prerequisites: list[dict[str, Any]]


class StepOut(_Out):
    name: str
    workflow_type: str


class LayerOut(_Out):
    name: str
    steps: list[StepOut]


class DagOut(_Out):
    layers: list[LayerOut]


State = Literal["PENDING", "COMPLETED", "FAILED", "remediation_pending"]


class RunOut(_Out):
    workflow_id: str
    workflow_type: str
    status: State
    created_at: str
    updated_at: str


class RunsOut(_Out):
    runs: list[RunOut]
    next: str | None


class TransitionOut(_Out):
    seq: int
    at: str
    event: str
    state: State
    actor: str


class HistoryOut(_Out):
    workflow_id: str
    history: list[TransitionOut]


class ActedOut(_Out):
    workflow_id: str
    status: State


class SignalledOut(_Out):
    workflow_id: str
    channel: str
    seq: int


class CancelledOut(ActedOut):
    cancel_requested: bool


class StuckRunOut(_Out):
    workflow_id: str
    workflow_type: str
    status: State
    idle_seconds: float
    waiting_on: dict[str, Any]


class StuckOut(_Out):
    runs: list[StuckRunOut]


class ValidationOut(_Out):
    errors: list[str]
    warnings: list[str]


class SavedOut(_Out):
    workflow_type: str
    content_hash: str
    created: bool
    warnings: list[str]
    workflow_id: str


class CompositionOut(_Out):
    workflow_type: str
    name: str
    version: str
    content_hash: str


class CompositionsOut(_Out):
    compositions: list[CompositionOut]


def catalog_routes(catalog: Catalog, access: Callable[..., Any]) -> APIRouter:
    """``/catalog/...``; their refusals are the service's (``_errors.REFUSALS``): each kind of the
    one taxonomy."""
    router = APIRouter()

    @router.get("/catalog/namespaces", tags=["catalog"], responses={200: {"model": NamespacesOut}})
    async def namespaces(who: Access = Depends(access)) -> Any:
        return {"namespaces": await catalog.namespaces(by=who.principal)}

    @router.get("/catalog/types", tags=["catalog"], responses={200: {"model": TypesOut}})
    async def types(prefix: str | None = None, q: str | None = None, who: Access = Depends(access)) -> Any:
        return {"types": await catalog.types(prefix, q, by=who.principal)}

    @router.get("/catalog/types/{name}", tags=["catalog"], responses={200: {"model": TypeDetailOut}})
    async def type_(name: str, who: Access = Depends(access)) -> Any:
        by = who.principal
        return {**await catalog.definition(name, by=by), **await catalog.schema(name, by=by)}

    @router.get("/catalog/types/{name}/prerequisites", tags=["catalog"], responses={200: {"model": PrerequisitesOut}})
    async def prerequisites(name: str, variant: str | None = None, who: Access = Depends(access)) -> Any:
        return {"workflow_type": name, "prerequisites": await catalog.prerequisites(name, variant, by=who.principal)}

    @router.get("/catalog/types/{name}/dag", tags=["catalog"], responses={200: {"model": DagOut}})
    async def dag(name: str, who: Access = Depends(access)) -> Any:
        return await catalog.dag(name, by=who.principal)

    @router.post("/catalog/runs", status_code=201, tags=["catalog"], openapi_extra=takes(StartIn),
                 responses={201: {"model": ActedOut}})
    async def start(who: Access = Depends(access), payload: StartIn = json_body(StartIn)) -> Any:
        return await catalog.start(payload.workflow_type, payload.inputs, by=who.principal, key=payload.key)

    @router.get("/catalog/runs", tags=["catalog"], responses={200: {"model": RunsOut}})
    async def runs(workflow_type: str | None = None, status: str | None = None, limit: int = 50,
                   cursor: str | None = None, who: Access = Depends(access)) -> Any:
        return await catalog.list(workflow_type, status, limit, cursor, by=who.principal)

    @router.get("/catalog/runs/{workflow_id}", tags=["catalog"], responses={200: {"model": RunOut}})
    async def status(workflow_id: str, who: Access = Depends(access)) -> Any:
        return await catalog.status(workflow_id, by=who.principal)

    @router.get("/catalog/runs/{workflow_id}/history", tags=["catalog"], responses={200: {"model": HistoryOut}})
    async def history(workflow_id: str, include_state_data: bool = False, who: Access = Depends(access)) -> Any:
        return {"workflow_id": workflow_id,
                "history": await catalog.history(workflow_id, include_state_data, by=who.principal)}

    @router.post("/catalog/runs/{workflow_id}/retry", tags=["catalog"], responses={200: {"model": ActedOut}})
    async def retry(workflow_id: str, who: Access = Depends(access)) -> Any:
        return await catalog.retry(workflow_id, by=who.principal)

    @router.post("/catalog/runs/{workflow_id}/resolve", tags=["catalog"], openapi_extra=takes(ResolveIn),
                 responses={200: {"model": ActedOut}})
    async def resolve(workflow_id: str, who: Access = Depends(access), payload: ResolveIn = json_body(ResolveIn)) -> Any:
        return await catalog.resolve(workflow_id, payload.resolution, by=who.principal)

    @router.post("/catalog/runs/{workflow_id}/signal", tags=["catalog"], openapi_extra=takes(SignalIn),
                 responses={200: {"model": SignalledOut}})
    async def signal(workflow_id: str, who: Access = Depends(access), payload: SignalIn = json_body(SignalIn)) -> Any:
        return await catalog.signal(workflow_id, payload.channel, payload.payload, by=who.principal)

    @router.post("/catalog/runs/{workflow_id}/cancel", tags=["catalog"], openapi_extra=takes(CancelIn),
                 responses={200: {"model": CancelledOut}})
    async def cancel(workflow_id: str, who: Access = Depends(access), payload: CancelIn = json_body(CancelIn)) -> Any:
        return await catalog.cancel(workflow_id, payload.reason, by=who.principal)

    @router.post("/catalog/runs/{workflow_id}/terminate", tags=["catalog"], openapi_extra=takes(TerminateIn),
                 responses={200: {"model": ActedOut}})
    async def terminate(workflow_id: str, who: Access = Depends(access),
                        payload: TerminateIn = json_body(TerminateIn)) -> Any:
        return await catalog.terminate(workflow_id, payload.reason, payload.min_idle_seconds,
                                       payload.expected_last_seq, by=who.principal)

    @router.get("/catalog/stuck", tags=["catalog"], responses={200: {"model": StuckOut}})
    async def stuck(older_than_seconds: float = Query(3600, json_schema_extra={"minimum": 0, "maximum": MAX_IDLE}),
                    who: Access = Depends(access)) -> Any:
        return {"runs": await catalog.stuck(older_than_seconds, by=who.principal)}

    @router.post("/catalog/compositions/validate", tags=["catalog"], openapi_extra=takes(CompositionIn),
                 responses={200: {"model": ValidationOut}})
    async def validate(request: Request, who: Access = Depends(access)) -> Any:
        return await catalog.validate_composition(await read_json(request), by=who.principal)

    @router.post("/catalog/compositions", status_code=201, tags=["catalog"], openapi_extra=takes(CompositionIn),
                 responses={201: {"model": SavedOut}, 200: {"model": SavedOut, "description": "saved already"}})
    async def save(request: Request, who: Access = Depends(access)) -> Any:
        saved = await catalog.save_composition(await read_json(request), by=who.principal)
        return JSONResponse(saved, status_code=201 if saved.get("created") else 200)

    @router.get("/catalog/compositions", tags=["catalog"], responses={200: {"model": CompositionsOut}})
    async def compositions(who: Access = Depends(access)) -> Any:
        return {"compositions": await catalog.compositions(by=who.principal)}

    return router
