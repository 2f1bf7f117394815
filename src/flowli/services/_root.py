"""``Services``: each service of one engine, built once."""

from __future__ import annotations

from flowli.access import Applications
from flowli.catalog import Catalog
from flowli.engine import Engine
from flowli.pipelines import Pipelines, Policies, Schedules, Workers


class Services:
    """The services of ``engine``. ``lease_ttl``: the lease of a job a worker takes (seconds)."""

    def __init__(self, engine: Engine, *, lease_ttl: float = 30.0):
        self.engine = engine
        self.applications = Applications.of(engine)
        """Applications, API keys, dashboard users, settings; authentication; the engine's roles."""
        self.pipelines = Pipelines(engine)
        self.workers = Workers(engine, self.pipelines, lease_ttl, self.applications)
        self.policies = Policies(engine, self.pipelines)
        self.schedules = Schedules(engine, self.pipelines)
        self.catalog = Catalog(engine)
