"""The service's refusals: one table from an exception to its answer, ``{"error": "<one sentence>"}``
with the contract's status. The FastAPI app registers it as its exception handlers, and the lean
routes (``_lean``) look an exception up in the same table, so a refusal reads the same whichever
path served the request."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from flowli.domain import DatabaseUnavailable, FlowliError, Refusal

from ._body import BodyRefused

log = logging.getLogger("flowli.http")


def error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


def validation_sentence(exc: RequestValidationError, body: Any = None) -> str:
    """The sentence of a body its model refused, naming the field (a stage by its name)."""
    first = exc.errors()[0] if exc.errors() else {}
    kind = first.get("type", "")
    if kind in ("json_invalid", "json_type"):
        return "the body is not valid JSON" + (f": {first.get('ctx', {}).get('error')}" if first.get("ctx") else "")
    loc = [x for x in first.get("loc", ()) if x != "body"]
    if len(loc) >= 2 and loc[0] in ("stages", "appendStages") and isinstance(loc[1], int):
        # name the stage, as the service does: stage 'validate': options.maxRetries ...
        stages = body.get(loc[0]) if isinstance(body, dict) else None
        name = stages[loc[1]].get("stageName") if isinstance(stages, list) and len(stages) > loc[1] and \
            isinstance(stages[loc[1]], dict) else None
        label = f"stage {name!r}" if isinstance(name, str) and name else f"{loc[0]}[{loc[1]}]"
        rest = ".".join(str(x) for x in loc[2:])
        where = f"{label}: {rest}" if rest else label
    else:
        where = ".".join(str(x) for x in loc) if loc else "the body"
    msg = first.get("msg", "is not valid")
    if kind == "missing":
        return f"{where} is required"
    if kind == "extra_forbidden":
        return f"{where} is not a known field"
    return f"{where}: {msg}"


def _crashed(exc: Exception) -> JSONResponse:
    log.exception("internal error", exc_info=exc)
    return error(500, "internal error (the service logged it)")


STATUS: dict[Refusal, int] = {
    Refusal.INVALID: 400,
    Refusal.UNAUTHORIZED: 401,
    Refusal.FORBIDDEN: 403,
    Refusal.NOT_FOUND: 404,
    Refusal.CONFLICT: 409,
    Refusal.STALE: 409,
    Refusal.UNAVAILABLE: 503,
}
"""The HTTP status of each kind of refusal (``flowli.domain.Refusal``): the one place the service
turns a refusal into a status (the dashboard's pages use it too)."""


def refused(exc: FlowliError) -> JSONResponse:
    """A refusal of flowli's as the service answers it: its kind's status, its message and its fields."""
    return error(STATUS[exc.refusal], str(exc), **exc.refusal_fields())


REFUSALS: dict[type[Exception], Callable[[Any], JSONResponse]] = {
    RequestValidationError: lambda exc: error(400, validation_sentence(exc, exc.body)),
    BodyRefused: lambda exc: error(exc.status, exc.message),
    DatabaseUnavailable: lambda exc: error(503, "the store is unavailable: not confirmed, send the request again"),
    StarletteHTTPException: lambda exc: error(exc.status_code, str(exc.detail)),
    FlowliError: refused,
    Exception: _crashed,
}
"""The answer to each kind of exception; an exception takes the entry of its nearest class (the
order of its MRO, as Starlette looks its handlers up)."""


def refusal(exc: Exception) -> JSONResponse:
    """The answer to ``exc``: the entry of ``REFUSALS`` for the nearest of its classes."""
    for kind in type(exc).__mro__:
        answer = REFUSALS.get(kind)
        if answer is not None:
            return answer(exc)
    return _crashed(exc)  # a BaseException that is not an Exception never reaches here


def register(app: Any) -> None:
    """``REFUSALS`` as the exception handlers of the FastAPI ``app``."""
    for kind, answer in REFUSALS.items():

        async def handler(_: Any, exc: Exception, answer: Callable[[Any], JSONResponse] = answer) -> JSONResponse:
            return answer(exc)

        app.add_exception_handler(kind, handler)
