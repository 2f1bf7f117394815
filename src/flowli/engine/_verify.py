"""Check new code against the stored journals before a deploy (``flowli verify``): each live
execution, and the last finished ones of each workflow version, replayed in memory against the
new registry (a dry replay: every memo served from the journal, no step run, nothing written).
The executions are found in the executions view as it stands, plus the control log past its
cursor (so a view that lags is not caught up: that would be a write)."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from flowli.domain import Entry, EntryKind, ExecutionRecord, Status, UnknownExecutionError

from ._archive import Archive
from ._decider import events_of, plain
from ._dry import Divergence, dry_replay
from ._operations import read_journal, read_record
from ._projection import Projection
from ._registry import Registry
from ._runtime import Runtime

LIVE = (Status.PENDING.value, Status.RUNNING.value, Status.SUSPENDED.value)
FINISHED = (Status.COMPLETED.value, Status.FAILED.value, Status.CANCELLED.value)


@dataclass(frozen=True)
class Difference:
    """The first frame where the new code leaves an execution's journal: the frame recorded there
    (id, function, argument digest) and the one the new code makes (its digest, its arguments)."""

    fid: str
    detail: str
    recorded: dict[str, Any] | None
    current: dict[str, Any] | None

    def __str__(self) -> str:
        return f"{self.fid}: {self.detail}"


@dataclass(frozen=True)
class Checked:
    eid: str
    workflow: str
    version: str
    status: str
    difference: Difference | None = None

    @property
    def live(self) -> bool:
        return self.status in LIVE

    @property
    def compatible(self) -> bool:
        return self.difference is None


@dataclass(frozen=True)
class Verification:
    """What ``engine.verify`` found, per workflow and version."""

    checked: list[Checked] = field(default_factory=list)

    @property
    def breaking(self) -> list[Checked]:
        """The live executions the new code would break (a deploy must not go out with any)."""
        return [c for c in self.checked if c.live and not c.compatible]

    def groups(self) -> dict[tuple[str, str], list[Checked]]:
        out: dict[tuple[str, str], list[Checked]] = defaultdict(list)
        for c in self.checked:
            out[(c.workflow, c.version)].append(c)
        return dict(sorted(out.items()))

    def summary(self) -> list[dict[str, Any]]:
        """Per workflow and version: how many were checked, compatible and incompatible, the first
        difference of each incompatible one, and the version a ``version=`` bump of the new code
        would leave them pinned to (their own, which the registry must then keep)."""
        rows = []
        for (workflow, version), group in self.groups().items():
            bad = [c for c in group if not c.compatible]
            rows.append({"workflow": workflow, "version": version, "checked": len(group),
                         "compatible": len(group) - len(bad), "incompatible": len(bad),
                         "live_incompatible": sum(c.live for c in bad), "pin": version if bad else None,
                         "differences": [{"eid": c.eid, "status": c.status, "fid": c.difference.fid,
                                          "detail": c.difference.detail, "recorded": c.difference.recorded,
                                          "current": c.difference.current}
                                         for c in bad if c.difference is not None]})
        return rows


async def _candidates(rt: Runtime, projection: Projection, workflow: str | None, limit: int) -> list[str]:
    """The eids to check: every live one, and the newest ``limit`` finished ones of each workflow
    version; from the executions view without catching it up, then the control log past it."""
    rows, cursor = await projection.read_as_is("executions", "SELECT eid, workflow, version, status, created_at"
                                         " FROM view_executions ORDER BY created_at DESC, eid DESC")
    known: dict[str, tuple[str, str, str, float]] = {r[0]: (r[1], r[2], r[3], r[4]) for r in rows}
    after = cursor
    while True:  # executions started (or changed) after the view's cursor
        entries = await rt.store.read_control_log(after, 1000)
        for e in entries:
            after = e.seq or after
            _note(known, e)
        if len(entries) < 1000:
            break
    finished: dict[tuple[str, str], int] = defaultdict(int)
    out = []
    for eid, (wf, version, status, _) in sorted(known.items(), key=lambda kv: kv[1][3], reverse=True):
        if workflow is not None and wf != workflow:
            continue
        if status in LIVE:
            out.append(eid)
        elif finished[(wf, version)] < limit:
            finished[(wf, version)] += 1
            out.append(eid)
    return out


def _note(known: dict[str, tuple[str, str, str, float]], e: Entry) -> None:
    at = e.provenance.at.timestamp()
    if e.kind is EntryKind.EXECUTION_STARTED and isinstance(e.value, dict):
        old = known.get(e.eid)
        known[e.eid] = (e.value.get("workflow") or "", str(e.value.get("version") or ""),
                        old[2] if old else Status.PENDING.value, at)
    elif e.eid in known:
        wf, version, _, created = known[e.eid]
        status = {EntryKind.EXECUTION_COMPLETED: Status.COMPLETED, EntryKind.EXECUTION_FAILED: Status.FAILED,
                  EntryKind.EXECUTION_CANCELLED: Status.CANCELLED}.get(e.kind)
        if status is not None:
            known[e.eid] = (wf, version, status.value, created)


def _difference(d: Divergence, journal: list[Entry]) -> Difference:
    started = next((e for e in journal if e.fid == d.fid and e.kind is EntryKind.FRAME_STARTED), None)
    recorded = None
    if started is not None:
        value = started.value if isinstance(started.value, dict) else {}
        code = started.provenance.code
        recorded = {"fid": started.fid, "digest": started.digest, "function": code.ref or code.frame_name,
                    **{k: value[k] for k in ("fn", "kind", "args", "kwargs", "workflow") if k in value}}
    current = d.current if isinstance(d.current, dict) or d.current is None else {"args": d.current}
    if d.site is not None:
        current = {**(current or {}), "site": d.site}
    return Difference(d.fid, d.detail, _plain(recorded), _plain(current))


def _plain(value: Any) -> Any:
    return None if value is None else json.loads(json.dumps(value, default=repr))


async def _fold_check(rt: Runtime, registry: Registry, record: ExecutionRecord, journal: list[Entry]) -> Difference | None:
    """A decider's execution is not replayed: its journal's events, folded with the new code's
    ``evolve``, must give the state stored beside it (an archived one has none left: the fold
    must only run). One adopted from a workflow (``engine.adopt``) folds from the state its
    ``execution.migrated`` entry holds, the events after it."""
    try:
        decider = registry.decider_of(record.workflow, record.version)
        if decider is None:
            raise ValueError(f"no decider {record.workflow!r} in the new code")
        adopted = [i for i, e in enumerate(journal) if e.kind is EntryKind.EXECUTION_MIGRATED
                   and isinstance(e.value, dict) and e.value.get("decider")]
        if adopted:
            start = journal[adopted[-1]]
            folded = plain(decider.fold(events_of(journal[adopted[-1] + 1:]), start.value["state"], start=False))
        else:
            folded = plain(decider.fold(events_of(journal)))
    except Exception as exc:
        return Difference("decider", f"the new code cannot fold its journal: {type(exc).__name__}: {exc}", None, None)
    stored = await rt.store.read_state(record.eid)
    if stored is not None and stored[1] != folded:
        return Difference("decider", f"folding its journal gives another state than the one stored"
                                     f" (version {stored[0]})", _plain({"state": stored[1]}), _plain({"state": folded}))
    return None


async def verify(rt: Runtime, archive: Archive, projection: Projection, registry: Registry, *,
                 workflow: str | None = None, limit: int = 20) -> Verification:
    checked = []
    for eid in await _candidates(rt, projection, workflow, limit):
        try:
            record: ExecutionRecord = await read_record(rt, archive, eid, None)
            journal = await read_journal(rt, archive, eid, None)
        except UnknownExecutionError:
            continue  # folded and gone meanwhile, or never announced
        status = record.status.value
        if record.workflow in registry.decider_names() or await rt.store.read_state(eid) is not None:
            checked.append(Checked(eid, record.workflow, record.version, status,
                                   await _fold_check(rt, registry, record, journal)))
            continue
        try:
            wf = registry.get(record.workflow, record.version)
        except Exception as exc:  # the new code has no such workflow or version
            checked.append(Checked(eid, record.workflow, record.version, status,
                                   Difference("root", f"the new code cannot run it: {exc}", None, None)))
            continue
        found = await dry_replay(rt, wf, record, journal)
        checked.append(Checked(eid, record.workflow, record.version, status,
                               None if found is None else _difference(found, journal)))
    return Verification(checked)
