"""The public JSON of a pipeline: its decider's stored state and the leases of its open
attempts. Sensitive values are ``"***"``."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

from flowli.domain import REDACTED as REDACTED  # the one mark of a hidden value (the worker protocol's too)
from flowli.domain import ExecutionRecord, Status, Task, is_sensitive
from flowli.engine import OpenAttempt
from flowli.engine.deciders import Event

from ._decider import INITIAL, evolve, status_of
from ._statuses import DONE_STAGES, ENDED_AS


def iso(at: datetime | None) -> str | None:
    if at is None:
        return None
    return at.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def redact_items(items: list[dict[str, Any]], keys: Collection[str] = ()) -> list[dict[str, Any]]:
    """Copies of context items, the value of each sensitive one ``"***"`` (marked so, or of a key in
    ``keys``: the pipeline's keys that were ever sensitive)."""
    return [{**i, "value": REDACTED} if is_sensitive(i, keys) else dict(i) for i in items]


def pipeline_status(record: ExecutionRecord, p: dict[str, Any] | None) -> str:
    """The pipeline's status: its execution's end (an operator's terminate ends it without its
    decider), else its state's."""
    return status_word(record.status, p)


def status_word(status: Status, p: dict[str, Any] | None) -> str:
    """The status of a pipeline whose execution has ``status`` and whose state is ``p``, in the
    pipeline's words: the execution's end when it ended (``ENDED_AS``), else the state's."""
    if status in ENDED_AS:
        return ENDED_AS[status]
    return "NotStarted" if p is None else status_of(p)


def progress(p: dict[str, Any] | None) -> tuple[int, int]:
    """How many of a pipeline's stages are done (Completed or Skipped), and how many it has."""
    stages = list((p or {}).get("stages", {}).values())
    return sum(1 for s in stages if s["status"] in DONE_STAGES), len(stages)


def open_attempts(tasks: Iterable[Task]) -> list[OpenAttempt]:
    """The open attempts among an execution's ``tasks`` (``engine.tasks``), for ``build``."""
    return [a for a in map(OpenAttempt.of, tasks) if a is not None]


def build(record: ExecutionRecord, p: dict[str, Any], attempts: Iterable[OpenAttempt], application_id: int,
          now: datetime) -> dict[str, Any]:
    """The public view of a pipeline: its execution's ``record``, its decider's state ``p`` and the
    open attempts of its stages (a stage leased now is Running)."""
    open_at = {(a.key, a.attempt): a for a in attempts}
    status = pipeline_status(record, p)
    stages = []
    spec_of = p["spec"]
    for name in p["order"]:
        s = p["stages"][name]
        spec = s["spec"]
        stage_status = s["status"]
        attempt = s["attempts"]
        execution = None
        open_ = open_at.get((str(s["id"]), s["attempts"])) if stage_status == "Pending" else None
        if open_ is not None:
            attempt = stage_attempt(open_.payload, open_.attempt)
            execution = open_.task_id
            if open_.lease_owner is not None and open_.visible_at > now:
                stage_status = "Running"
        if status == "Cancelled" and stage_status not in ("Completed", "Skipped", "Failed"):
            stage_status = "Cancelled"
        stages.append({
            "id": s["id"], "pipelineId": spec_of["pipelineId"], "name": name,
            "stageHandlerName": spec["stageHandlerName"], "description": spec.get("description"),
            "isEvent": spec.get("isEvent", False), "status": stage_status, "input": spec.get("input"),
            "output": s["output"], "attempt": attempt, "executionId": execution, "errorCode": s["errorCode"],
            "errorMessage": s["errorMessage"], "options": spec.get("options") or {}, "dependsOn": spec["dependsOn"],
            "createdAt": iso(record.created_at), "startedAt": _iso(s["startedAt"]),
            "finishedAt": _iso(s["finishedAt"]) if stage_status in ("Completed", "Failed") else None,
        })
    finished = iso(record.updated_at) if status in ("Completed", "Failed", "Cancelled") else None
    return {"id": spec_of["pipelineId"], "name": spec_of["name"], "status": status, "applicationId": application_id,
            "idempotencyKey": spec_of.get("idempotencyKey"), "traceId": spec_of.get("traceId"),
            "createdAt": iso(record.created_at), "finishedAt": finished, "stages": stages,
            "pipelineKeywords": [dict(k) for k in spec_of.get("keywords") or []],
            "pipelineContextItems": redact_items(list(p["context"].values()), p["sensitive"])}


def _iso(at: str | None) -> str | None:
    return iso(datetime.fromisoformat(at)) if at else None


def spec_attempt(task: Task) -> int:
    """The stage's attempt number of a task (``stage_attempt``)."""
    return stage_attempt(task.payload, task.attempt)


def stage_attempt(payload: Any, attempt: int | None) -> int:
    """The stage's attempt number of a delegation's attempt: the attempts before its frame (the
    payload's ``base``), plus its own."""
    return int((payload or {}).get("base", 0)) + int(attempt or 1)


def declared(spec: dict[str, Any], application_id: int, now: datetime) -> dict[str, Any]:
    """The view of a pipeline just created, from its declaration (what its decider starts from:
    the stages with no dependency left are Pending), without reading its state."""
    p = evolve(INITIAL, Event("pipeline.started", {"spec": spec}))
    for name in p["order"]:
        st = p["stages"][name]
        if not st["spec"]["dependsOn"]:
            st["status"] = "Pending"
    record = SimpleNamespace(status=Status.RUNNING, created_at=now, updated_at=now)
    return build(record, p, (), application_id, now)  # type: ignore[arg-type]
