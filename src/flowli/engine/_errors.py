"""Errors as journal data, and back: an execution's error is stored as its type's name, module
and message, and ``engine.result`` raises it again.

Rebuilding imports nothing that stored data names: only the types of an allowlist come back as
themselves (flowli's own errors, the built-in exceptions, and the types a registry declares with
``registry.error``); any other type becomes :class:`ExecutionFailed` with the stored type name
and message. Stored data that names ``os.system`` or any module is never imported.
"""

from __future__ import annotations

import builtins
from typing import Any

from flowli import domain
from flowli.domain import ExecutionFailed, NotJSONCompatibleError, StepFailed, check_json

from ._registry import Registry


def error_data(exc: BaseException) -> dict[str, Any]:
    """The journal's form of an error: its type, module and message; an exception with a string
    ``code`` attribute (and a JSON ``details`` dict) records them too."""
    data: dict[str, Any] = {"type": type(exc).__name__, "module": type(exc).__module__, "message": str(exc)}
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
