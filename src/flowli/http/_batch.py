"""The batch routes, flowli's addition beside the reference routes (which stay as they are): a
worker pulls many jobs in one long poll and answers many results in one request, a client
creates many pipelines in one request.

Each item is treated exactly as its one-item route treats it, through the same service call:
checked against the one-item route's model (a bad item is answered 400 in its place, naming the
field), then fenced, deduplicated and refused on its own, its status and reason taken from the
one table of refusals (``_errors.REFUSALS``); one item's refusal never refuses another. The
items of a request are applied together (one task each), so the writes of many pipelines share
the store's group commits; the commands of one pipeline still take turns. An item answered 202
is also acknowledged (``POST /jobs/ack`` of an answered job changes nothing), and a job pulled
here is leased already (it carries ``leaseExpiresAt``: no acquire).

The bootstrap answer offers them (``OFFER``); a worker that does not see the offer uses the
reference routes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from flowli.access import Access
from flowli.domain import START_RUNS
from flowli.pipelines import MAX_BATCH, Pipelines, PullBatchIn, ResultItemIn, Session, Workers, read

from . import _models as m
from ._errors import refusal

OFFER = {"maxJobs": MAX_BATCH, "maxResults": MAX_BATCH, "maxCreates": MAX_BATCH}
"""What the bootstrap answer says of the batch routes (``batch``)."""

Answer = tuple[int, Any]


def _refused(exc: Exception) -> tuple[int, dict[str, Any]]:
    """The status and body that the one-item route answers ``exc`` with; an error that is not a
    refusal (a defect: the one-item route answers 500) is raised again."""
    answer = refusal(exc)
    if answer.status_code >= 500 and answer.status_code != 503:
        raise exc
    return answer.status_code, json.loads(bytes(answer.body))


async def pull(workers: Workers, session: Session, body: PullBatchIn,
               gone: Callable[[], Awaitable[Any]] | None) -> Answer:
    """``POST /jobs/pull-batch``: 200 ``{"jobs"}``, or 204 when none came within ``waitSeconds``."""
    jobs = await workers.pull_batch(session, body, gone=gone)
    return (200, {"jobs": jobs}) if jobs else (204, None)


async def results(workers: Workers, session: Session, body: m.ResultsIn) -> Answer:
    """``POST /stages/results``: 200 ``{"results"}``, one per item in the request's order."""

    async def one(item: Any) -> dict[str, Any]:
        stage_id = item.get("stageId") if isinstance(item, dict) else None
        try:
            status, answer = await workers.result(session, str(stage_id), read(ResultItemIn, item))
        except Exception as exc:  # noqa: BLE001 - answered in the item's place as its own route would
            status, answer = _refused(exc)
            return {"stageId": stage_id, "status": status, "accepted": False,
                    "reason": answer.get("reason") or answer.get("error")}
        out = {"stageId": stage_id, "status": status, "accepted": bool(answer.get("accepted"))}
        if answer.get("reason"):
            out["reason"] = answer["reason"]
        return out

    return 200, {"results": list(await asyncio.gather(*(one(item) for item in body.results)))}


async def creates(pipelines: Pipelines, who: Access, body: m.CreatesIn, traceparent: str | None) -> Answer:
    """``POST /pipelines/idempotent/batch``: 200 ``{"results"}``, one per pipeline in the request's
    order: 201 (created) or 200 (an equivalent request created it) with the pipeline, 400 or 409
    with the error (and a 409's ``pipelineId``)."""
    who.require(START_RUNS)  # what creating a pipeline needs, refused for the whole request

    async def one(item: Any) -> dict[str, Any]:
        try:
            view, created = await pipelines.create(who, item, idempotent=True, traceparent=traceparent)
        except Exception as exc:  # noqa: BLE001 - answered in the item's place
            status, answer = _refused(exc)
            return {"status": status, **answer}
        return {"status": 201 if created else 200, "pipeline": view}

    return 200, {"results": list(await asyncio.gather(*(one(item) for item in body.pipelines)))}
