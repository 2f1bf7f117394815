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
from flowli.pipelines import sentence

from ._body import BodyRefused

log = logging.getLogger("flowli.http")


def error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


def validation_sentence(exc: RequestValidationError, body: Any = None) -> str:
    """The sentence of a body (or a query) its model refused, naming the field (a stage by its
    name), in the words of the pipeline operations' own refusals (``flowli.pipelines.sentence``)."""
    return sentence(exc.errors(), body)


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
    Refusal.LIMITED: 429,
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
