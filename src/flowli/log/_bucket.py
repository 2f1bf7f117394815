"""The bucket: where evidence (attempt logs, attachments) is written. A directory by default.

Layout, one folder per execution and frame, one log per attempt::

    {root}/{eid}/{fid}/attempt-{n}.jsonl          the attempt log, one JSON event a line
    {root}/{eid}/{fid}/attempt-{n}/{name}         attachments of that attempt

(``/`` in a frame id becomes ``~`` in the folder name.) Writes are best effort: a frame never
fails because evidence could not be written.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("flowli.log")
_UNSAFE = re.compile(r"[^A-Za-z0-9._:#@=+,~-]")


def _part(text: str) -> str:
    return _UNSAFE.sub("_", text.replace("/", "~"))


@dataclass(frozen=True)
class Evidence:
    """One event of an attempt log, or one attachment."""

    eid: str
    fid: str
    attempt: int
    event: dict[str, Any] | None = None
    attachment: str | None = None
    """The path of an attachment."""


class Bucket:
    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root)

    def folder(self, eid: str, fid: str) -> Path:
        return self.root / _part(eid) / _part(fid)

    def append(self, eid: str, fid: str, attempt: int, line: str) -> bool:
        """Append one line to the attempt log; False (and nothing raised) when it cannot."""
        try:
            folder = self.folder(eid, fid)
            folder.mkdir(parents=True, exist_ok=True)
            with open(folder / f"attempt-{attempt}.jsonl", "a", encoding="utf-8") as f:
                f.write(line.rstrip("\n") + "\n")
            return True
        except OSError as exc:
            log.debug("evidence of %s %s attempt %s not written: %s", eid, fid, attempt, exc)
            return False

    def attach(self, eid: str, fid: str, attempt: int, name: str, data: bytes | str) -> Path | None:
        try:
            folder = self.folder(eid, fid) / f"attempt-{attempt}"
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / _part(name)
            if isinstance(data, str):
                path.write_text(data, encoding="utf-8")
            else:
                path.write_bytes(data)
            return path
        except OSError as exc:
            log.debug("attachment %s of %s %s not written: %s", name, eid, fid, exc)
            return None

    def read(self, eid: str) -> list[Evidence]:
        """Every event and attachment of an execution, attempt by attempt."""
        out: list[Evidence] = []
        base = self.root / _part(eid)
        if not base.is_dir():
            return out
        for frame_dir in sorted(base.iterdir()):
            fid = frame_dir.name.replace("~", "/")
            for item in sorted(frame_dir.iterdir()):
                m = re.fullmatch(r"attempt-(\d+)(\.jsonl)?", item.name)
                if not m:
                    continue
                attempt = int(m.group(1))
                if m.group(2) and item.is_file():
                    for line in item.read_text(encoding="utf-8").splitlines():
                        try:
                            out.append(Evidence(eid, fid, attempt, event=json.loads(line)))
                        except ValueError:
                            continue
                elif item.is_dir():
                    out.extend(Evidence(eid, fid, attempt, attachment=str(a)) for a in sorted(item.iterdir()))
        return out
