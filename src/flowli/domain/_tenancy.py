"""Which application a record belongs to. Executions, tasks and messages carry an application;
one started without any (``engine.start`` of an embedded user, ``flowli start``) belongs to the
``default`` application: a read scoped to ``default`` sees it, and a read scoped to another
application never does."""

from __future__ import annotations

DEFAULT_APPLICATION = "default"
"""The application of what was started without one."""


def belongs(owner: str | None, application: str | None) -> bool:
    """Whether a record of application ``owner`` (None: started without one) is seen by a read
    scoped to ``application`` (None: unscoped, every application's)."""
    return application is None or owner == application or (owner is None and application == DEFAULT_APPLICATION)

