"""Operator actions answer as the tools people know do: with the pipeline as it is after the action
(pause, resume, skip, rerun, cancel); a create's answer carries the stored ``createdAt``; a body
sent without ``Content-Type: application/json`` is told so. Against the shared ``flowli serve``."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.e2e


async def test_each_operator_action_answers_the_pipeline_as_it_is_after_it(service: Any, billing: Any) -> None:
    _, key = billing
    async with httpx.AsyncClient(base_url=service.url, headers={"X-API-Key": key}, timeout=30) as http:
        made = await http.post("/pipelines/idempotent", json={"idempotencyKey": "answers-1", "name": "ops", "stages": [
            {"stageName": "x", "stageHandlerName": "Nobody"}, {"stageName": "y", "stageHandlerName": "Nobody"}]})
        assert made.status_code == 201, made.text
        created = made.json()["pipeline"]
        pid, x = created["id"], created["stages"][0]
        stored = (await http.get(f"/pipelines/{pid}")).json()
        assert created["createdAt"] == stored["createdAt"]  # the stored instant, not another

        paused = await http.post(f"/pipelines/{pid}/pause")
        assert paused.status_code == 200 and paused.json()["status"] == "Paused", paused.text
        skipped = await http.post("/pipelines/skipStage", json={"stageId": x["id"]})
        assert skipped.status_code == 200, skipped.text
        assert [s["status"] for s in skipped.json()["stages"]] == ["Skipped", "NotStarted"]
        resumed = await http.post(f"/pipelines/{pid}/resume")
        assert resumed.status_code == 200 and resumed.json()["status"] == "Running", resumed.text
        assert [s["status"] for s in resumed.json()["stages"]] == ["Skipped", "Pending"]
        rerun = await http.post("/pipelines/rerunStage", json={"stageId": x["id"], "rerunAllNextStages": False})
        assert rerun.status_code == 200, rerun.text
        assert rerun.json()["stages"][0]["status"] == "Pending"
        cancelled = await http.post(f"/pipelines/{pid}/cancel")
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "Cancelled", cancelled.text
        assert [s["status"] for s in cancelled.json()["stages"]] == ["Cancelled", "Cancelled"]


async def test_a_body_without_its_json_content_type_is_told_so(service: Any, billing: Any) -> None:
    _, key = billing
    body = json.dumps({"name": "typed", "stages": [{"stageName": "s", "stageHandlerName": "H"}]})
    async with httpx.AsyncClient(base_url=service.url, headers={"X-API-Key": key}, timeout=30) as http:
        for headers in ({}, {"Content-Type": "text/plain"}):
            r = await http.post("/pipelines", content=body, headers=headers)
            assert r.status_code == 415, (headers, r.status_code, r.text)
            assert r.json() == {"error": "the body must be JSON, sent with Content-Type: application/json"}
        ok = await http.post("/pipelines", content=body, headers={"Content-Type": "application/json; charset=utf-8"})
        assert ok.status_code == 200, ok.text


async def test_a_failed_stage_is_skipped_and_its_failed_pipeline_goes_on(service: Any, billing: Any) -> None:
    # "mark as completed": a stage that failed for good is skipped, and the pipeline it failed
    # goes on with the stages after it
    from flowli.client import PipelinesClient, StageError

    from .test_pipelines import Worker, until_status

    _, key = billing
    async with PipelinesClient(service.url, key) as client, Worker(service.url, key) as worker:
        @worker.handler("Strict")
        async def strict(job: dict[str, Any]) -> str:
            if job["stageName"] == "check":
                raise StageError("VALIDATION_ERROR", "bad data")
            return job["stageName"]

        made = await client.create({"name": "skip-failed", "stages": [
            {"stageName": n, "stageHandlerName": "Strict"} for n in ("check", "ship")]})
        failed = await until_status(client, made["id"], "Failed")
        assert [s["status"] for s in failed["stages"]] == ["Failed", "NotStarted"]
        skipped = await client.http.post("/pipelines/skipStage", json={"stageId": failed["stages"][0]["id"]})
        assert skipped.status_code == 200, skipped.text
        assert skipped.json()["stages"][0]["status"] == "Skipped" and skipped.json()["status"] == "Running"
        done = await until_status(client, made["id"], "Completed")
        assert [s["status"] for s in done["stages"]] == ["Skipped", "Completed"]
