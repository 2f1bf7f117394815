"""The hot routes — a worker's pull, lease, renewal, result, ack and heartbeat, the creates of a
pipeline, and the reads of one pipeline and of a page of them — answered without FastAPI's
machinery around them.

Why: a one-stage pipeline goes through five of these calls, and a profile of ``flowli serve``
showed most of the event loop's CPU per call in the framework (its middleware layers, its router,
the dependency solver, the response encoder), not in the handlers. A lean route does what its
FastAPI route does, through the same functions, and nothing more:

- the credential first (``key_of`` and ``Applications.authenticate``, or the worker session of
  ``session_token`` through ``Workers.session``): 401 before the body is read;
- a list's query taken as FastAPI takes it when it is plain (each of ``pageNumber``, ``pageSize``,
  ``search`` and ``name`` at most once, the numbers in digits); any other query is left to the
  FastAPI route, whose refusal names what was wrong (``plain_query``);
- the body read by ``parse_json`` (the depth limit, finite numbers: 400 naming why) and checked
  against the route's model (``checked``: 400 naming the field);
- the service's call, and its answer encoded as Starlette's ``JSONResponse`` encodes it (values
  that are not JSON go through FastAPI's ``jsonable_encoder``, as a route's return value does);
- a refusal answered from ``_errors.REFUSALS``, the table of the FastAPI app's handlers.

The Host and Origin checks and the body limit are the layers in front of both (``guarded``). The
FastAPI routes stay declared for the OpenAPI document and the docs, and answer any request the
dispatcher (``_app.Routes``) does not hand here; ``LEAN_ROUTES`` names the ones it does."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import parse_qsl

import orjson
from fastapi.encoders import jsonable_encoder
from pydantic import BaseModel
from starlette.types import Receive, Scope, Send

from flowli.access import Applications, key_of
from flowli.pipelines import Pipelines, Session, Workers

from . import _batch as batch
from . import _models as m
from ._body import checked, declared_json, parse_json
from ._errors import refusal
from ._hosts import headers_of

M = TypeVar("M", bound=BaseModel)
Answer = tuple[int, Any]
"""A lean route's answer: its status and its JSON content (None with 204: no body)."""

LEAN_ROUTES: tuple[tuple[str, str], ...] = (
    ("POST", "/pipelines"),
    ("POST", "/pipelines/idempotent"),
    ("POST", "/jobs/pull"),
    ("POST", "/stages/{stage_id}/lease/acquire"),
    ("POST", "/stages/{stage_id}/lease/renew"),
    ("POST", "/stages/{stage_id}/result"),
    ("POST", "/jobs/ack"),
    ("POST", "/workers/heartbeat"),
    ("POST", "/jobs/pull-batch"),
    ("POST", "/stages/results"),
    ("POST", "/pipelines/idempotent/batch"),
    ("GET", "/pipelines"),
    ("GET", "/pipelines/{pipeline_id}"),
)
"""The (method, path) of each route a lean handler answers, as the FastAPI app declares it."""


def session_token(headers: Mapping[str, str]) -> str | None:
    """The worker session a request carries: ``X-Worker-Session``, else ``Authorization: Bearer``
    (``headers`` by lower-case name)."""
    token = headers.get("x-worker-session")
    auth = headers.get("authorization", "")
    if not token and auth.lower().startswith("bearer "):
        token = auth[7:].strip()
    return token


async def gone(receive: Receive) -> None:
    """Return once the client has gone (its connection closed): after the body, the server's
    next message is the disconnect."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        if not message.get("body") and not message.get("more_body"):
            await asyncio.Event().wait()  # a server that answers at once here cannot tell: no watch


Query = dict[str, list[str]]
"""A query string by name, each name with its values in order."""


class Call:
    """A request as a lean route reads it: its headers (lower-case names, the first of a repeated
    one, as Starlette's ``Headers.get``), the ``{stage_id}`` of its path, its body."""

    __slots__ = ("headers", "receive", "stage_id", "query")

    def __init__(self, scope: Scope, receive: Receive, stage_id: str = "", query: Query | None = None):
        self.headers = headers_of(scope)
        self.receive, self.stage_id = receive, stage_id
        """The ``{stage_id}`` (or ``{pipeline_id}``) of the path."""
        self.query: Query = query or {}
        """A list's query (``plain_query``)."""

    async def json(self, model: type[M]) -> M:
        """The body (declared JSON, parsed by ``parse_json``) as a ``model`` (``checked``)."""
        declared_json(self.headers.get("content-type"))
        chunks = []
        while True:
            message = await self.receive()
            if message["type"] != "http.request":
                break  # gone before the whole body: what came is refused as a body like any other
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        return checked(model, parse_json(b"".join(chunks)))


_ONCE = ("pageNumber", "pageSize", "search", "name")
_DIGITS = re.compile(r"[0-9]{1,9}")


def plain_query(raw: bytes) -> Query | None:
    """The query of ``GET /pipelines``; None when FastAPI's route is to read it instead (a value
    it would refuse or pick among)."""
    query: Query = {}
    try:
        for name, value in parse_qsl(raw.decode("latin-1"), keep_blank_values=True, strict_parsing=False):
            query.setdefault(name, []).append(value)
    except ValueError:
        return None
    for name in _ONCE:
        values = query.get(name, [])
        if len(values) > 1 or (values and name.startswith("page") and not _DIGITS.fullmatch(values[0])):
            return None
    return query


Handler = Callable[[Call], Awaitable[Answer]]
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=jsonable_encoder)
"""What Starlette's ``JSONResponse`` renders with (``json.dumps`` would build it per call)."""
_PASS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def encode(content: Any) -> bytes:
    """``content`` as Starlette's ``JSONResponse`` renders it, byte for byte: by orjson where the
    two write the same (JSON's own types; a datetime or a dataclass goes to ``jsonable_encoder``
    as there), else by the standard library (an int past 64 bits). No answer holds a float that
    is not finite (a body that has one is refused, the store cannot keep one)."""
    try:
        return orjson.dumps(content, default=jsonable_encoder, option=_PASS)
    except TypeError:
        return _ENCODER.encode(content).encode()


class Lean:
    """The lean routes of one service (its ``Pipelines``, ``Workers`` and ``Applications``)."""

    def __init__(self, pipelines: Pipelines, workers: Workers, apps: Applications):
        self.pipelines, self.workers, self.apps = pipelines, workers, apps
        handlers: dict[str, Handler] = {
            "/pipelines": self.create_legacy, "/pipelines/idempotent": self.create_idempotent,
            "/jobs/pull": self.pull, "/stages/{stage_id}/lease/acquire": self.acquire,
            "/stages/{stage_id}/lease/renew": self.renew, "/stages/{stage_id}/result": self.result,
            "/jobs/ack": self.ack, "/workers/heartbeat": self.heartbeat, "/jobs/pull-batch": self.pull_batch,
            "/stages/results": self.results, "/pipelines/idempotent/batch": self.creates}
        self.exact: dict[str, Handler] = {}
        self.staged: dict[str, Handler] = {}
        """By what follows ``/stages/{stage_id}/``."""
        for method, path in LEAN_ROUTES:
            if method == "GET":
                continue  # the two reads: ``route`` names them
            if path.startswith("/stages/{stage_id}/"):
                self.staged[path.removeprefix("/stages/{stage_id}/")] = handlers[path]
            else:
                self.exact[path] = handlers[path]

    def route(self, scope: Scope) -> tuple[Handler, str, Query | None] | None:
        """The handler of an HTTP request, its ``{stage_id}`` (or ``{pipeline_id}``) and a list's
        query; None for a request it does not answer (another method or path, a ``root_path``, a
        query it leaves to FastAPI: FastAPI's to route)."""
        if scope.get("root_path"):
            return None
        path = scope["path"]
        if scope["method"] == "GET":
            return self._read(scope, path)
        if scope["method"] != "POST":
            return None
        handler = self.exact.get(path)
        if handler is not None:
            return handler, "", None
        if path.startswith("/stages/"):
            stage_id, _, rest = path[8:].partition("/")
            handler = self.staged.get(rest)
            if handler is not None and stage_id:
                return handler, stage_id, None
        return None

    def _read(self, scope: Scope, path: str) -> tuple[Handler, str, Query | None] | None:
        if path == "/pipelines":
            query = plain_query(scope.get("query_string", b""))
            return None if query is None else (self.list, "", query)
        if path.startswith("/pipelines/"):
            pipeline_id = path[11:]
            if pipeline_id and "/" not in pipeline_id:
                return self.get, pipeline_id, None
        return None

    async def answer(self, handler: Handler, stage_id: str, query: Query | None, scope: Scope, receive: Receive,
                     send: Send) -> None:
        """Answer the request with ``handler`` (what ``route`` gave): its answer, or the refusal
        of what it raised."""
        try:
            status, content = await handler(Call(scope, receive, stage_id, query))
            body = b"" if content is None and status == 204 else encode(content)
        except Exception as exc:
            await refusal(exc)(scope, receive, send)
            return
        headers = [] if status == 204 else [(b"content-length", str(len(body)).encode()),
                                            (b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    # ---- the routes: each as its FastAPI route in ``_app`` -------------------------------------

    async def session(self, call: Call) -> Session:
        return await self.workers.session(session_token(call.headers))

    async def create_legacy(self, call: Call) -> Answer:
        who = await self.apps.authenticate(key_of(call.headers))
        view, _ = await self.pipelines.create(who, await call.json(m.PipelineIn), idempotent=False,
                                              traceparent=call.headers.get("traceparent"))
        return 200, view

    async def create_idempotent(self, call: Call) -> Answer:
        who = await self.apps.authenticate(key_of(call.headers))
        view, created = await self.pipelines.create(who, await call.json(m.IdempotentPipelineIn), idempotent=True,
                                                    traceparent=call.headers.get("traceparent"))
        return 201 if created else 200, {"pipeline": view, "created": created, "wasExisting": not created}

    async def list(self, call: Call) -> Answer:
        who = await self.apps.authenticate(key_of(call.headers))
        q = call.query

        def one(name: str) -> str | None:
            return q[name][0] if name in q else None

        return 200, await self.pipelines.list(who, page=int(one("pageNumber") or 1), size=int(one("pageSize") or 20),
                                              search=one("search"), name=one("name"), statuses=q.get("statuses", []),
                                              keywords=q.get("keywords", []))

    async def get(self, call: Call) -> Answer:
        who = await self.apps.authenticate(key_of(call.headers))
        return 200, await self.pipelines.get(who, call.stage_id)

    async def pull_batch(self, call: Call) -> Answer:
        s = await self.session(call)
        return await batch.pull(self.workers, s, await call.json(m.PullBatchIn), gone=lambda: gone(call.receive))

    async def results(self, call: Call) -> Answer:
        s = await self.session(call)
        return await batch.results(self.workers, s, await call.json(m.ResultsIn))

    async def creates(self, call: Call) -> Answer:
        who = await self.apps.authenticate(key_of(call.headers))
        return await batch.creates(self.pipelines, who, await call.json(m.CreatesIn), call.headers.get("traceparent"))

    async def pull(self, call: Call) -> Answer:
        s = await self.session(call)
        job = await self.workers.pull(s, await call.json(m.PullIn), gone=lambda: gone(call.receive))
        return (204, None) if job is None else (200, job)

    async def acquire(self, call: Call) -> Answer:
        s = await self.session(call)
        return 200, await self.workers.acquire(s, call.stage_id, await call.json(m.LeaseIn))

    async def renew(self, call: Call) -> Answer:
        s = await self.session(call)
        return 200, await self.workers.acquire(s, call.stage_id, await call.json(m.LeaseIn), renew=True)

    async def result(self, call: Call) -> Answer:
        s = await self.session(call)
        return await self.workers.result(s, call.stage_id, await call.json(m.ResultIn))

    async def ack(self, call: Call) -> Answer:
        s = await self.session(call)
        return 200, await self.workers.ack(s, await call.json(m.AckIn))

    async def heartbeat(self, call: Call) -> Answer:
        s = await self.session(call)
        return 200, await self.workers.heartbeat(s, await call.json(m.HeartbeatIn))
