"""A pipeline's workers over HTTP: bootstrap, the long-poll pull, a stage's lease, its result,
the ack, heartbeat and shutdown of the worker protocol, and the batch routes beside them
(``_batch``: many jobs in one pull, many results in one request). A worker's calls carry the
session its bootstrap gave (``session``); each route hands the body it read (the operation's own
input, see ``flowli.pipelines``) to the ``Workers`` service."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from flowli.access import Access
from flowli.pipelines import Session, Workers

from . import _batch as batch
from . import _models as m
from ._body import json_body, takes
from ._lean import gone


def worker_routes(workers: Workers, access: Callable[..., Any], session: Callable[..., Any]) -> APIRouter:
    router = APIRouter()

    @router.post("/workers/bootstrap", openapi_extra=takes(m.BootstrapIn), responses={200: {"model": m.BootstrapOut}})
    async def bootstrap(who: Access = Depends(access), body: m.BootstrapIn = json_body(m.BootstrapIn)) -> Any:
        return {**await workers.bootstrap(who, body), "batch": batch.OFFER}

    @router.post("/jobs/pull", openapi_extra=takes(m.PullIn),
                 responses={200: {"model": m.JobOut}, 204: {"description": "no job within waitSeconds"}})
    async def pull(request: Request, s: Session = Depends(session), body: m.PullIn = json_body(m.PullIn)) -> Any:
        job = await workers.pull(s, body, gone=lambda: gone(request.receive))
        return Response(status_code=204) if job is None else job

    @router.post("/stages/{stage_id}/lease/acquire", openapi_extra=takes(m.LeaseIn),
                 responses={200: {"model": m.LeaseOut}})
    async def acquire(stage_id: str, s: Session = Depends(session), body: m.LeaseIn = json_body(m.LeaseIn)) -> Any:
        return await workers.acquire(s, stage_id, body)

    @router.post("/stages/{stage_id}/lease/renew", openapi_extra=takes(m.LeaseIn), responses={200: {"model": m.LeaseOut}})
    async def renew(stage_id: str, s: Session = Depends(session), body: m.LeaseIn = json_body(m.LeaseIn)) -> Any:
        return await workers.acquire(s, stage_id, body, renew=True)

    @router.post("/stages/{stage_id}/result", status_code=202, openapi_extra=takes(m.ResultIn),
                 responses={202: {"model": m.ResultOut},
                            409: {"model": m.ResultOut | m.Error, "description": "a stale result (accepted: false)"}})
    async def result(stage_id: str, s: Session = Depends(session), body: m.ResultIn = json_body(m.ResultIn)) -> Any:
        status, answer = await workers.result(s, stage_id, body)
        return JSONResponse(answer, status_code=status)

    # ---- the batch routes (``_batch``): many items in one request, each as its one-item route --

    @router.post("/jobs/pull-batch", openapi_extra=takes(m.PullBatchIn),
                 responses={200: {"model": m.JobsOut}, 204: {"description": "no job within waitSeconds"}})
    async def pull_batch(request: Request, s: Session = Depends(session),
                         body: m.PullBatchIn = json_body(m.PullBatchIn)) -> Any:
        status, answer = await batch.pull(workers, s, body, gone=lambda: gone(request.receive))
        return Response(status_code=204) if answer is None else JSONResponse(answer, status_code=status)

    @router.post("/stages/results", openapi_extra=takes(m.ResultsIn), responses={200: {"model": m.ResultsOut}})
    async def results(s: Session = Depends(session), body: m.ResultsIn = json_body(m.ResultsIn)) -> Any:
        _, answer = await batch.results(workers, s, body)
        return answer

    @router.post("/jobs/ack", openapi_extra=takes(m.AckIn), responses={200: {"model": m.AckOut}})
    async def ack(s: Session = Depends(session), body: m.AckIn = json_body(m.AckIn)) -> Any:
        return await workers.ack(s, body)

    @router.post("/workers/heartbeat", openapi_extra=takes(m.HeartbeatIn), responses={200: {"model": m.OkOut}})
    async def heartbeat(s: Session = Depends(session), body: m.HeartbeatIn = json_body(m.HeartbeatIn)) -> Any:
        return await workers.heartbeat(s, body)

    @router.post("/workers/shutdown", responses={200: {"model": m.OkOut}})
    async def shutdown(s: Session = Depends(session)) -> Any:
        return await workers.shutdown(s)

    @router.get("/workers", responses={200: {"model": list[m.WorkerOut]}})
    async def list_workers(who: Access = Depends(access)) -> Any:
        return await workers.list(who)

    return router
