"""The refusals of the pipeline service, each with the HTTP status the contract gives it."""

from __future__ import annotations

from typing import Any

from flowli.domain import FlowliError

from ._spec import PipelineInputError


class ServiceError(FlowliError):
    status = 400

    def __init__(self, message: str, **extra: Any):
        super().__init__(message)
        self.message = message
        self.extra = extra


class NotFound(ServiceError):
    status = 404


class Conflict(ServiceError):
    status = 409


class Unauthorized(ServiceError):
    status = 401


class Forbidden(ServiceError):
    status = 403


class Unavailable(ServiceError):
    status = 503


__all__ = ["Conflict", "Forbidden", "NotFound", "PipelineInputError", "ServiceError", "Unauthorized", "Unavailable"]
