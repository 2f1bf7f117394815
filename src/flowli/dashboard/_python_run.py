"""What a Python run's page shows beside its timeline (what ``flowli show`` and ``explain``
compute): its frames with their attempts and durations, what it waits on, its inputs under
their parameters' names and its result, its error with the code and the traceback, and the
versions it can be migrated to. Every value is redacted (sensitive keys ``***``) and cut short;
the templates escape the rest."""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

from flowli.catalog import inputs_of
from flowli.domain import Entry, ExecutionRecord, Status, UnknownWorkflowError
from flowli.engine import FrameView, RunView, describe_wait
from flowli.pipelines import redact as redact_value

from ._durations import took

if TYPE_CHECKING:
    from ._app import Dashboard

FRAMES_SHOWN = 300
"""The frames the page lists at most: the newest (a long run's page says how many it left out)."""
VALUE_CHARS = 400
TRACEBACK_LINES = 60


def shown(value: Any, chars: int = VALUE_CHARS) -> str:
    """A value as the page shows it: JSON, sensitive values ``***``, at most ``chars`` characters."""
    text = json.dumps(redact_value(value), default=str, ensure_ascii=False)
    return text if len(text) <= chars else text[:chars] + "…"


def _duration(start: datetime | None, end: datetime | None, now: datetime) -> str:
    return "" if start is None else took(((end or now) - start).total_seconds(), end is not None)


def error_of(error: dict[str, Any] | None) -> dict[str, Any] | None:
    """An error as the page shows it: type, code, message, and the traceback's last lines."""
    if not error:
        return None
    trace = error.get("traceback")
    lines = str(trace).splitlines()[-TRACEBACK_LINES:] if trace else []
    return {"type": error.get("type") or "Error", "code": error.get("code"), "message": error.get("message") or "",
            "traceback": "\n".join(lines)}


def _frame(eid: str, f: FrameView, now: datetime) -> dict[str, Any]:
    return {
        "fid": f.fid, "name": f.name, "kind": f.kind, "status": f.status, "group": f.group or "",
        "attempts": [{"number": a.number, "outcome": a.outcome, "took": _duration(a.started_at, a.ended_at, now),
                      "by": a.by or ""} for a in f.attempts],
        "took": _duration(f.started_at, f.ended_at, now),
        "wait": describe_wait(eid, f.wait) if f.wait else "", "child": f.child,
        "value": shown(f.value) if f.status == "completed" and f.value is not None else "",
        "error": error_of(f.error),
    }


def sections(d: Dashboard, record: ExecutionRecord, journal: list[Entry]) -> dict[str, Any]:
    """The sections of a Python run's page (see the module's note), from its record and journal."""
    view = RunView.of(record, journal)
    now = d.engine.clock.now()
    frames = [_frame(record.eid, f, now) for f in view.frames]
    try:
        fn = d.engine.registry.get(record.workflow, record.version).fn
    except UnknownWorkflowError:  # served without the workflow's code: its inputs by position
        fn = None
    given = inputs_of(record, fn)
    inputs = [(name, shown(value)) for name, value in given.items()] if isinstance(given, dict) else \
        [(f"argument {n + 1}", shown(value)) for n, value in enumerate(given or [])]
    versions = [v for v in d.engine.registry.versions(record.workflow) if v != record.version] \
        if record.status is Status.SUSPENDED else []
    return {
        "frames": frames[-FRAMES_SHOWN:], "frames_left": max(0, len(frames) - FRAMES_SHOWN),
        "waits": [describe_wait(record.eid, w) for w in view.waits],
        "inputs": inputs,
        "result": shown(record.result, 4 * VALUE_CHARS) if record.status is Status.COMPLETED else None,
        "failure": error_of(record.error) if record.status is Status.FAILED else None,
        "took": _duration(record.created_at, record.updated_at if record.terminal else None, now),
        "versions": versions, "lease": view.lease,
    }
