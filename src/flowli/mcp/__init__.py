"""The MCP server: AI assistants discover, start, watch and repair runs (the official SDK).

The server's names (``build`` and the principals' helpers) are loaded at their first use: they
import the MCP SDK, about half a second of a process's CPU. ``install_approvals`` is not: the
approval workflow of an assistant's writes must run in every engine of a service (a write may
wait for a person across a restart), whether or not an assistant has connected since."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._approvals import APPROVAL as APPROVAL
from ._approvals import install as install_approvals

if TYPE_CHECKING:
    from ._server import build as build
    from ._server import fixed as fixed
    from ._server import from_headers as from_headers
    from ._server import from_key as from_key
    from ._server import local_admin as local_admin
    from ._server import principal_of_key as principal_of_key

_SERVER = ("build", "fixed", "from_headers", "from_key", "local_admin", "principal_of_key")


def __getattr__(name: str) -> Any:
    if name in _SERVER:
        return getattr(importlib.import_module("flowli.mcp._server"), name)
    raise AttributeError(f"module 'flowli.mcp' has no attribute {name!r}")


__all__ = ["APPROVAL", "build", "fixed", "from_headers", "from_key", "install_approvals", "local_admin",
           "principal_of_key"]
