"""The fixtures of the pipeline service's tests in process: an engine on a real file (both
backends), and the service on it with one application."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from flowli import Engine, Registry
from flowli.access import Access
from flowli.pipelines import Applications, Pipelines, install

from ..engine.conftest import db_url as db_url  # noqa: F401 - the fixtures, re-exported
from ..engine.conftest import open_engine as open_engine  # noqa: F401


@pytest.fixture
def open_pipelines(open_engine: Any) -> Callable[..., contextlib.AbstractAsyncContextManager[tuple[Engine, Access, Pipelines]]]:
    """``async with open_pipelines(worker=False) as (engine, access, pipelines)``: the pipeline
    service on an engine of its own, and the access of a key of its application ``billing``."""

    @contextlib.asynccontextmanager
    async def make(*, worker: bool = False) -> AsyncIterator[tuple[Engine, Access, Pipelines]]:
        registry = Registry()
        install(registry)
        async with open_engine(registry, worker=worker) as engine:
            apps = Applications(engine)
            _, key = await apps.create("billing")
            yield engine, await apps.authenticate(key), Pipelines(engine)

    return make
