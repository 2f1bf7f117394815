"""Identifiers: eids and task ids."""

from __future__ import annotations

import hashlib
import re
import uuid
from typing import Any

from ._errors import UnknownExecutionError
from ._status import TaskKind

# The namespace of child eids: a child's eid is a UUIDv5 of its parent frame.
CHILD_NAMESPACE = uuid.UUID("6f1f3c1e-5b0a-4c4e-9d4e-0f10f1c0de01")


def new_eid() -> str:
    """A UUIDv7: eids sort by creation time."""
    # uuid6: UUIDv7 (RFC 9562) before Python 3.14 has it in the standard library. Imported at the
    # first eid, not at the top: its import reads the installed packages' metadata (25-30 ms),
    # which a CLI call that starts nothing should not pay.
    import uuid6

    return str(uuid6.uuid7())


_EID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def is_eid(value: Any) -> bool:
    """Whether ``value`` has an eid's form: a UUID in its canonical text (lowercase, hyphenated),
    as every eid flowli makes (``new_eid``, ``child_eid``, ``keyed_eid``)."""
    return isinstance(value, str) and _EID.fullmatch(value) is not None


def checked_eid(value: Any) -> str:
    """``value``, an eid from outside (a route, a tool's argument, a form, the command line),
    checked before it reaches a store or the archive: one without an eid's form is the id of no
    execution, so ``UnknownExecutionError`` (a 404 over HTTP, a tool error over MCP)."""
    if is_eid(value):
        return str(value)
    shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:80] + "…"
    raise UnknownExecutionError(f"{shown} (an execution id is a UUID)")


def child_eid(parent_eid: str, fid: str) -> str:
    """The eid of the child started by frame ``fid`` of ``parent_eid``: deterministic, so a
    child start is idempotent."""
    return name_eid(f"{parent_eid}/{fid}")


def keyed_eid(workflow: str, key: str) -> str:
    """The eid of a start with an idempotency key."""
    return name_eid(f"key:{workflow}:{key}")


_NAMESPACE = CHILD_NAMESPACE.bytes


def name_eid(name: str) -> str:
    """``str(uuid.uuid5(CHILD_NAMESPACE, name))``, the standard library's steps without its UUID
    object (1.8 against 5.8 us: every child, keyed start and pipeline create makes one)."""
    h = bytearray(hashlib.sha1(_NAMESPACE + name.encode()).digest()[:16])
    h[6] = (h[6] & 0x0F) | 0x50  # version 5
    h[8] = (h[8] & 0x3F) | 0x80  # the RFC 4122 variant
    x = h.hex()
    return f"{x[:8]}-{x[8:12]}-{x[12:16]}-{x[16:20]}-{x[20:]}"


def task_id(kind: TaskKind | str, eid: str | None, key: str = "") -> str:
    """A task id is derived from the kind, the execution and a key, so an enqueue is idempotent."""
    return f"{kind}:{eid or '-'}:{key}" if key else f"{kind}:{eid or '-'}"
