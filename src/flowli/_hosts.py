"""The names a service answers to (a ``Host`` header's name and port, the loopback names, the
names an operator allows): the one check that the HTTP service, its dashboard and ``/mcp``, and a
worker's metrics port all make before they read a request (see ``flowli.http._hosts`` for why)."""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

LOOPBACK = ("localhost", "127.0.0.1", "::1")
"""The names a service answers to whatever it is told: this machine's."""
WILDCARDS = ("", "0.0.0.0", "::")
"""Listening addresses that are every interface, so no name of their own."""
_DEFAULT_PORTS = {"http": 80, "https": 443}
_SEEN = 64
"""How many ``Host`` values ``AllowedHosts.allows`` remembers its answer for."""


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
        self._seen: dict[str, bool] = {}
        """The answer for each ``Host`` value asked about lately: a service sees a few, on every request."""

    def allows(self, host: str | None) -> bool:
        """Whether a ``Host`` header names this service."""
        if not host:
            return False
        known = self._seen.get(host)
        if known is None:
            parsed = split_host(host)
            known = parsed is not None and (parsed[0] in self.names or any(
                parsed[0] == n and (p is None or p == parsed[1]) for n, p in self.given))
            if len(self._seen) >= _SEEN:  # a client that sends many names cannot grow it
                self._seen.clear()
            self._seen[host] = known
        return known

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
