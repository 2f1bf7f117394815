"""The HTTP service (ASGI): pipelines, the worker protocol, applications' keys; a thin layer
over Engine. ``flowli serve`` runs it on uvicorn."""

from ._app import MAX_BODY as MAX_BODY
from ._app import Pages as Pages
from ._app import Service as Service
from ._app import create_app as create_app
from ._app import from_this_machine as from_this_machine
from ._errors import STATUS as STATUS
from ._hosts import AllowedHosts as AllowedHosts
from ._serve import serve as serve

__all__ = ["MAX_BODY", "STATUS", "AllowedHosts", "Pages", "Service", "create_app", "from_this_machine", "serve"]
