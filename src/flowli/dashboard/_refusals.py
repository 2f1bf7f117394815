"""A page's refusal: the status and the one sentence the page shows, from the refusals of the
services (each kind with the status the HTTP service gives it, ``flowli.http.STATUS``)."""

from __future__ import annotations

from flowli.catalog import PermissionDenied
from flowli.domain import FlowliError, UnknownExecutionError
from flowli.http import STATUS


class Refused(Exception):
    """An action or page refused: its status and the sentence the page shows."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def refusal(exc: Exception, what: str) -> Refused:
    """A service's refusal of an action, as the page says it, with the status the service gives
    its kind (``flowli.http.STATUS``): 403 for a capability the user lacks, 404 for a run that is
    not the user's (or none at all), 409 for a run whose state does not allow it."""
    if isinstance(exc, PermissionDenied):
        return Refused(403, str(exc))
    if isinstance(exc, UnknownExecutionError):
        return Refused(404, f"Cannot {what}: there is no such run in your applications.")
    status = STATUS[exc.refusal] if isinstance(exc, FlowliError) else 409
    return Refused(status, f"Cannot {what}: {exc}")
