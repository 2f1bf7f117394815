"""The refusals of the application's services (applications and keys, pipelines, workers,
policies, schedules), each of its kind in the domain's one taxonomy (``flowli.domain.Refusal``):
each adapter says them its own way (the HTTP service with the status the contract gives each
kind). ``ServiceError`` itself is an input that is not valid."""

from __future__ import annotations

from typing import Any

from flowli.domain import FlowliError, Refusal


class ServiceError(FlowliError):
    refusal = Refusal.INVALID

    def __init__(self, message: str, **extra: Any):
        super().__init__(message)
        self.message = message
        self.extra = extra

    def refusal_fields(self) -> dict[str, Any]:
        return dict(self.extra)


class NotFound(ServiceError):
    refusal = Refusal.NOT_FOUND


class Conflict(ServiceError):
    refusal = Refusal.CONFLICT


class Unauthorized(ServiceError):
    refusal = Refusal.UNAUTHORIZED


class Forbidden(ServiceError):
    refusal = Refusal.FORBIDDEN


class Unavailable(ServiceError):
    refusal = Refusal.UNAVAILABLE


