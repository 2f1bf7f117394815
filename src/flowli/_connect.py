"""Open an engine on a store chosen by URL: the one place that knows the backends."""

from __future__ import annotations

import os
from typing import Any

from flowli.domain import InvalidDatabaseURL
from flowli.engine import Clock, Engine, Options, Registry
from flowli.store import Store


def open_store(url: str) -> Store:
    """The store for a database URL: ``sqlite:///path``, ``sqlite://:memory:``, ``postgresql://…``."""
    if not isinstance(url, str) or "://" not in url:
        raise InvalidDatabaseURL(str(url), "expected sqlite:///path.db or postgresql://host/db")
    scheme = url.split("://", 1)[0].lower()
    if scheme == "sqlite":
        from flowli.store.sqlite import SQLiteStore

        return SQLiteStore(url)
    if scheme in ("postgresql", "postgres"):
        from flowli.store.postgres import PostgresStore

        return PostgresStore(url)
    raise InvalidDatabaseURL(url, f"unknown scheme {scheme!r}; use sqlite:// or postgresql://")


def bucket_path(store: Store) -> str:
    """Where evidence goes: ``FLOWLI_BUCKET`` when set; else beside a SQLite file; else
    ``flowli-bucket`` in the working directory (on a shared database, give every process one
    bucket: ``FLOWLI_BUCKET`` or ``bucket=``)."""
    if os.environ.get("FLOWLI_BUCKET"):
        return os.environ["FLOWLI_BUCKET"]
    path = getattr(store, "path", None)
    if isinstance(path, str) and path != ":memory:":
        return f"{path}-bucket"
    return "flowli-bucket"


async def connect(
    url: str, registry: Registry, *, clock: Clock | None = None, options: Options | None = None,
    tracer_provider: Any = None, **tuning: Any
) -> Engine:
    """Open the store at ``url`` (creating or upgrading its schema) and return an Engine. Its
    spans go to ``tracer_provider``, else to OpenTelemetry's global provider when one is set."""
    store = open_store(url)
    await store.open()
    if "bucket" not in tuning and options is None:
        tuning["bucket"] = bucket_path(store)
    if tuning:
        options = Options(**{**(options or Options()).__dict__, **tuning})
    # RBAC is always on, built into the engine: every transition a principal with roles asks for
    # is checked, whatever the entry point, with or without a Catalog in this process
    from flowli.catalog import policy

    return Engine(store, registry, clock=clock, options=options, tracer_provider=tracer_provider,
                  middleware=[policy(registry)])


def default_url() -> str:
    return os.environ.get("FLOWLI_DB", "sqlite:///flowli.db")
