"""Schedules and retry policies over HTTP: ``/schedules`` (a stored pipeline declaration and its
trigger) and ``/policies`` with a stage's ``effective-policy``. As on every route, the credential
is read before the body."""

from __future__ import annotations

from typing import Any, Callable

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from flowli.access import Access
from flowli.pipelines import Policies, Schedules

from . import _models as m
from ._body import json_body, takes


def schedule_routes(schedules: Schedules, access: Callable[..., Any]) -> APIRouter:
    """``/schedules``: a stored pipeline declaration and its trigger."""
    router = APIRouter()

    @router.post("/schedules", status_code=201, openapi_extra=takes(m.ScheduleIn),
                 responses={201: {"model": m.ScheduleOut}})
    async def create_schedule(who: Access = Depends(access), body: m.ScheduleIn = json_body(m.ScheduleIn)) -> Any:
        return await schedules.create(who, body)

    @router.get("/schedules", responses={200: {"model": list[m.ScheduleOut]}})
    async def list_schedules(who: Access = Depends(access)) -> Any:
        return await schedules.list(who)

    @router.get("/schedules/{schedule_id}", responses={200: {"model": m.ScheduleOut}})
    async def get_schedule(schedule_id: str, who: Access = Depends(access)) -> Any:
        return await schedules.get(who, schedule_id)

    @router.delete("/schedules/{schedule_id}", status_code=204, response_class=Response)
    async def delete_schedule(schedule_id: str, who: Access = Depends(access)) -> Response:
        await schedules.delete(who, schedule_id)
        return Response(status_code=204)

    @router.post("/schedules/{schedule_id}/pause", responses={200: {"model": m.ScheduleOut}})
    async def pause_schedule(schedule_id: str, who: Access = Depends(access)) -> Any:
        return await schedules.set_state(who, schedule_id, "paused")

    @router.post("/schedules/{schedule_id}/resume", responses={200: {"model": m.ScheduleOut}})
    async def resume_schedule(schedule_id: str, who: Access = Depends(access)) -> Any:
        return await schedules.set_state(who, schedule_id, "enabled")

    return router


def policy_routes(policies: Policies, access: Callable[..., Any]) -> APIRouter:
    """``/policies`` and a stage's ``effective-policy``."""
    router = APIRouter()

    @router.get("/policies", responses={200: {"model": list[m.PolicyOut]}})
    async def list_policies(who: Access = Depends(access)) -> Any:
        return await policies.list(who)

    @router.post("/policies", status_code=201, openapi_extra=takes(m.PolicyIn), responses={201: {"model": m.PolicyOut}})
    async def create_policy(who: Access = Depends(access), body: m.PolicyIn = json_body(m.PolicyIn)) -> Any:
        return await policies.create(who, body)

    @router.get("/policies/{policy_id}", responses={200: {"model": m.PolicyOut}})
    async def get_policy(policy_id: str, who: Access = Depends(access)) -> Any:
        return await policies.get(who, policy_id)

    @router.put("/policies/{policy_id}", openapi_extra=takes(m.PolicyIn), responses={200: {"model": m.PolicyOut}})
    async def replace_policy(policy_id: str, who: Access = Depends(access),
                             body: m.PolicyIn = json_body(m.PolicyIn)) -> Any:
        return await policies.replace(who, policy_id, body)

    @router.delete("/policies/{policy_id}", status_code=204, response_class=Response)
    async def delete_policy(policy_id: str, who: Access = Depends(access)) -> Response:
        await policies.delete(who, policy_id)
        return Response(status_code=204)

    @router.post("/policies/{policy_id}/enable", responses={200: {"model": m.PolicyOut}})
    async def enable_policy(policy_id: str, who: Access = Depends(access)) -> Any:
        return await policies.set_state(who, policy_id, "enabled")

    @router.post("/policies/{policy_id}/disable", responses={200: {"model": m.PolicyOut}})
    async def disable_policy(policy_id: str, who: Access = Depends(access)) -> Any:
        return await policies.set_state(who, policy_id, "disabled")

    @router.get("/stages/{stage_id}/effective-policy", responses={200: {"model": m.EffectivePolicyOut}})
    async def effective_policy(stage_id: str, who: Access = Depends(access)) -> Any:
        return await policies.effective(who, stage_id)

    return router
