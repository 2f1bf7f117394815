"""The Python client of the HTTP service: ``PipelinesClient`` for applications and
``HttpWorker`` for application workers. It imports httpx and nothing of the engine."""

from ._client import ClientError as ClientError
from ._client import PipelinesClient as PipelinesClient
from ._worker import HttpWorker as HttpWorker
from ._worker import StageError as StageError
from ._worker import WaitForApproval as WaitForApproval

__all__ = ["ClientError", "HttpWorker", "PipelinesClient", "StageError", "WaitForApproval"]
