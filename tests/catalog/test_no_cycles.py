"""A composition's runs free what they built by reference counting alone: a run that completes,
and one parked for remediation, denied and compensated in reverse, with their status and history
read, leave no flowli object in a reference cycle."""

from __future__ import annotations

import pytest

from flowli.catalog import Catalog

from ..garbage import Garbage
from .app import app, effects
from .test_remediation import gated, parked

pytestmark = pytest.mark.integration


async def test_a_completed_run_and_a_denied_one_leave_no_cycle(open_engine):
    async with open_engine(app()) as engine:
        catalog = Catalog(engine)
        await catalog.save_composition(gated())
        with Garbage() as garbage:
            done = (await catalog.start("virtual.gated@1", {"bucket": "plain-1"}))["workflow_id"]
            await engine.result(done, timeout=20)
            denied = (await catalog.start("virtual.gated@1", {"bucket": "locked-9"}))["workflow_id"]
            await parked(catalog, engine, denied)
            await catalog.resolve(denied, "denied")
            with pytest.raises(Exception, match="remediation denied"):
                await engine.result(denied, timeout=20)
            assert (await catalog.status(done))["status"] == "COMPLETED"
            assert [h["state"] for h in await catalog.history(denied)][-1] == "FAILED"
        assert [e for e in effects() if e.startswith(("unversion:", "delete:"))] == [
            "unversion:locked-9", "delete:locked-9"]
        assert dict(garbage.found) == {}
