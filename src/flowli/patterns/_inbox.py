"""The review inbox: the reviews that ``review`` opened and that wait for a person, a view of
the control log that this module registers with the engine (the engine knows nothing of it).

    rows = await inbox(engine)                                   # the open reviews, oldest first
    await answer_review(engine, eid, True, by="carol@example.com", reason="ok")
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from flowli.domain import Entry, EntryKind, NoOpenReviewError, Principal
from flowli.engine import Engine, Projector
from flowli.store import Plan

_ENDS = (EntryKind.EXECUTION_COMPLETED, EntryKind.EXECUTION_FAILED, EntryKind.EXECUTION_CANCELLED)


@dataclass(frozen=True)
class Review:
    """One row of the review inbox."""

    eid: str
    frame: str
    """The frame id of the review's delegate frame in its execution."""
    subject: str
    data: Any
    queue: str
    opened_at: datetime
    closed_at: datetime | None = None
    answer: Any = None


def _plan(entries: list[Entry]) -> Plan:
    for e in entries:
        at = e.provenance.at.timestamp()
        if e.kind is EntryKind.ANNOUNCED and isinstance(e.value, dict):
            kind, data = e.value.get("kind"), e.value.get("data") or {}
            if kind == "review.opened":
                yield ("exec", "INSERT INTO view_reviews (eid, frame, subject, data, queue, opened_at)"
                               " VALUES (?,?,?,?,?,?) ON CONFLICT (eid, frame) DO NOTHING",
                       (e.eid, data.get("frame"), data.get("subject"), json.dumps(data.get("data")), data.get("queue"),
                        at))
            elif kind == "review.closed":
                yield ("exec", "UPDATE view_reviews SET closed_at = ?, answer = ? WHERE eid = ? AND frame = ?",
                       (at, json.dumps(data.get("answer")), e.eid, data.get("frame")))
        elif e.kind in _ENDS:
            yield ("exec", "UPDATE view_reviews SET closed_at = ? WHERE eid = ? AND closed_at IS NULL", (at, e.eid))


REVIEWS = Projector(
    name="reviews",
    version=1,
    tables=("view_reviews",),
    schema=(
        "CREATE TABLE IF NOT EXISTS view_reviews (eid TEXT NOT NULL, frame TEXT NOT NULL, subject TEXT, data TEXT,"
        " queue TEXT, opened_at DOUBLE PRECISION, closed_at DOUBLE PRECISION, answer TEXT, PRIMARY KEY (eid, frame))",
        "CREATE INDEX IF NOT EXISTS view_reviews_open ON view_reviews (opened_at) WHERE closed_at IS NULL",
    ),
    plan=_plan,
)
"""The projector of the review inbox."""


def _stamp(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, timezone.utc)


async def inbox(
    engine: Engine, open_only: bool = True, limit: int = 100, *, application: str | None = None
) -> list[Review]:
    """The reviews that ``review`` opened, oldest first: the open ones, or (``open_only=False``)
    those answered or ended too; of ``application`` only, when given."""
    engine.project(REVIEWS)
    where = ["r.closed_at IS NULL"] if open_only else []
    params: list[Any] = []
    join = ""
    if application is not None:
        # the executions' view names the application of each execution: it catches up too
        await engine.list(limit=1)
        join = " JOIN view_executions e ON e.eid = r.eid"
        where.append("e.application = ?")
        params.append(application)
    rows = await engine.read_view(
        "reviews",
        "SELECT r.eid, r.frame, r.subject, r.data, r.queue, r.opened_at, r.closed_at, r.answer FROM view_reviews r"
        + join + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY r.opened_at, r.eid, r.frame LIMIT ?",
        [*params, limit],
    )
    return [Review(eid=r[0], frame=r[1], subject=r[2], data=json.loads(r[3]) if r[3] else None, queue=r[4],
                   opened_at=_stamp(r[5]) or datetime.min, closed_at=_stamp(r[6]),
                   answer=json.loads(r[7]) if r[7] else None) for r in rows]


async def answer_review(
    engine: Engine, eid: str, approved: bool, *, by: str | Principal, reason: str | None = None,
    application: str | None = None,
) -> int | None:
    """Answer the open review of an execution: ``{"approved", "reason", "by"}``, with the person's
    provenance. NoOpenReviewError when none waits (UnknownExecutionError for an unknown eid)."""
    if application is None and isinstance(by, Principal):
        application = by.application
    await engine.status(eid, application=application)  # an unknown eid says so
    waiting = [r for r in await inbox(engine, limit=10_000, application=application) if r.eid == eid]
    tasks = {t.frame["fid"]: t for t in await engine.tasks(eid=eid) if t.frame is not None}
    who = by.id if isinstance(by, Principal) else by
    for review in waiting:
        task = tasks.get(review.frame)
        if task is not None:
            return await engine.answer(task.id, {"approved": approved, "reason": reason, "by": who}, by=by,
                                       application=application, decision=True)
    raise NoOpenReviewError(eid)
