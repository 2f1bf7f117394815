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

from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

LOOPBACK = ("localhost", "127.0.0.1", "::1")
"""The names a service answers to whatever it is told: this machine's."""
WILDCARDS = ("", "0.0.0.0", "::")
"""Listening addresses that are every interface, so no name of their own."""
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def split_host(value: str) -> tuple[str, int | None] | None:
    """``name[:port]`` (``[v6]:port`` for IPv6) as a lowercase name without brackets or a final
    dot, and its port (None when not given); None when it is not such a value."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[1:end], value[end + 1:]
    elif value.count(":") > 1:  # a bare IPv6 address (as --allowed-host may give it)
        name, rest = value, ""
    else:
        name, _, port_text = value.partition(":")
        rest = f":{port_text}" if ":" in value else ""
    if rest and not (rest.startswith(":") and rest[1:].isascii() and rest[1:].isdigit() and len(rest) <= 6):
        return None
    name = name.rstrip(".")
    if not name or any(c.isspace() or c in "/\\@?#" for c in name):
        return None
    return name, int(rest[1:]) if rest else None


class AllowedHosts:
    """The names a service answers to: the loopback names, ``bound`` (the address it listens on,
    unless a wildcard) and ``extra`` (``NAME`` for any port, ``NAME:PORT`` for that one)."""

    def __init__(self, bound: str = "127.0.0.1", extra: Iterable[str] = ()):
        self.given: list[tuple[str, int | None]] = []
        for value in extra:
            parsed = split_host(value)
            if parsed is None:
                raise ValueError(f"--allowed-host {value!r} is not a host name (NAME or NAME:PORT)")
            self.given.append(parsed)
        names = list(LOOPBACK)
        bound_name = split_host(bound) if bound not in WILDCARDS else None
        if bound_name is not None and bound_name[0] not in WILDCARDS:
            names.append(bound_name[0])
        self.names = tuple(dict.fromkeys(names))

    def allows(self, host: str | None) -> bool:
        """Whether a ``Host`` header names this service."""
        parsed = split_host(host) if host else None
        if parsed is None:
            return False
        name, port = parsed
        return name in self.names or any(name == n and (p is None or p == port) for n, p in self.given)

    def trusts_origin(self, origin: str, host: str, scheme: str) -> bool:
        """Whether ``origin`` (an ``Origin`` value, or a ``Referer`` URL) is the service's own: the
        origin the request was sent to (``host`` over ``scheme``), or a name given with
        ``--allowed-host`` (a proxy in front may send another ``Host``)."""
        try:
            url = urlsplit(origin)
            origin_port = url.port
        except ValueError:
            return False
        if url.scheme not in _DEFAULT_PORTS or not url.hostname:
            return False  # "null" (an opaque origin: a sandbox, a file), or nothing like a URL
        theirs = (url.hostname.rstrip("."), origin_port or _DEFAULT_PORTS[url.scheme])
        ours = split_host(host)
        if ours is not None and theirs == (ours[0], ours[1] or _DEFAULT_PORTS.get(scheme, 80)):
            return True
        if ours is not None and ours[1] is None and url.scheme != scheme and theirs[0] == ours[0] \
                and origin_port is None:
            return True  # behind a proxy that ends TLS: https://name against Host: name over http
        return any(theirs[0] == n and (p is None or p == theirs[1]) for n, p in self.given)

    def describe(self) -> str:
        return ", ".join([*(f"[{n}]" if ":" in n else n for n in self.names),
                          *(f"{n}:{p}" if p else n for n, p in self.given)])


def _refusal(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _shown(value: str) -> str:
    return repr(value[:100] + ("…" if len(value) > 100 else ""))


class HostGuard:
    """The service's outermost layer: a request whose ``Host`` is not one of ``hosts`` answers
    421, one whose ``Origin`` (or ``Referer``, see the module's note) is another site's answers
    403, before anything else reads it. ``state`` and ``service`` are those of the app inside."""

    def __init__(self, app: ASGIApp, hosts: AllowedHosts, service: Any = None):
        self.app, self.hosts = app, hosts
        self.service = service
        """The service inside the checks (and the body limit), to put the dashboard in front of."""
        self.state = getattr(service, "state", None)

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
        headers = headers_of(scope)
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


def headers_of(scope: Scope) -> dict[str, str]:
    """The request's headers by lowercase name (the first of a repeated one)."""
    out: dict[str, str] = {}
    for name, value in scope.get("headers") or []:
        out.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
    return out
