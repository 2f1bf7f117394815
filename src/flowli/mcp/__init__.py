"""The MCP server: AI assistants discover, start, watch and repair runs (the official SDK)."""

from ._server import build as build
from ._server import fixed as fixed
from ._server import from_headers as from_headers
from ._server import from_key as from_key
from ._server import local_admin as local_admin
from ._server import principal_of_key as principal_of_key

__all__ = ["build", "fixed", "from_headers", "from_key", "local_admin", "principal_of_key"]
