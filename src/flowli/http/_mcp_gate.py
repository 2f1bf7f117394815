"""``/mcp`` over HTTP behind the service's credential: the HTTP service's front of the MCP
server's streamable HTTP app (the server itself is ``flowli.mcp``'s, and serves stdio too). Every request needs an application's API
key (``Authorization: Bearer <key>`` or ``X-API-Key``) before the SDK sees it: without one, or with
an unknown or disabled one, it is answered 401 with ``WWW-Authenticate: Bearer`` and no session
exists. A session is bound to the key that opened it (the SDK refuses it to another key), and a
key holds at most MCP_SESSIONS_PER_KEY open sessions in a process: one more is refused with 429
until one of its sessions ends (the client closes it, or it is idle for MCP_SESSION_IDLE_SECONDS).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from flowli.access import Applications, ServiceError, key_of
from flowli.domain import Refusal

from ._errors import STATUS

MCP_SESSIONS_PER_KEY = 16
"""The open MCP sessions one API key may hold in one ``flowli serve`` process."""
MCP_SESSION_IDLE_SECONDS = 600.0
"""A session with no request in flight (no call, no open stream) for this long is closed."""
SESSION_HEADER = "mcp-session-id"
INVALID_REQUEST = -32600
NO_SDK_CHECK = TransportSecuritySettings(enable_dns_rebinding_protection=False)
"""The SDK's own check of the Host and Origin, off: the service checks them for every route
(``HostGuard``), ``/mcp`` included."""


@dataclass
class _Held:
    """The sessions a key holds: each with its requests in flight and when its last one ended."""

    opening: int = 0
    sessions: dict[str, list[float]] = field(default_factory=dict)
    """session id -> [requests in flight, monotonic time the last one ended]."""

    def prune(self, now: float) -> None:
        for sid, (in_flight, last) in list(self.sessions.items()):
            if in_flight == 0 and now - last > MCP_SESSION_IDLE_SECONDS:
                del self.sessions[sid]  # the SDK closed it as idle

    def count(self) -> int:
        return self.opening + len(self.sessions)


def refusal(status: int, message: str, headers: dict[str, str] | None = None) -> Any:
    """A JSON-RPC error (no request id) with an HTTP status: what the SDK's client reports."""
    from starlette.responses import Response

    body = {"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": message}}
    return Response(json.dumps(body), status_code=status, media_type="application/json", headers=headers)


async def _read(receive: Receive) -> tuple[bytes, Receive]:
    """The request's body (a JSON-RPC message: small, and bounded by the service's body limit),
    and a ``receive`` that hands it on as it came."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), _replay(b"".join(chunks), receive, message)
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks), _replay(b"".join(chunks), receive, None)


def _replay(body: bytes, receive: Receive, after: Message | None) -> Receive:
    sent = False

    async def again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return after if after is not None else await receive()

    return again


def _initializes(body: bytes) -> bool:
    """Whether a body is (or, as a batch, holds) a JSON-RPC ``initialize``; a body that is not
    JSON counts as one (the SDK refuses it, and the place it held is given back)."""
    try:
        message = json.loads(body)
    except ValueError:
        return True
    messages = message if isinstance(message, list) else [message]
    return any(not isinstance(m, dict) or m.get("method") == "initialize" for m in messages)


class McpGate:
    """The ASGI app in front of the SDK's streamable HTTP app (see the module)."""

    def __init__(self, app: ASGIApp, apps: Applications):
        self.app = app
        self.apps = apps
        self.held: dict[int, _Held] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        try:
            access = await self.apps.authenticate(key_of(headers))
        except ServiceError as exc:
            challenge = 'Bearer realm="flowli"' if key_of(headers) is None else \
                'Bearer realm="flowli", error="invalid_token", error_description="unknown or disabled API key"'
            await refusal(STATUS[Refusal.UNAUTHORIZED], exc.message, {"WWW-Authenticate": challenge})(
                scope, receive, send)
            return
        key = access.key_id if access.key_id is not None else -1
        # the SDK binds each session to this identity: another key's request for it answers 404
        token = AccessToken(token="", client_id=f"apikey:{key}", scopes=[])
        scope = {**scope, "user": AuthenticatedUser(token)}
        held = self.held.setdefault(key, _Held())
        sid = headers.get(SESSION_HEADER)
        if sid is not None:
            await self._use(held, sid, scope, receive, send)
            return
        body, receive = await _read(receive)
        if _initializes(body):  # only an initialize opens a session: it alone takes a place
            await self._open(held, access.actor, scope, receive, send)
        else:  # a request that names no session (the SDK refuses it, or answers it without one)
            await self.app(scope, receive, send)

    async def _open(self, held: _Held, name: str, scope: Scope, receive: Receive, send: Send) -> None:
        held.prune(time.monotonic())
        if held.count() >= MCP_SESSIONS_PER_KEY:
            await refusal(STATUS[Refusal.LIMITED], f"the API key {name!r} holds {MCP_SESSIONS_PER_KEY} open MCP"
                          " sessions already, the most a key may: close one (an HTTP DELETE of /mcp with its"
                          f" mcp-session-id) or wait until one is idle for {MCP_SESSION_IDLE_SECONDS:g} s")(
                scope, receive, send)
            return
        held.opening += 1  # a place held while the request may open a session, given up once it has
        opened: list[str] = []

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] < 400:
                sid = Headers(raw=message.get("headers") or []).get(SESSION_HEADER)
                if sid and not opened:
                    opened.append(sid)
                    held.sessions[sid] = [1, time.monotonic()]
                    held.opening -= 1
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            if not opened:
                held.opening -= 1
            for sid in opened:
                if sid in held.sessions:
                    held.sessions[sid][0] -= 1
                    held.sessions[sid][1] = time.monotonic()

    async def _use(self, held: _Held, sid: str, scope: Scope, receive: Receive, send: Send) -> None:
        state = held.sessions.get(sid)
        if state is not None:
            state[0] += 1
        ended = False

        async def watch(message: Message) -> None:
            nonlocal ended
            if message["type"] == "http.response.start":
                status = message["status"]
                ended = status == 404 or scope.get("method") == "DELETE" and status < 400
                if ended:  # its place is free before the client hears so (the SDK may clean up after)
                    held.sessions.pop(sid, None)
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            if state is not None:
                state[0] -= 1
                state[1] = time.monotonic()
