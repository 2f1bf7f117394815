"""The composition root: ``Services(engine)`` builds each service once, wires them to one
another, and the HTTP service and the dashboard in front of it use those very objects (no
adapter builds its own applications, pipelines or catalog)."""

from __future__ import annotations

from typing import Any

import pytest

import flowli
from flowli.access import Applications
from flowli.dashboard import Dashboard
from flowli.http import create_app
from flowli.services import Services

pytestmark = pytest.mark.integration


async def test_each_service_is_built_once_and_shared(tmp_path: Any) -> None:
    engine = await flowli.connect(f"sqlite:///{tmp_path / 's.db'}", flowli.Registry())
    async with engine:
        services = Services(engine, lease_ttl=12.0)
        # one Applications an engine: what MCP's approvals and any other Services of it use too
        assert Applications.of(engine) is services.applications is Services(engine).applications
        assert services.workers.apps is services.applications
        assert services.workers.pipelines is services.pipelines
        assert services.policies.pipelines is services.pipelines
        assert services.schedules.pipelines is services.pipelines
        assert services.catalog.engine is engine and services.workers.lease.total_seconds() == 12.0
        made: list[Dashboard] = []

        def pages(routes: Any, services: Services) -> Dashboard:
            made.append(Dashboard(routes, engine, services))
            return made[0]

        app = create_app(engine, lease_ttl=7.0, pages=pages)
        served = app.services
        assert isinstance(served, Services) and served.workers.lease.total_seconds() == 7.0
        [dashboard] = made  # the pages are given the routes and the service's own services
        assert dashboard.api is app.routes and app.routes.api is app.api
        assert dashboard.applications is served.applications and dashboard.sessions.apps is served.applications
        assert dashboard.pipelines is served.pipelines and dashboard.catalog is served.catalog
        # the applications hold the engine's roles: the ones every check reads
        assert served.applications.roles.names() == ["admin", "operator", "viewer"]
