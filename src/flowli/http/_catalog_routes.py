"""The catalog over HTTP: ``/catalog/namespaces``, ``/catalog/types``, ``/catalog/runs``,
``/catalog/compositions``, ``/catalog/stuck``, with the API keys and roles of the pipelines
routes (a key's role is the principal's role; RBAC is the engine's)."""

from __future__ import annotations

from typing import Any, Callable

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from flowli.catalog import (
    Catalog,
    CatalogError,
    CompositionConflict,
    CompositionInvalid,
    InputsInvalid,
    PermissionDenied,
    RunStateError,
    UnknownType,
)
from flowli.domain import UnknownExecutionError
from flowli.pipelines import Access


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class StartIn(_Body):
    workflow_type: str = Field(min_length=1)
    inputs: dict[str, Any] = Field(default_factory=dict)
    key: str | None = None


class ResolveIn(_Body):
    resolution: str


class TerminateIn(_Body):
    reason: str
    min_idle_seconds: float = 600
    expected_last_seq: int | None = None


def add_catalog_routes(app: FastAPI, catalog: Catalog, access: Callable[..., Any],
                       error: Callable[..., JSONResponse]) -> None:
    @app.exception_handler(CatalogError)
    async def catalog_refused(_: Request, exc: CatalogError) -> JSONResponse:
        if isinstance(exc, PermissionDenied):
            return error(403, str(exc), capability=exc.capability)
        if isinstance(exc, UnknownType):
            return error(404, str(exc), **({"suggestion": exc.suggestion} if exc.suggestion else {}))
        if isinstance(exc, InputsInvalid):
            return error(400, str(exc), problems=exc.problems)
        if isinstance(exc, CompositionInvalid):
            return error(400, str(exc), errors=exc.errors)
        if isinstance(exc, (RunStateError, CompositionConflict)):
            return error(409, str(exc))
        return error(400, str(exc))

    @app.exception_handler(UnknownExecutionError)
    async def unknown_run(_: Request, exc: UnknownExecutionError) -> JSONResponse:
        return error(404, str(exc))

    async def body(request: Request) -> Any:
        try:
            return await request.json()
        except ValueError as exc:
            raise CatalogError(f"the body is not valid JSON: {exc}") from None

    @app.get("/catalog/namespaces", tags=["catalog"])
    async def namespaces(who: Access = Depends(access)) -> Any:
        return {"namespaces": await catalog.namespaces(by=who.principal)}

    @app.get("/catalog/types", tags=["catalog"])
    async def types(prefix: str | None = None, q: str | None = None, who: Access = Depends(access)) -> Any:
        return {"types": await catalog.types(prefix, q, by=who.principal)}

    @app.get("/catalog/types/{name}", tags=["catalog"])
    async def type_(name: str, who: Access = Depends(access)) -> Any:
        by = who.principal
        return {**await catalog.definition(name, by=by), **await catalog.schema(name, by=by)}

    @app.get("/catalog/types/{name}/prerequisites", tags=["catalog"])
    async def prerequisites(name: str, variant: str | None = None, who: Access = Depends(access)) -> Any:
        return {"workflow_type": name, "prerequisites": await catalog.prerequisites(name, variant, by=who.principal)}

    @app.get("/catalog/types/{name}/dag", tags=["catalog"])
    async def dag(name: str, who: Access = Depends(access)) -> Any:
        return await catalog.dag(name, by=who.principal)

    @app.post("/catalog/runs", status_code=201, tags=["catalog"])
    async def start(payload: StartIn, who: Access = Depends(access)) -> Any:
        return await catalog.start(payload.workflow_type, payload.inputs, by=who.principal, key=payload.key)

    @app.get("/catalog/runs", tags=["catalog"])
    async def runs(workflow_type: str | None = None, status: str | None = None, limit: int = 50,
                   cursor: str | None = None, who: Access = Depends(access)) -> Any:
        return await catalog.list(workflow_type, status, limit, cursor, by=who.principal)

    @app.get("/catalog/runs/{workflow_id}", tags=["catalog"])
    async def status(workflow_id: str, who: Access = Depends(access)) -> Any:
        return await catalog.status(workflow_id, by=who.principal)

    @app.get("/catalog/runs/{workflow_id}/history", tags=["catalog"])
    async def history(workflow_id: str, include_state_data: bool = False, who: Access = Depends(access)) -> Any:
        return {"workflow_id": workflow_id,
                "history": await catalog.history(workflow_id, include_state_data, by=who.principal)}

    @app.post("/catalog/runs/{workflow_id}/retry", tags=["catalog"])
    async def retry(workflow_id: str, who: Access = Depends(access)) -> Any:
        return await catalog.retry(workflow_id, by=who.principal)

    @app.post("/catalog/runs/{workflow_id}/resolve", tags=["catalog"])
    async def resolve(workflow_id: str, payload: ResolveIn, who: Access = Depends(access)) -> Any:
        return await catalog.resolve(workflow_id, payload.resolution, by=who.principal)

    @app.post("/catalog/runs/{workflow_id}/terminate", tags=["catalog"])
    async def terminate(workflow_id: str, payload: TerminateIn, who: Access = Depends(access)) -> Any:
        return await catalog.terminate(workflow_id, payload.reason, payload.min_idle_seconds,
                                       payload.expected_last_seq, by=who.principal)

    @app.get("/catalog/stuck", tags=["catalog"])
    async def stuck(older_than_seconds: float = 3600, who: Access = Depends(access)) -> Any:
        return {"runs": await catalog.stuck(older_than_seconds, by=who.principal)}

    @app.post("/catalog/compositions/validate", tags=["catalog"])
    async def validate(request: Request, who: Access = Depends(access)) -> Any:
        return await catalog.validate_composition(await body(request), by=who.principal)

    @app.post("/catalog/compositions", status_code=201, tags=["catalog"])
    async def save(request: Request, who: Access = Depends(access)) -> Any:
        saved = await catalog.save_composition(await body(request), by=who.principal)
        return JSONResponse(saved, status_code=201 if saved.get("created") else 200)

    @app.get("/catalog/compositions", tags=["catalog"])
    async def compositions(who: Access = Depends(access)) -> Any:
        return {"compositions": await catalog.compositions(by=who.principal)}
