"""Request bodies: one size limit for every route (``BodyLimit``: a body larger than
``MAX_BODY`` is refused with 413 before any route reads it, whether it came with a
Content-Length or chunked), and one reader of JSON bodies for the routes (``read_json``:
declared JSON by its Content-Type, nested at most ``MAX_JSON_DEPTH`` deep, numbers finite), which a route calls only after it has
authenticated the caller, so a request without a valid credential gets 401 before its body is
parsed."""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from typing import Any, TypeVar

from fastapi import Depends
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_BODY = 1 << 20
"""The largest request body (1 MiB): a larger one is refused with 413."""
MAX_JSON_DEPTH = 64
"""The deepest nesting of arrays and objects a JSON body may have: a deeper one is refused with
400 before it is parsed (a parser would recurse that deep)."""


class BodyRefused(Exception):
    """A body that no route reads: its status (400, 413) and the sentence that says why."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def too_large() -> JSONResponse:
    return JSONResponse({"error": f"the body is larger than {MAX_BODY} bytes"}, status_code=413)


class BodyLimit:
    """Read the whole body before the app runs, refusing one over MAX_BODY with 413 (the app
    never sees it); then hand the app the body, and the connection's own messages after it (a
    disconnect)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > MAX_BODY:
            await too_large()(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client went away before it sent its body: nobody to answer
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_BODY:
                await too_large()(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        whole: Message | None = {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        async def replay() -> Message:
            nonlocal whole
            if whole is not None:
                message, whole = whole, None
                return message
            return await receive()

        await self.app(scope, replay, send)


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_STEP = [0] * 256
for _open in b"[{":
    _STEP[_open] = 1
for _close in b"]}":
    _STEP[_close] = -1
_NOT_BRACKETS = bytes(b for b in range(256) if not _STEP[b])
_FIELD = rb'"([^"\\]*(?:\\.[^"\\]*)*)"\s*:\s*'


def json_depth(raw: bytes) -> int:
    """How deep the arrays and objects of a JSON text nest (brackets inside strings do not
    count), without parsing it."""
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    return max(accumulate(_STEP[b] for b in brackets), default=0)


NOT_JSON = "the body must be JSON, sent with Content-Type: application/json"


def declared_json(content_type: str | bytes | None) -> None:
    """BodyRefused (415) unless the body says it is JSON (``application/json``, with parameters
    such as a charset, or a ``+json`` type): a form or text sent to a JSON route is told so
    rather than read as JSON."""
    if isinstance(content_type, bytes):
        content_type = content_type.decode("latin-1")
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media != "application/json" and not (media.startswith("application/") and media.endswith("+json")):
        raise BodyRefused(415, NOT_JSON)


def parse_json(raw: bytes) -> Any:
    """A JSON body, parsed: BodyRefused (400) for one nested deeper than MAX_JSON_DEPTH, one that
    is not JSON, or one with a number JSON does not have (NaN, Infinity), naming its field."""
    if not raw.strip():
        raise BodyRefused(400, "the body is required (a JSON object)")
    # the count first: a body with fewer brackets than the limit cannot nest deeper, and counting
    # them costs a fraction of json_depth on the small bodies of a worker's calls
    if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH and json_depth(raw) > MAX_JSON_DEPTH:
        raise BodyRefused(400, f"the body is nested deeper than {MAX_JSON_DEPTH} levels of arrays and objects")

    try:
        # json.loads(raw) with the decoder built once (loads builds one per call when given hooks)
        return _DECODER.decode(raw.decode(json.detect_encoding(raw), "surrogatepass"))
    except _NotFinite as exc:
        token = exc.token
        found = re.search(_FIELD + re.escape(token.encode()), raw)  # the field it is the value of, if one
        where = f"{found.group(1).decode(errors='replace')}: " if found else ""
        raise BodyRefused(400, f"{where}{token} is not a number JSON allows (a number must be finite)") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise BodyRefused(400, f"the body is not valid JSON: {getattr(exc, 'msg', exc)}") from None


class _NotFinite(Exception):
    """A number JSON does not have (NaN, Infinity, or one past a float: 1e400), met by the decoder."""

    def __init__(self, token: str):
        super().__init__(token)
        self.token = token


def _refuse(token: str) -> Any:
    raise _NotFinite(token)


def _number(text: str) -> float:
    value = float(text)
    return value if math.isfinite(value) else _refuse(text)


_DECODER = json.JSONDecoder(parse_constant=_refuse, parse_float=_number)


async def read_json(request: Request) -> Any:
    """The request's JSON body (see ``declared_json``, ``parse_json``)."""
    declared_json(request.headers.get("content-type"))
    return parse_json(await request.body())


BODIES: dict[str, type[BaseModel]] = {}
"""The models of the bodies the routes take (read with ``json_body``), for the OpenAPI document."""


def takes(model: type[BaseModel]) -> dict[str, Any]:
    """The ``openapi_extra`` of a route that reads a ``model`` body with ``json_body``."""
    BODIES[model.__name__] = model
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}}}


def json_body(model: type[BaseModel]) -> Any:
    """A route's body, as a dependency declared after the credential's (FastAPI solves them in
    order): read with ``read_json``, checked against ``model`` (a RequestValidationError names
    the field). The route gets the model, and hands it to its service as the operation's input;
    ``raw(request)`` is the JSON as sent, for a service that takes it as it came."""

    async def parsed(request: Request) -> BaseModel:
        data = await read_json(request)
        request.state.json = data
        return checked(model, data)

    return Depends(parsed)


M = TypeVar("M", bound=BaseModel)


def checked(model: type[M], data: Any) -> M:
    """``data`` as a ``model``: a RequestValidationError (400 naming the field) when it is not one."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise RequestValidationError(exc.errors(include_url=False), body=data) from None


def raw(request: Request) -> Any:
    """The JSON body ``json_body`` read for this request."""
    return request.state.json
