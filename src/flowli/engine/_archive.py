"""Archive objects in the bucket: one per execution folded by retention (its record, journal
and scoped channels), and their JSON forms. Reads fall back to it once the live state is gone."""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any

from flowli.domain import Entry, EntryKind, ExecutionRecord, Message, Provenance, Status


def record_json(r: ExecutionRecord) -> dict[str, Any]:
    data = asdict(r)
    data["status"] = r.status.value
    for k in ("created_at", "updated_at", "lease_expires_at"):
        data[k] = data[k].isoformat() if data[k] is not None else None
    return data


def record_from(data: dict[str, Any]) -> ExecutionRecord:
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
    """Archive objects in the bucket: ``{bucket}/archive/{eid}.json``. An eid that would name a
    file elsewhere (a separator, ``..``, a NUL, a hidden name) has no archive: ``read`` finds
    nothing and ``write`` refuses it, whatever the caller checked before (an eid is 36 characters:
    one past 200 is refused too, before the file system says its name is too long)."""

    def __init__(self, root: Path):
        self.root = root / "archive"

    def path(self, eid: str) -> Path:
        """The archive object of ``eid``; ValueError for an eid that names no file of the folder."""
        one_name = 0 < len(eid) <= 200 and not eid.startswith(".") and not any(c in eid for c in ("\0", "/", "\\", os.sep))
        path = self.root / f"{eid}.json"
        if not one_name or path.parent != self.root:
            raise ValueError(f"no archive object can be named by eid {eid!r}")
        return path

    def write(self, eid: str, obj: dict[str, Any]) -> None:
        target = self.path(eid)
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".{eid}.{uuid.uuid4().hex}.json.tmp"  # two archivers of one run never share it
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
        fd = os.open(self.root, os.O_RDONLY)
        try:
            os.fsync(fd)  # the rename itself survives a power cut
        finally:
            os.close(fd)

    def holds(self, eid: str) -> bool:
        """Whether the folder has an archive object of ``eid`` (one stat, cheap enough for the event
        loop: most lookups of an eid the store lacks are of one that never existed, such as a
        create's check of its idempotency key, and need no thread)."""
        try:
            return self.path(eid).exists()
        except ValueError:
            return False

    def read(self, eid: str) -> dict[str, Any] | None:
        """The archive object of ``eid``, or None (none, or an eid that names no file of the folder)."""
        try:
            path = self.path(eid)
        except ValueError:
            return None
        try:
            with open(path, encoding="utf-8") as f:
                return json.load(f)  # type: ignore[no-any-return]
        except FileNotFoundError:
            return None
