"""Upgrade: a composition run of the version 1 workflow of ``flowli.dag`` (what the catalog
started before the dag runner became a decider) still finishes and reads under the new code,
parked on a gate or finished; new runs are the decider's."""

from __future__ import annotations

import pytest

from flowli.catalog import Catalog

from . import app as appmod
from .app import app, effects
from .test_remediation import gated, parked

pytestmark = pytest.mark.integration


async def test_a_run_of_the_version_1_workflow_parks_resolves_finishes_and_reads(open_engine):
    async with open_engine(app()) as engine:
        catalog = Catalog(engine)
        definition = gated("legacy")
        await catalog.save_composition(definition)
        compiled = catalog.compile(definition)
        # in flight: started as today's main started it, it parks on its gate
        old = await engine.start("flowli.dag", "virtual.legacy@1", compiled, {"bucket": "locked-4"}, version="1")
        status = await parked(catalog, engine, old)
        assert (await engine.status(old)).version == "1" and status["workflow_type"] == "virtual.legacy@1"
        assert status["state_data"]["remediation"]["step"] == "tag"
        assert {s["name"]: s["status"] for s in status["steps"]} == {
            "create": "COMPLETED", "version": "COMPLETED", "tag": "remediation_pending"}
        appmod.fix("locked-4")
        assert (await catalog.resolve(old, "remediated"))["step"] == "tag"
        await engine.result(old, timeout=20)
        done = await catalog.status(old)
        assert done["status"] == "COMPLETED" and [s["status"] for s in done["steps"]] == ["COMPLETED"] * 3
        assert done["output"]["tag"] == {"bucket": "locked-4", "tags": 0}
        states = [h["state"] for h in await catalog.history(old)]
        assert "remediation_pending" in states and states[-1] == "COMPLETED"
        # finished: it reads as it did, in a list beside a new run of the decider
        new = (await catalog.start("virtual.legacy@1", {"bucket": "fine-4"}))["workflow_id"]
        await engine.result(new, timeout=20)
        assert (await engine.status(new)).version == "2"
        listed = {r["workflow_id"]: r["status"] for r in (await catalog.list("virtual.legacy@1"))["runs"]}
        assert listed == {old: "COMPLETED", new: "COMPLETED"}
        assert (await catalog.status(new))["output"] == done["output"] | {
            "version": {"bucket": "fine-4", "versioning": "Enabled", "count": 2}, "tag": {"bucket": "fine-4", "tags": 0}}
        assert effects().count("tag:locked-4") == 1 and effects().count("create:fine-4") == 1
