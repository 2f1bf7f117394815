"""Structured attempt logs: ``get_logger(name)`` gives a structlog logger whose events carry the
eid, fid and attempt of the step that runs, and go to the bucket, one log per attempt.

The engine binds the attempt (``attempt_scope``) while a step function runs, in the step's own
context, so a sync step in a thread sees it too. Outside a step (in workflow code, which runs
again on every replay) an event is no evidence: it goes to the standard ``logging`` only, so a
replay writes nothing to the bucket.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._bucket import Bucket


@dataclass(frozen=True)
class Attempt:
    eid: str
    fid: str
    attempt: int
    bucket: Bucket


_current: ContextVar[Attempt | None] = ContextVar("flowli_attempt", default=None)


@contextlib.contextmanager
def attempt_scope(attempt: Attempt) -> Iterator[None]:
    token = _current.set(attempt)
    try:
        yield
    finally:
        _current.reset(token)


def current_attempt() -> Attempt | None:
    return _current.get()


RESERVED = ("eid", "fid", "attempt", "logger", "level", "timestamp")
"""The fields flowli sets on every event; a field of the caller's with one of these names is kept
under ``user.{name}``, so that neither is lost."""


def _keep_users_fields(logger: Any, method: str, event: dict[str, Any]) -> dict[str, Any]:
    for key in RESERVED:
        if key in event:
            event[f"user.{key}"] = event.pop(key)
    return event


def _bind_attempt(logger: Any, method: str, event: dict[str, Any]) -> dict[str, Any]:
    attempt = _current.get()
    if attempt is not None:
        event.setdefault("eid", attempt.eid)
        event.setdefault("fid", attempt.fid)
        event.setdefault("attempt", attempt.attempt)
    return event


class _Sink:
    """The end of the chain: the bucket inside an attempt, the standard logging outside."""

    def __init__(self, name: str):
        self.name = name
        self.std = logging.getLogger(name)

    def _emit(self, level: int, line: str) -> None:
        attempt = _current.get()
        if attempt is not None:
            attempt.bucket.append(attempt.eid, attempt.fid, attempt.attempt, line)
        else:
            self.std.log(level, line)

    def debug(self, line: str) -> None:
        self._emit(logging.DEBUG, line)

    def info(self, line: str) -> None:
        self._emit(logging.INFO, line)

    msg = info

    def warning(self, line: str) -> None:
        self._emit(logging.WARNING, line)

    warn = warning

    def error(self, line: str) -> None:
        self._emit(logging.ERROR, line)

    exception = error

    def critical(self, line: str) -> None:
        self._emit(logging.CRITICAL, line)


def get_logger(name: str) -> Any:
    """A structlog logger for evidence: ``log.info("fetched", invoice=..., rows=3)``. A field named
    as one of flowli's (eid, fid, attempt, logger, level, timestamp) goes in as ``user.{name}``."""
    import structlog  # here, not at the top: importing it costs every process (every CLI call) 60-90 ms

    return structlog.wrap_logger(
        _Sink(name),
        processors=[
            _keep_users_fields,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _bind_attempt,
            structlog.processors.format_exc_info,
            lambda logger, method, event: {**event, "logger": name},
            structlog.processors.JSONRenderer(default=repr),
        ],
        wrapper_class=structlog.BoundLogger,
        cache_logger_on_first_use=False,
    )


def attach(name: str, data: bytes | str) -> Path | None:
    """Write an attachment of the attempt that runs (best effort; None outside a step)."""
    attempt = _current.get()
    if attempt is None:
        return None
    return attempt.bucket.attach(attempt.eid, attempt.fid, attempt.attempt, name, data)


__all__ = ["Attempt", "attach", "attempt_scope", "current_attempt", "get_logger", "json"]
