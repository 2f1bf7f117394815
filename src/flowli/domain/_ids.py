"""Identifiers: eids and task ids."""

from __future__ import annotations

import re
import uuid
from typing import Any

import uuid6  # UUIDv7 (RFC 9562) before Python 3.14 has it in the standard library

from ._errors import UnknownExecutionError
from ._status import TaskKind

# The namespace of child eids: a child's eid is a UUIDv5 of its parent frame.
CHILD_NAMESPACE = uuid.UUID("6f1f3c1e-5b0a-4c4e-9d4e-0f10f1c0de01")


def new_eid() -> str:
    """A UUIDv7: eids sort by creation time."""
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
    return str(uuid.uuid5(CHILD_NAMESPACE, f"{parent_eid}/{fid}"))


def keyed_eid(workflow: str, key: str) -> str:
    """The eid of a start with an idempotency key."""
    return str(uuid.uuid5(CHILD_NAMESPACE, f"key:{workflow}:{key}"))


def task_id(kind: TaskKind | str, eid: str | None, key: str = "") -> str:
    """A task id is derived from the kind, the execution and a key, so an enqueue is idempotent."""
    return f"{kind}:{eid or '-'}:{key}" if key else f"{kind}:{eid or '-'}"
