"""A run as the lists show it (the runs list, its live rows, the stuck page), each in its
audience's words: a pipeline by its number, its name, its stages done of all and its status
(``status_word``: the one mapping from the engine's words), read from the decider's states of a
page in one read; a Python run by its workflow and version; every row with its duration."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flowli.domain import TERMINAL, ExecutionRecord, Status
from flowli.pipelines import WORKFLOW, progress, status_word

from ._durations import took

if TYPE_CHECKING:
    from ._app import Dashboard

ENDED = tuple(s.value for s in TERMINAL)


def declaration(record: ExecutionRecord) -> dict[str, Any] | None:
    """A pipeline's declaration (its create body, as it started), else None."""
    if record.workflow == WORKFLOW and record.args and isinstance(record.args[0], dict):
        return record.args[0]
    return None


async def rows_of(d: Dashboard, application: str, records: list[ExecutionRecord]) -> list[dict[str, Any]]:
    """Runs as the list shows them, from their records."""
    return await in_words(d, application, [summary(r, r) for r in records])


def summary(s: Any, record: ExecutionRecord | None) -> dict[str, Any]:
    spec = declaration(record) if record is not None else None
    return {"eid": s.eid, "workflow": s.workflow, "version": s.version, "status": s.status.value,
            "created_at": s.created_at, "updated_at": s.updated_at,
            "ended": s.status.value in ENDED, "pipeline": spec.get("name") if spec else None,
            "pipeline_id": spec.get("pipelineId") if spec else None, "progress": None}


async def in_words(d: Dashboard, application: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows with each pipeline in its own words, read from the decider's states of the page in
    one read: its name and number, its status (``status_word``: the one mapping from the engine's
    words), its progress (stages done of all); every row with its duration."""
    pipelines = [r["eid"] for r in rows if r["workflow"] == WORKFLOW]
    states = await d.engine.decider_states(pipelines, application=application) if pipelines else {}
    now = d.engine.clock.now()
    for r in rows:
        end = r["updated_at"] if r["ended"] else now
        r["took"] = took((end - r["created_at"]).total_seconds(), r["ended"])
        if r["workflow"] != WORKFLOW:
            continue
        state = (states.get(r["eid"]) or (0, None))[1]
        spec = (state or {}).get("spec") or {}
        r["pipeline"] = spec.get("name", r["pipeline"])
        r["pipeline_id"] = spec.get("pipelineId", r["pipeline_id"])
        r["status"] = status_word(Status(r["status"]), state)
        r["progress"] = progress(state)
    return rows
