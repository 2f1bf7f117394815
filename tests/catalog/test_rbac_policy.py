"""RBAC is built into an engine, not attached to it afterwards: ``flowli.connect`` builds every
engine with the policy (the first middleware), the catalog and the applications read the roles
of that policy, and an engine built without it is refused by them (its checks would not run)."""

from __future__ import annotations

from typing import Any

import pytest

import flowli
from flowli.access import Applications
from flowli.catalog import Catalog, PermissionDenied, policy
from flowli.domain import Principal
from flowli.engine import Engine
from flowli.testing import store_of

pytestmark = pytest.mark.integration


async def test_connect_builds_the_engine_with_its_policy_and_one_without_is_refused(tmp_path: Any) -> None:
    registry = flowli.Registry()

    @registry.workflow("job")
    async def job(ctx: flowli.Context) -> int:
        return 1

    engine = await flowli.connect(f"sqlite:///{tmp_path / 'a.db'}", registry)
    async with engine:
        assert len(engine.middleware) == 1 and getattr(engine.middleware[0], "flowli_rbac", False)
        catalog = Catalog(engine)
        Applications(engine)
        assert len(engine.middleware) == 1  # nothing attached afterwards
        with pytest.raises(PermissionDenied, match="lacks the capability 'runs:start'"):
            await engine.start("job", by=Principal("v@example.com", roles=("viewer",)))
        catalog.roles.define("starter", ["runs:start"])  # read by the engine's own check at once
        await engine.start("job", by=Principal("s@example.com", roles=("starter",)))
        bare = Engine(store_of(engine), registry)
        with pytest.raises(RuntimeError, match="built without RBAC"):
            Catalog(bare)
        with pytest.raises(RuntimeError, match="built without RBAC"):
            Applications(bare)
        built = Engine(store_of(engine), registry, middleware=[policy(registry)])
        assert Catalog(built).roles.knows("starter")
