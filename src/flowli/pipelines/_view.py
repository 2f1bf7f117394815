"""The public JSON of a pipeline: the workflow's replayed state (``engine.inspect``), the times of
its journal entries, and the leases of its open attempts. Sensitive values are ``"***"``."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

from flowli.domain import REDACTED as REDACTED  # the one mark of a hidden value (the worker protocol's too)
from flowli.domain import Entry, EntryKind, ExecutionRecord, Status, Task, is_sensitive

from ._workflow import Pipeline

_EXECUTION_STATUS = {Status.COMPLETED: "Completed", Status.FAILED: "Failed", Status.CANCELLED: "Cancelled"}


def iso(at: datetime | None) -> str | None:
    if at is None:
        return None
    return at.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def redact_items(items: list[dict[str, Any]], keys: Collection[str] = ()) -> list[dict[str, Any]]:
    """Copies of context items, the value of each sensitive one ``"***"`` (marked so, or of a key in
    ``keys``: the pipeline's keys that were ever sensitive)."""
    return [{**i, "value": REDACTED} if is_sensitive(i, keys) else dict(i) for i in items]


def pipeline_status(record: ExecutionRecord, p: Pipeline | None) -> str:
    if record.status in _EXECUTION_STATUS:
        return _EXECUTION_STATUS[record.status]
    if p is None:
        return "NotStarted"
    if p.paused:
        return "Paused"
    if p.outcome is not None:
        return p.outcome
    started = any(s.status != "NotStarted" for s in p.stages.values())
    return "Running" if started else "NotStarted"


def build(record: ExecutionRecord, p: Pipeline, journal: list[Entry], tasks: list[Task], application_id: int,
          now: datetime) -> dict[str, Any]:
    started_at: dict[str, datetime] = {}
    ended_at: dict[str, datetime] = {}
    for e in journal:
        if e.fid is None:
            continue
        if e.kind is EntryKind.FRAME_STARTED:
            started_at.setdefault(e.fid, e.at)
        elif e.kind in (EntryKind.FRAME_COMPLETED, EntryKind.FRAME_FAILED):
            ended_at[e.fid] = e.at
    open_tasks = {t.frame["fid"]: t for t in tasks if t.frame and t.state == "ready"}
    status = pipeline_status(record, p)
    stages = []
    for name in p.order:
        s = p.stages[name]
        spec = s.spec
        stage_status = s.status
        attempt = s.attempts
        execution = None
        task = open_tasks.get(s.frame or "")
        if task is not None and stage_status == "Pending":
            attempt = spec_attempt(task)
            execution = task.id
            if task.lease_owner is not None and task.visible_at > now:
                stage_status = "Running"
        if status == "Cancelled" and stage_status not in ("Completed", "Skipped", "Failed"):
            stage_status = "Cancelled"
        stages.append({
            "id": s.id, "pipelineId": p.spec["pipelineId"], "name": name, "stageHandlerName": spec["stageHandlerName"],
            "description": spec.get("description"), "isEvent": spec.get("isEvent", False), "status": stage_status,
            "input": spec.get("input"), "output": s.output, "attempt": attempt, "executionId": execution,
            "errorCode": s.error_code, "errorMessage": s.error_message, "options": spec.get("options") or {},
            "dependsOn": spec["dependsOn"], "createdAt": iso(record.created_at),
            "startedAt": iso(started_at.get(s.started or "")),
            "finishedAt": iso(ended_at.get(s.finished or "")) if stage_status in ("Completed", "Failed") else None,
        })
    finished = iso(record.updated_at) if status in ("Completed", "Failed", "Cancelled") else None
    return {"id": p.spec["pipelineId"], "name": p.spec["name"], "status": status, "applicationId": application_id,
            "idempotencyKey": p.spec.get("idempotencyKey"), "traceId": p.spec.get("traceId"),
            "createdAt": iso(record.created_at), "finishedAt": finished, "stages": stages,
            "pipelineKeywords": [dict(k) for k in p.spec.get("keywords") or []],
            "pipelineContextItems": redact_items(list(p.context.values()), p.sensitive)}


def spec_attempt(task: Task) -> int:
    """The stage's attempt number of a task: the attempts before its frame, plus its own."""
    return int((task.payload or {}).get("base", 0)) + int(task.attempt or 1)


def declared(spec: dict[str, Any], application_id: int, now: datetime) -> dict[str, Any]:
    """The view of a pipeline just created, from its declaration (what its workflow starts from:
    the stages with no dependency left are Pending), without replaying a journal."""
    p = Pipeline(spec)
    for stage in p.eligible():
        stage.status = "Pending"
    record = SimpleNamespace(status=Status.RUNNING, created_at=now, updated_at=now)
    return build(record, p, [], [], application_id, now)  # type: ignore[arg-type]
