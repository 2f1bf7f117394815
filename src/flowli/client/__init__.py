"""The Python client of the HTTP service: ``PipelinesClient`` for applications and
``HttpWorker`` for application workers. It imports httpx and nothing of the engine."""

try:
    import httpx as _httpx  # noqa: F401 - the one package the client needs beyond the core
except ModuleNotFoundError as exc:  # the core install: say which extra brings it
    raise ModuleNotFoundError(f"flowli.client needs flowli's client extra ({exc.name} is not installed):"
                              " pip install 'flowli[client]'", name=exc.name) from None

from ._client import ClientError as ClientError
from ._client import PipelinesClient as PipelinesClient
from ._worker import HttpWorker as HttpWorker
from ._worker import StageError as StageError
from ._worker import WaitForApproval as WaitForApproval

__all__ = ["ClientError", "HttpWorker", "PipelinesClient", "StageError", "WaitForApproval"]
