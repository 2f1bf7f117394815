"""The names the service answers to, and the check every request passes first.

DNS rebinding points a name the attacker owns at 127.0.0.1: a page of theirs then reaches a local
service with ``Host: attacker.example``, and the browser treats it as the attacker's own origin
(cookies, the CSRF token of a page, ``flowli serve --open``'s login-free dashboard). So every
request, on every route (the API, ``/mcp``, ``/metrics``, the dashboard, ``/healthz``), is served
only when its ``Host`` is a name the service was told to answer to: the loopback names, the
address it listens on (unless a wildcard), and the names given with ``--allowed-host``; any other
is refused with 421 Misdirected Request (as the MCP SDK answers). A request that carries an
``Origin`` (or, when it changes state and has no ``Origin``, a ``Referer``) of another site is
refused with 403: a form of the dashboard is accepted from the dashboard's own pages only."""

from __future__ import annotations

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from flowli._hosts import AllowedHosts as AllowedHosts
from flowli._hosts import split_host as split_host

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


def _refusal(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _shown(value: str) -> str:
    return repr(value[:100] + ("…" if len(value) > 100 else ""))


class HostGuard:
    """The service's outermost layer: a request whose ``Host`` is not one of ``hosts`` answers
    421, one whose ``Origin`` (or ``Referer``, see the module's note) is another site's answers
    403, before anything else reads it."""

    def __init__(self, app: ASGIApp, hosts: AllowedHosts):
        self.app, self.hosts = app, hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            refused = self.refusal(scope)
            if refused is not None:
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                else:
                    await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def refusal(self, scope: Scope) -> JSONResponse | None:
        headers = headers_of(scope, _CHECKED)
        host = headers.get("host", "")
        if not self.hosts.allows(host):
            return _refusal(421, f"the Host header {_shown(host)} is not a name this service answers to"
                                 f" ({self.hosts.describe()}): start flowli serve with --allowed-host NAME"
                                 " to add one")
        origin = headers.get("origin")
        scheme = str(scope.get("scheme") or "http")
        if origin is not None:
            if not self.hosts.trusts_origin(origin, host, scheme):
                return _refusal(403, f"the Origin header {_shown(origin)} is not this service's own: a request"
                                     " from another site's page is refused")
        elif scope.get("method", "GET") not in SAFE_METHODS and headers.get("referer"):
            referer = headers["referer"]
            if not self.hosts.trusts_origin(referer, host, scheme):
                return _refusal(403, f"the Referer header {_shown(referer)} is not this service's own: a form"
                                     " from another site's page is refused")
        return None


_CHECKED = frozenset({b"host", b"origin", b"referer"})
"""The headers the check reads: only these are decoded before every request."""


def headers_of(scope: Scope, only: frozenset[bytes] | None = None) -> dict[str, str]:
    """The request's headers by lowercase name (the first of a repeated one); ``only``: those
    names alone, the others not decoded."""
    out: dict[str, str] = {}
    for name, value in scope.get("headers") or []:
        key = name.lower()
        if only is None or key in only:
            out.setdefault(key.decode("latin-1"), value.decode("latin-1"))
    return out
