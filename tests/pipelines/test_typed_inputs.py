"""The pipeline operations take typed inputs (``flowli.pipelines.PipelineIn``, ``ResultIn``, …):
the HTTP routes hand over the model they read, a Python caller may pass the model or a mapping,
and a mapping that is not one is refused by the operation in the very sentence the HTTP service
answers for the same body (one check, one wording). Both backends."""

from __future__ import annotations

import contextlib
from typing import Any

import httpx
import pytest

from flowli import Registry
from flowli.http import create_app
from flowli.pipelines import (
    Applications,
    IdempotentPipelineIn,
    PipelineIn,
    PipelineInputError,
    Pipelines,
    ResultIn,
    Workers,
    install,
)

pytestmark = pytest.mark.integration

DECLARATION = {"name": "invoice", "pipelineKeywords": [{"key": "customer", "value": "acme"}],
               "pipelineContextItems": [{"key": "token", "value": "s3cret", "isSensitive": True}],
               "stages": [{"stageName": "load", "stageHandlerName": "Load", "options": {"maxRetries": 3}},
                          {"stageName": "send", "stageHandlerName": "Send", "input": '{"to": "a"}'}]}

BAD = [
    {**DECLARATION, "idempotencyKey": "k1", "stages": [{"stageName": "load", "stageHandlerName": "Load",
                                                        "options": {"maxRetries": "3"}}]},
    {**DECLARATION, "idempotencyKey": "k2", "stages": [{"stageName": "load", "stageHandlerName": "Load",
                                                        "retries": 3}]},
    {**DECLARATION, "idempotencyKey": "k3", "pipelineKeywords": [{"key": "k", "value": 3}]},
    {**DECLARATION, "idempotencyKey": "k4", "name": 7},
    {"idempotencyKey": "k5", "stages": DECLARATION["stages"]},
]


async def test_a_model_and_the_same_mapping_are_one_intent(open_pipelines):
    async with open_pipelines() as (engine, access, pipelines):
        body = {**DECLARATION, "idempotencyKey": "invoice-1"}
        made, created = await pipelines.create(access, IdempotentPipelineIn.model_validate(body), idempotent=True)
        again, created_again = await pipelines.create(access, body, idempotent=True)
        assert created and not created_again and again["id"] == made["id"]
        # a number stays as sent (3, not 3.0): the intent of a create made before is the same
        options = (await pipelines.get(access, made["id"]))["stages"][0]["options"]
        assert options == {"maxRetries": 3} and type(options["maxRetries"]) is int, options
        # the legacy create takes its own model
        legacy, _ = await pipelines.create(access, PipelineIn.model_validate(DECLARATION), idempotent=False)
        assert legacy["id"] != made["id"] and [s["name"] for s in legacy["stages"]] == ["load", "send"]


async def test_a_bad_mapping_is_refused_by_the_operation_as_the_route_refuses_its_body(open_engine):
    registry = Registry()
    install(registry)
    async with open_engine(registry, worker=False) as engine, contextlib.AsyncExitStack() as stack:
        _, key = await Applications(engine).create("billing")
        access = await Applications(engine).authenticate(key)
        pipelines = Pipelines(engine)
        client = await stack.enter_async_context(httpx.AsyncClient(
            transport=httpx.ASGITransport(app=create_app(engine)), base_url="http://127.0.0.1", timeout=30))
        for body in BAD:
            with pytest.raises(PipelineInputError) as refused:
                await pipelines.create(access, body, idempotent=True)
            answer = await client.post("/pipelines/idempotent", json=body, headers={"X-API-Key": key})
            assert answer.status_code == 400 and answer.json() == {"error": str(refused.value)}, (body, answer.text)
        assert (await pipelines.list(access))["totalCount"] == 0  # nothing of a refused body is kept


async def test_a_result_is_a_typed_input_and_its_repeat_is_known_by_its_fields(open_engine):
    registry = Registry()
    install(registry)
    async with open_engine(registry) as engine:
        apps = Applications(engine)
        _, key = await apps.create("billing")
        access = await apps.authenticate(key)
        pipelines = Pipelines(engine)
        workers = Workers(engine, pipelines, 30.0, apps)
        boot = await workers.bootstrap(access, {"workerName": "w", "supportedHandlers": ["Load", "Send"]})
        session = await workers.session(boot["workerSessionToken"])
        await pipelines.create(access, DECLARATION, idempotent=False)
        job: dict[str, Any] | None = await workers.pull(session, {"waitSeconds": 5})
        assert job is not None and job["stageName"] == "load"
        sent = {"executionId": job["executionId"], "attempt": job["attempt"], "isSuccess": True, "output": "ok",
                "contextItems": [{"key": "token", "value": "other", "isSensitive": True}]}
        assert await workers.result(session, str(job["stageId"]), ResultIn.model_validate(sent)) == (
            202, {"accepted": True})
        # the same result again, as a mapping: a repeat (accepted, nothing changes); another is stale
        assert await workers.result(session, str(job["stageId"]), sent) == (202, {"accepted": True})
        status, answer = await workers.result(session, str(job["stageId"]), {**sent, "output": "different"})
        assert status == 409 and answer["accepted"] is False
        with pytest.raises(PipelineInputError, match="^isSuccess must be true or false, got \"yes\"$"):
            await workers.result(session, str(job["stageId"]), {**sent, "isSuccess": "yes"})
