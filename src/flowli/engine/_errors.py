"""Errors as journal data, and back: an execution's error is stored as its type's name, module
and message, and ``engine.result`` raises it again.

Rebuilding imports nothing that stored data names: only the types of an allowlist come back as
themselves (flowli's own errors, the built-in exceptions, and the types a registry declares with
``registry.error``); any other type becomes :class:`ExecutionFailed` with the stored type name
and message. Stored data that names ``os.system`` or any module is never imported.
"""

from __future__ import annotations

import builtins
import os
import traceback
from pathlib import Path
from typing import Any

from flowli import domain
from flowli.domain import ExecutionFailed, NotJSONCompatibleError, StepFailed, check_json

from ._registry import Registry

TRACEBACK_CHARS = 4000
"""The most of a traceback an error keeps: its end, where the error was raised."""
_ENGINE = str(Path(__file__).resolve().parent) + os.sep


def error_data(exc: BaseException) -> dict[str, Any]:
    """The journal's form of an error: its type, module and message; an exception with a string
    ``code`` attribute (and a JSON ``details`` dict) records them too, and one that was raised its
    traceback (the last TRACEBACK_CHARS of it), which an operator reads on the run's page. A
    replay rebuilds the error from its type and message alone."""
    data: dict[str, Any] = {"type": type(exc).__name__, "module": type(exc).__module__, "message": str(exc)}
    if exc.__traceback__ is not None:
        data["traceback"] = traceback_of(exc)
    code = getattr(exc, "code", None)
    if isinstance(code, str) and code:
        data["code"] = code
        details = getattr(exc, "details", None)
        if isinstance(details, dict):
            try:
                data["details"] = check_json(details, f"the details of {type(exc).__name__}")
            except NotJSONCompatibleError:
                data["details"] = {"unrecorded": "the details were not JSON"}
    return data


def traceback_of(exc: BaseException) -> str:
    """The traceback of ``exc`` as Python prints it, less the engine's own frames before the
    first of the application's code (the frames that called the step), cut to its last
    TRACEBACK_CHARS."""
    shown = traceback.TracebackException.from_exception(exc)
    stack = list(shown.stack)
    while len(stack) > 1 and stack[0].filename.startswith(_ENGINE):
        stack.pop(0)
    shown.stack = traceback.StackSummary.from_list(stack)
    text = "".join(shown.format()).rstrip()
    return text if len(text) <= TRACEBACK_CHARS else "…" + text[-TRACEBACK_CHARS:]


def error_summary(error: dict[str, Any] | None) -> dict[str, Any] | None:
    """An error as an API shows it: what the journal holds, less the traceback (which the run's
    page and ``flowli show`` read from the journal itself)."""
    if error is None or "traceback" not in error:
        return error
    return {k: v for k, v in error.items() if k != "traceback"}


def _flowli_errors() -> dict[tuple[str, str], type[BaseException]]:
    found: dict[tuple[str, str], type[BaseException]] = {}
    for value in vars(domain).values():
        if isinstance(value, type) and issubclass(value, Exception):
            found[(value.__module__, value.__name__)] = value
    return found


_FLOWLI = _flowli_errors()


def allowed_error(module: str, name: str, registry: Registry | None) -> type[Exception] | None:
    """The exception type that stored error data names, if it is on the allowlist."""
    if module == "builtins":
        cls = getattr(builtins, name, None)
    else:
        cls = _FLOWLI.get((module, name))
        if cls is None and registry is not None:
            cls = registry.declared_error(module, name)
    if isinstance(cls, type) and issubclass(cls, Exception):
        return cls
    return None


def rebuild_error(eid: str, error: dict[str, Any], registry: Registry | None = None) -> Exception:
    """The workflow's error, rebuilt from its data when its type is on the allowlist; else
    ExecutionFailed with the stored type name and message."""
    etype, module, message = str(error.get("type", "Error")), str(error.get("module", "")), str(error.get("message", ""))
    if etype == "StepFailed" and "fid" in error:
        return StepFailed(error["fid"], error.get("cause", "Error"), error.get("cause_message", ""), error.get("attempts", 0),
                          error.get("code"), error.get("details"))
    cls = allowed_error(module, etype, registry)
    if cls is None:
        return ExecutionFailed(eid, etype, message)
    try:
        if cls.__module__.startswith("flowli.domain"):
            raise TypeError  # flowli's own errors format their message from other arguments
        return cls(message)
    except Exception:  # a constructor with other arguments: keep the type and the message
        exc = cls.__new__(cls)
        Exception.__init__(exc, message)
        return exc
