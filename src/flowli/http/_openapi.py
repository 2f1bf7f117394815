"""The service's OpenAPI document: generated from the routes, with the errors every route may
answer (and no 422: bad input is a 400 here) and the models of the bodies the routes read
themselves, after the credential (``_body.json_body``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from pydantic.json_schema import models_json_schema

from . import _models as m
from ._body import BODIES

_ERRORS = {
    "400": "malformed or invalid body (the error names the field)",
    "401": "no or unknown credential",
    "403": "the credential's role does not allow this",
    "404": "no such id in this application",
    "409": "conflict",
    "413": "body too large",
    "503": "not confirmed: send it again",
}


SCHEMES = {
    "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key",
               "description": "An application's API key (flowli apps create, flowli keys create)."},
    "workerSession": {"type": "apiKey", "in": "header", "name": "X-Worker-Session",
                      "description": "A worker's session token, the workerSessionToken of POST /workers/bootstrap."},
    "bearer": {"type": "http", "scheme": "bearer",
               "description": "Either credential as Authorization: Bearer <key or session token>."},
}
"""The credentials of the routes: a key for the application's routes, a worker's session for the
worker protocol after its bootstrap; either one as a bearer token. Which one a route takes is read
from the route itself (the credential it depends on: ``document``'s ``credentials``); a route that
depends on none is open."""

DESCRIPTIONS = {
    "GET /healthz": "`ok` while the service answers: for a load balancer.",
    "POST /pipelines": "Create a pipeline from its declaration (the reference's legacy create): a new one each time.",
    "GET /pipelines": "A page of the application's pipelines, newest first, filtered by status, name, keyword, text"
                      " (over names and context values that are not sensitive) and time.",
    "POST /pipelines/idempotent": "Create a pipeline once per idempotencyKey: 201 the first time, 200 and the same"
                                  " pipeline for the same declaration again, 409 for another declaration.",
    "POST /pipelines/by-idempotency-key": "The pipeline created with an idempotencyKey.",
    "POST /pipelines/rerunStage": "Run a stage again (and, with rerunAllNextStages, the stages after it), on a failed"
                                  " pipeline too; answers the pipeline as it is after the action.",
    "POST /pipelines/skipStage": "Skip a stage (a failed one reopens its pipeline); answers the pipeline as it is after.",
    "GET /pipelines/{pipeline_id}": "A pipeline with its stages, context (sensitive values ***) and keywords.",
    "GET /pipelines/{pipeline_id}/history": "The pipeline's events in its own words (stage.dispatched, stage.completed,"
                                            " stage.retry_scheduled, ...), its start and end, and refused late results.",
    "POST /pipelines/{pipeline_id}/stages": "Append stages to a pipeline that has not ended.",
    "POST /pipelines/{pipeline_id}/pause": "Pause a pipeline: no new stage starts until it resumes.",
    "POST /pipelines/{pipeline_id}/resume": "Resume a paused pipeline.",
    "POST /pipelines/{pipeline_id}/cancel": "Cancel a pipeline: what completed is kept, running attempts are told to"
                                            " stop and their late results are refused.",
    "POST /stages/{stage_id}/resume": "Approve or reject a stage WaitingForApproval, with a reason.",
    "POST /pipelines/idempotent/batch": "Create up to maxCreates pipelines in one request, each idempotent on its own"
                                        " key and answered on its own.",
    "POST /workers/bootstrap": "Register a worker and the handlers it runs (with the application's key): its session"
                               " token, heartbeat interval, lease TTL and the batch routes' limits.",
    "POST /jobs/pull": "Wait up to waitSeconds for one job of the worker's handlers: 200 the job, 204 none came.",
    "POST /stages/{stage_id}/lease/acquire": "Take the lease of a job's stage attempt; run the handler only when"
                                             " acquired is true.",
    "POST /stages/{stage_id}/lease/renew": "Keep the lease while the handler runs; acquired false or cancelRequested"
                                           " true means stop.",
    "POST /stages/{stage_id}/result": "The attempt's result: 202 stored, 409 stale (recorded in the history), 503 not"
                                      " confirmed (send it again).",
    "POST /jobs/pull-batch": "Wait for up to max jobs at once, each already leased to this worker (no acquire).",
    "POST /stages/results": "Up to maxResults results in one request, each fenced, answered and (on 202) acknowledged"
                            " on its own.",
    "POST /jobs/ack": "Acknowledge a job after its result was accepted.",
    "POST /workers/heartbeat": "The worker lives (ready or draining) and runs inFlight jobs.",
    "POST /workers/shutdown": "The worker stops: its session ends.",
    "GET /workers": "The application's workers: handlers, state (ready, draining, offline, stopped), last heartbeat.",
    "POST /schedules": "Schedule a pipeline declaration: cron, interval or once.",
    "GET /schedules": "The application's schedules with their next firing.",
    "GET /schedules/{schedule_id}": "One schedule.",
    "DELETE /schedules/{schedule_id}": "Delete a schedule.",
    "POST /schedules/{schedule_id}/pause": "Pause a schedule.",
    "POST /schedules/{schedule_id}/resume": "Resume a paused schedule.",
    "GET /policies": "The application's retry policies.",
    "POST /policies": "Create a retry policy (its targeting picks the stages whose retries it decides).",
    "GET /policies/{policy_id}": "One retry policy.",
    "PUT /policies/{policy_id}": "Replace a retry policy.",
    "DELETE /policies/{policy_id}": "Delete a retry policy.",
    "POST /policies/{policy_id}/enable": "Enable a retry policy: stages declared from now on follow it.",
    "POST /policies/{policy_id}/disable": "Disable a retry policy.",
    "GET /stages/{stage_id}/effective-policy": "The retry plan a stage follows: the policy's or its options', and its"
                                               " delays.",
    "GET /catalog/namespaces": "The catalog's namespaces, with how many types each holds.",
    "GET /catalog/types": "The workflow types the application may start, by prefix or text.",
    "GET /catalog/types/{name}": "One type: its metadata, input and output schemas, fields and prerequisites.",
    "GET /catalog/types/{name}/prerequisites": "What a type needs before it runs, and whether each is met.",
    "GET /catalog/types/{name}/dag": "A composition's steps as a DAG (a plain type is one step).",
    "POST /catalog/runs": "Start a run of a type with its inputs by name, validated first (400 names each bad one).",
    "GET /catalog/runs": "The application's runs, by type and status (PENDING, COMPLETED, FAILED, PARKED).",
    "GET /catalog/runs/{workflow_id}": "A run's status, output or reason, and its steps.",
    "GET /catalog/runs/{workflow_id}/history": "A run's history; its inputs, outputs and state with"
                                               " include_state_data (sensitive values ***).",
    "POST /catalog/runs/{workflow_id}/retry": "Reopen a failed run from its last good point.",
    "POST /catalog/runs/{workflow_id}/resolve": "Resolve a composition parked at a remediation gate: remediated or"
                                                " denied.",
    "POST /catalog/runs/{workflow_id}/signal": "Send a message to a run's channel (what its ctx.receive waits for).",
    "POST /catalog/runs/{workflow_id}/cancel": "Cancel a run, with a reason.",
    "POST /catalog/runs/{workflow_id}/terminate": "Fail a stale run for good, behind its guards (idle long enough, no"
                                                  " live lease, its journal unchanged).",
    "GET /catalog/stuck": "Runs not terminal, idle for older_than_seconds and waiting on no future timer, with what"
                          " each waits on.",
    "POST /catalog/compositions/validate": "Check a composition against the live catalog: errors and warnings.",
    "GET /catalog/compositions": "The application's saved compositions.",
    "POST /catalog/compositions": "Save a composition (validated first) as a new type.",
}
"""A sentence per route for the document."""


def _describe(doc: dict[str, Any], schemes: dict[str, str]) -> None:
    doc.setdefault("components", {})["securitySchemes"] = SCHEMES
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            said = DESCRIPTIONS.get(f"{method.upper()} {path}")
            if said and not op.get("description"):
                op["description"] = said
            scheme = schemes.get(f"{method.upper()} {path}")
            if scheme is not None:
                op["security"] = [{scheme: []}, {"bearer": []}]


def _schemes(app: FastAPI, credentials: dict[Callable[..., Any], str]) -> dict[str, str]:
    """The credential scheme of each route (``METHOD /path``) that depends on one of
    ``credentials`` (a dependency and the scheme it checks)."""
    out = {}
    for route in _api_routes(app.routes):
        calls, pending = set(), [route.dependant]
        while pending:
            dependant = pending.pop()
            calls.add(dependant.call)
            pending += dependant.dependencies
        scheme = next((name for call, name in credentials.items() if call in calls), None)
        if scheme is not None:
            out.update({f"{method} {route.path}": scheme for method in route.methods or ()})
    return out


def _api_routes(routes: list[Any]) -> Iterator[APIRoute]:
    """The API routes of ``routes``, those of the routers included in it too (FastAPI keeps an
    included router whole, as ``original_router``; flowli includes its routers without a prefix,
    so their paths are the app's)."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from _api_routes(inner.routes)


def document(app: FastAPI, credentials: dict[Callable[..., Any], str]) -> None:
    """Make ``app``'s document this one (built at its first request, then kept). ``credentials``:
    the dependencies that check a credential, each with its scheme (``apiKey``,
    ``workerSession``): a route's security is the scheme of the one it depends on."""

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
            _describe(doc, _schemes(app, credentials))
            doc["components"]["schemas"].pop("HTTPValidationError", None)
            doc["components"]["schemas"].pop("ValidationError", None)
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
