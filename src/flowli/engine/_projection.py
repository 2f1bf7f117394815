"""The projection: views of the control log, kept in the store's projection tables (``Views``) by
the projectors that the layers register. Derived state only: each view can be rebuilt from the
control log (a projector of a new version is; a SQLite projection file may be deleted).

The engine registers one projector of its own, the executions (``engine.list``); the layers
above register theirs (the review inbox of ``flowli.patterns``, the stage statuses of the
pipelines) with ``engine.project``, and read them with ``engine.read_view``. The engine knows
none of their vocabulary.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from flowli.domain import ENTRY_STATUS, Entry, EntryKind, RegistrationError, Status, dumps
from flowli.store import Plan, Store, scope_sql

_BATCH = 1000
BLOCKED = "blocked"
"""The state a list can filter on beside the statuses: suspended for an operator (a nondeterminism)."""


@dataclass(frozen=True)
class Projector:
    """A view of the control log: its tables (named ``view_*``), the statements that create them
    (SQL that SQLite and PostgreSQL both accept), and ``plan(entries)``, a generator of the
    statements that apply a run of control-log entries (``("exec", sql, params)``, ``?``
    placeholders; it may read, with ``"one"`` and ``"all"``). A new ``version`` rebuilds the view."""

    name: str
    version: int
    tables: tuple[str, ...]
    schema: tuple[str, ...]
    plan: Callable[[list[Entry]], Plan]

    def __post_init__(self) -> None:
        bad = [t for t in self.tables if not t.startswith("view_")]
        if bad:
            raise RegistrationError(f"projector {self.name!r}: the table names {bad} must start with view_")


@dataclass(frozen=True)
class ExecutionSummary:
    """One row of :meth:`Engine.list`."""

    eid: str
    workflow: str
    version: str
    status: Status
    created_at: datetime
    updated_at: datetime
    parent_eid: str | None = None
    application: str | None = None
    blocked: dict[str, Any] | None = None
    """Why a suspended execution waits for an operator (a nondeterminism), else None."""

    @property
    def cursor(self) -> str:
        """The cursor of the page that starts after this row (``engine.list(cursor=...)``)."""
        return f"{self.created_at.timestamp()!r}|{self.eid}"


@dataclass(frozen=True, eq=False)
class ExecutionPage(Sequence[ExecutionSummary]):
    """A page of :meth:`Engine.list`: the rows (a sequence, equal to the list of them), the cursor
    of the next page (None on the last), and the executions per status under the same filters,
    status aside, over all pages."""

    items: list[ExecutionSummary]
    next: str | None = None
    counts: dict[str, int] = field(default_factory=dict)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ExecutionPage):
            return (self.items, self.next, self.counts) == (other.items, other.next, other.counts)
        if isinstance(other, list):
            return self.items == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: Any) -> Any:
        return self.items[i]

    def __iter__(self) -> Iterator[ExecutionSummary]:
        return iter(self.items)


def _executions_plan(entries: list[Entry]) -> Plan:
    for e in entries:
        at = e.provenance.at.timestamp()
        seq = e.journal_seq or 0
        if e.kind is EntryKind.EXECUTION_STARTED:
            v = e.value if isinstance(e.value, dict) else {}
            # the control log may hold a later change of the execution before its start (two
            # announcements racing, or a repair): the start then fills in what it knows only
            yield ("exec", "INSERT INTO view_executions (eid, workflow, version, status, parent_eid, application,"
                           " created_at, updated_at, last_seq) VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT (eid) DO UPDATE"
                           " SET workflow = excluded.workflow, version = excluded.version,"
                           " parent_eid = excluded.parent_eid, application = excluded.application,"
                           " created_at = excluded.created_at",
                   (e.eid, v.get("workflow"), v.get("version"), Status.PENDING.value, v.get("parent_eid"),
                    v.get("application"), at, at, seq))
        elif e.kind in ENTRY_STATUS:
            # a suspension for an operator (a nondeterminism) is "blocked" until the next change
            v = e.value if isinstance(e.value, dict) else {}
            blocked = dumps(v) if e.kind is EntryKind.EXECUTION_SUSPENDED and v.get("reason") == "nondeterminism" \
                else None
            yield ("exec", "INSERT INTO view_executions (eid, status, created_at, updated_at, last_seq, blocked)"
                           " VALUES (?,?,?,?,?,?) ON CONFLICT (eid) DO UPDATE SET status = excluded.status,"
                           " updated_at = excluded.updated_at, last_seq = excluded.last_seq, blocked = excluded.blocked"
                           " WHERE view_executions.last_seq < excluded.last_seq",
                   (e.eid, ENTRY_STATUS[e.kind].value, at, at, seq, blocked))
        elif e.kind is EntryKind.EXECUTION_MIGRATED:
            yield ("exec", "UPDATE view_executions SET version = ? WHERE eid = ?", ((e.value or {}).get("to"), e.eid))


EXECUTIONS = Projector(
    name="executions",
    version=3,
    tables=("view_executions",),
    schema=(
        "CREATE TABLE IF NOT EXISTS view_executions (eid TEXT PRIMARY KEY, workflow TEXT, version TEXT, status TEXT,"
        " parent_eid TEXT, application TEXT, created_at DOUBLE PRECISION, updated_at DOUBLE PRECISION,"
        " last_seq BIGINT, blocked TEXT)",
        "CREATE INDEX IF NOT EXISTS view_executions_created ON view_executions (created_at, eid)",
        "CREATE INDEX IF NOT EXISTS view_executions_status ON view_executions (status, created_at, eid)",
        "CREATE INDEX IF NOT EXISTS view_executions_workflow ON view_executions (workflow, created_at, eid)",
        "CREATE INDEX IF NOT EXISTS view_executions_application ON view_executions (application, created_at, eid)",
    ),
    plan=_executions_plan,
)
"""The engine's own view: one row per execution, for ``engine.list``."""


def _stamp(value: float) -> datetime:
    return datetime.fromtimestamp(value, timezone.utc)


def _parse_cursor(cursor: str) -> tuple[float, str]:
    at, sep, eid = cursor.partition("|")
    try:
        if not sep or not eid:
            raise ValueError
        return float(at), eid
    except ValueError:
        raise ValueError(f"invalid cursor {cursor!r}: pass the `next` of a page of engine.list") from None


class Projection:
    """The projectors of one engine over its store's projection tables."""

    def __init__(self, store: Store):
        self._store = store
        self._views = store.views()
        self._projectors: dict[str, Projector] = {}
        self._installed: set[str] = set()
        self._locks: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self.register(EXECUTIONS)

    def register(self, projector: Projector) -> None:
        known = self._projectors.get(projector.name)
        if known is not None and known != projector:
            raise RegistrationError(f"another projector is registered as {projector.name!r}")
        self._projectors[projector.name] = projector

    def projector(self, name: str) -> Projector:
        try:
            return self._projectors[name]
        except KeyError:
            raise RegistrationError(f"no projector {name!r} is registered (engine.project registers one)") from None

    async def catch_up(self, name: str) -> int:
        """Apply the control-log entries past the projector's cursor; returns how many."""
        projector = self.projector(name)
        applied = 0
        async with self._locks[name]:
            if name not in self._installed:
                await self._views.install(name, projector.version, projector.tables, projector.schema)
                self._installed.add(name)
            while True:
                cursor = await self._views.cursor(name)
                entries = await self._store.read_control_log(cursor, _BATCH)
                if not entries:
                    return applied
                applied += await self._views.advance(name, entries, projector.plan)

    async def read_as_is(self, name: str, sql: str, params: Sequence[Any] = ()) -> tuple[list[tuple[Any, ...]], int]:
        """Rows of a SELECT on a projector's tables as they stand, and its cursor, without catching
        it up (which writes): a reader that must write nothing reads the control log past the
        cursor itself. A view never installed yet has no rows and cursor 0."""
        try:
            return await self._views.read(sql, params), int(await self._views.cursor(name))
        except Exception:  # noqa: BLE001 - the view's tables do not exist in this database yet
            return [], 0

    async def position(self, name: str) -> int:
        """The seq of the last control-log entry the projector has read, once it caught up."""
        await self.catch_up(name)
        return int(await self._views.cursor(name))

    async def read(self, name: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of a SELECT on a projector's tables, once it caught up."""
        await self.catch_up(name)
        return await self._views.read(sql, params)

    async def list(
        self, status: Status | str | None, workflow: str | None, limit: int, application: str | None,
        cursor: str | None, since: datetime | None = None, until: datetime | None = None,
    ) -> ExecutionPage:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        st = status if status == BLOCKED else Status(status).value if status is not None else None
        where: list[str] = []
        params: list[Any] = []
        if workflow is not None:
            where.append("workflow = ?")
            params.append(workflow)
        if application is not None:
            scoped, scope_params = scope_sql("application", application)
            where.append(scoped)
            params += scope_params
        if since is not None:
            where.append("created_at >= ?")
            params.append(since.timestamp())
        if until is not None:
            where.append("created_at < ?")
            params.append(until.timestamp())
        counted = await self.read("executions", "SELECT status, blocked IS NOT NULL, COUNT(*) FROM view_executions"
                                  + (" WHERE " + " AND ".join(where) if where else "")
                                  + " GROUP BY status, blocked IS NOT NULL", params)
        counts = {s.value: 0 for s in Status} | {BLOCKED: 0}
        for status_, is_blocked, n in counted:
            counts[str(status_)] += int(n)
            if is_blocked:
                counts[BLOCKED] += int(n)
        if st == BLOCKED:
            where.append("blocked IS NOT NULL")
        elif st is not None:
            where.append("status = ?")
            params.append(st)
        if cursor is not None:
            at, eid = _parse_cursor(cursor)
            where.append("(created_at < ? OR (created_at = ? AND eid < ?))")
            params += [at, at, eid]
        rows = await self._views.read(
            "SELECT eid, workflow, version, status, created_at, updated_at, parent_eid, application, blocked"
            " FROM view_executions"
            + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY created_at DESC, eid DESC LIMIT ?",
            [*params, limit + 1],
        )
        items = [ExecutionSummary(eid=r[0], workflow=r[1], version=r[2], status=Status(r[3]), created_at=_stamp(r[4]),
                                  updated_at=_stamp(r[5]), parent_eid=r[6], application=r[7],
                                  blocked=json.loads(r[8]) if r[8] else None) for r in rows[:limit]]
        more = len(rows) > limit
        return ExecutionPage(items, items[-1].cursor if more and items else None, counts)
