"""Encoding of records to rows and back, shared by the backends."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from flowli.domain import (
    Entry,
    EntryKind,
    ExecutionRecord,
    Message,
    Provenance,
    Status,
    Task,
    TaskKind,
    Timer,
    dumps,
    loads,
)


def ts(value: datetime | None) -> float | None:
    """An instant as UNIX seconds: numeric columns order and compare correctly."""
    return None if value is None else value.timestamp()


def dt(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, timezone.utc)


def dt_(value: float) -> datetime:
    return datetime.fromtimestamp(value, timezone.utc)


def js(value: Any) -> str | None:
    return None if value is None else dumps(value)


def unjs(value: str | None) -> Any:
    return None if value is None else loads(value)


def prov(p: Provenance) -> str:
    return dumps(p.to_json())


def unprov(s: str) -> Provenance:
    return Provenance.from_json(loads(s))


EXECUTION_COLUMNS = (
    "eid, workflow, version, status, args, queue, created_at, updated_at, result, error, "
    "parent_eid, parent_fid, key, lease_owner, lease_epoch, lease_expires_at, cancel_requested, blocked, application"
)
EXECUTION_WIDTH = EXECUTION_COLUMNS.count(",") + 1


def execution_row(r: ExecutionRecord) -> tuple[Any, ...]:
    return (
        r.eid, r.workflow, r.version, r.status.value, dumps(r.args), r.queue, ts(r.created_at),
        ts(r.updated_at), js(r.result), js(r.error), r.parent_eid, r.parent_fid, r.key,
        r.lease_owner, r.lease_epoch, ts(r.lease_expires_at), js(r.cancel_requested), js(r.blocked), r.application,
    )


def execution_record(row: Any) -> ExecutionRecord:
    return ExecutionRecord(
        eid=row[0], workflow=row[1], version=row[2], status=Status(row[3]), args=loads(row[4]),
        queue=row[5], created_at=dt_(row[6]), updated_at=dt_(row[7]), result=unjs(row[8]),
        error=unjs(row[9]), parent_eid=row[10], parent_fid=row[11], key=row[12], lease_owner=row[13],
        lease_epoch=row[14], lease_expires_at=dt(row[15]), cancel_requested=unjs(row[16]),
        blocked=unjs(row[17]), application=row[18],
    )


ENTRY_COLUMNS = "eid, seq, kind, fid, attempt, digest, value, error, provenance"


def entry_row(e: Entry, seq: int) -> tuple[Any, ...]:
    return (e.eid, seq, e.kind.value, e.fid, e.attempt, e.digest, js(e.value), js(e.error), prov(e.provenance))


def entry_record(row: Any, journal_seq: int | None = None) -> Entry:
    return Entry(
        eid=row[0], seq=row[1], kind=EntryKind(row[2]), fid=row[3], attempt=row[4], digest=row[5],
        value=unjs(row[6]), error=unjs(row[7]), provenance=unprov(row[8]), journal_seq=journal_seq,
    )


TASK_COLUMNS = (
    "id, kind, queue, eid, payload, provenance, visible_at, deliveries, lease_owner, application, attempt, frame"
)
TASK_WIDTH = TASK_COLUMNS.count(",") + 1
TASK_READ = TASK_COLUMNS + ", state"
"""The columns a read of tasks selects: those written, and the state."""


def task_row(t: Task) -> tuple[Any, ...]:
    return (
        t.id, t.kind.value, t.queue, t.eid, js(t.payload), prov(t.provenance), ts(t.visible_at),
        t.deliveries, t.lease_owner, t.application, t.attempt, js(t.frame),
    )


def task_record(row: Any) -> Task:
    return Task(
        id=row[0], kind=TaskKind(row[1]), queue=row[2], eid=row[3], payload=unjs(row[4]),
        provenance=unprov(row[5]), visible_at=dt_(row[6]), deliveries=row[7], lease_owner=row[8],
        application=row[9], attempt=row[10], frame=unjs(row[11]), state=row[12] if len(row) > 12 else "ready",
    )


MESSAGE_COLUMNS = "channel, seq, payload, provenance, application"


def message_record(row: Any) -> Message:
    return Message(channel=row[0], seq=row[1], payload=unjs(row[2]), provenance=unprov(row[3]), application=row[4])


def timer_record(row: Any) -> Timer:
    return Timer(eid=row[0], fid=row[1], at=dt_(row[2]))


def worker_record(row: Any) -> dict[str, Any]:
    return {"id": row[0], "kind": row[1], "queues": unjs(row[2]), "started_at": dt_(row[3]), "seen_at": dt_(row[4]),
            "workflows": unjs(row[5]) or {}}
