"""The composition root of the application floor: ``Services(engine)`` builds each service of one
engine once (the applications and their keys, users and settings; the pipelines, their workers,
retry policies and schedules; the catalog), and every adapter (the HTTP service, its ``/mcp`` and
dashboard, ``flowli mcp``, the CLI) takes its services from it instead of building its own."""

from ._root import Services as Services

__all__ = ["Services"]
