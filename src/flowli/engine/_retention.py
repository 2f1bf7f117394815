"""Retention: fold each execution that finished more than ``Options.retention`` ago into one
archive object (its record, journal and scoped channels) in the bucket, then delete its live
state. ``engine.journal`` and ``engine.status`` read the archive when live state is gone.

The archive is written (and synced) before anything is deleted, so a crash between the two
leaves both, and the next pass deletes the live state. Evidence is not in the archive: it stays
in the bucket under its own folder.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from flowli.domain import (
    TERMINAL,
    Entry,
    EntryKind,
    ExecutionRecord,
    Message,
    Provenance,
    Status,
)
from flowli.store import Write

from ._runtime import SWEEPER, Runtime
from ._transitions import Transition, commit

log = logging.getLogger("flowli.retention")
_BATCH = 200


def record_json(r: ExecutionRecord) -> dict[str, Any]:
    data = asdict(r)
    data["status"] = r.status.value
    for k in ("created_at", "updated_at", "lease_expires_at"):
        data[k] = data[k].isoformat() if data[k] is not None else None
    return data


def record_from(data: dict[str, Any]) -> ExecutionRecord:
    from datetime import datetime

    data = dict(data)
    data["status"] = Status(data["status"])
    for k in ("created_at", "updated_at", "lease_expires_at"):
        data[k] = datetime.fromisoformat(data[k]) if data[k] is not None else None
    return ExecutionRecord(**data)


def entry_json(e: Entry) -> dict[str, Any]:
    return {
        "eid": e.eid, "seq": e.seq, "kind": e.kind.value, "fid": e.fid, "attempt": e.attempt, "digest": e.digest,
        "value": e.value, "error": e.error, "provenance": e.provenance.to_json(),
    }


def entry_from(data: dict[str, Any]) -> Entry:
    return Entry(
        eid=data["eid"], seq=data["seq"], kind=EntryKind(data["kind"]), fid=data["fid"], attempt=data["attempt"],
        digest=data["digest"], value=data["value"], error=data["error"],
        provenance=Provenance.from_json(data["provenance"]),
    )


def message_json(m: Message) -> dict[str, Any]:
    return {"channel": m.channel, "seq": m.seq, "payload": m.payload, "provenance": m.provenance.to_json()}


class Archive:
    """Archive objects in the bucket: ``{bucket}/archive/{eid}.json``."""

    def __init__(self, root: Path):
        self.root = root / "archive"

    def path(self, eid: str) -> Path:
        return self.root / f"{eid}.json"

    def write(self, eid: str, obj: dict[str, Any]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".{eid}.json.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path(eid))
        fd = os.open(self.root, os.O_RDONLY)
        try:
            os.fsync(fd)  # the rename itself survives a power cut
        finally:
            os.close(fd)

    def read(self, eid: str) -> dict[str, Any] | None:
        try:
            with open(self.path(eid), encoding="utf-8") as f:
                return json.load(f)  # type: ignore[no-any-return]
        except FileNotFoundError:
            return None


async def fold(rt: Runtime, eid: str, archive: Archive) -> bool:
    """Archive one finished execution and delete its live state; False if it is not finished."""
    record = await rt.store.read_execution(eid)
    if record is None or not record.terminal:
        return False
    journal = await rt.store.read_journal(eid)
    messages = await rt.store.read_scoped_messages(eid)
    channels: dict[str, list[dict[str, Any]]] = {}
    for m in messages:
        channels.setdefault(m.channel, []).append(message_json(m))
    obj = {
        "format": 1,
        "archived_at": rt.clock.now().isoformat(),
        "record": record_json(record),
        "journal": [entry_json(e) for e in journal],
        "channels": channels,
    }
    await asyncio.to_thread(archive.write, eid, obj)
    write = Write(expect=(eid, TERMINAL), delete_executions=[eid])
    await commit(rt, Transition("fold", write, eid, record.workflow, SWEEPER, record.application))
    return True


async def retain(rt: Runtime, archive: Archive) -> int:
    """One pass: fold every execution finished before now minus the retention delay."""
    before = rt.clock.now() - rt.options.retention
    await rt.drain()  # the control-log appends of this process first (an execution with one pending waits)
    folded = 0
    while True:
        eids = await rt.store.finished_before(before, _BATCH)
        if not eids:
            return folded
        for eid in eids:
            try:
                if await fold(rt, eid, archive):
                    folded += 1
            except OSError as exc:  # the bucket is not writable: keep the live state
                log.error("cannot archive %s: %s", eid, exc)
                return folded
