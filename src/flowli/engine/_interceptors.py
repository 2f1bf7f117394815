"""What sees the transitions of one engine: the middleware chain (``engine.use``: it may refuse
a transition before its write, each middleware for every kind or for the kinds it named) and the
observers (``engine.observe``: called after every commit, the frame appends included)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class Interceptors:
    def __init__(self) -> None:
        self.middleware: list[Any] = []
        """In the order registered: the chain every transition but the fast lane's appends passes."""
        self.kinds: dict[Any, frozenset[str]] = {}
        """The transition kinds a middleware registered with ``kinds`` sees (the others: all)."""
        self.observers: list[Any] = []

    def use(self, middleware: Any, kinds: Iterable[str] | None = None) -> None:
        self.middleware.append(middleware)
        if kinds is not None:
            self.kinds[middleware] = frozenset(kinds)

    def chain(self, kind: str) -> list[Any]:
        """The middleware that sees a transition of ``kind``, in order (none for ``append``)."""
        if kind == "append" or not self.middleware:
            return []
        only = self.kinds
        return [m for m in self.middleware if m not in only or kind in only[m]]
