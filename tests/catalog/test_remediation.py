"""Remediation gates and retries of dag runs: a step that raises RemediationRequired parks the
run in ``remediation_pending`` holding no worker; ``remediated`` re-runs only that step,
``denied`` compensates the completed steps in reverse and fails the run; ``retry`` re-advances a
failed run without running its memoized steps again."""

from __future__ import annotations

from typing import Any

import pytest

from flowli.catalog import Catalog, CatalogError, RunStateError

from . import app as appmod
from .app import app, effects

pytestmark = pytest.mark.integration


def gated(name: str = "gated") -> dict[str, Any]:
    """Create a bucket and enable versioning on it, then tag it (the tag may be refused)."""
    return {"name": name, "version": "1", "layers": [
        {"name": "make", "steps": [
            {"name": "create", "workflow_type": "aws.s3.create_bucket",
             "input_mapping": {"bucket": {"source": "input", "field": "bucket"}}}]},
        {"name": "configure", "steps": [
            {"name": "version", "workflow_type": "aws.s3.enable_versioning",
             "input_mapping": {"bucket": {"source": "step", "step": "create", "field": "bucket_name"},
                               "count": {"source": "static", "value": 2}}},
            {"name": "tag", "workflow_type": "aws.s3.put_bucket_tagging",
             "input_mapping": {"bucket": {"source": "step", "step": "create", "field": "bucket_name"},
                               "tagging": {"source": "static", "value": {"TagSet": []}}}}]}]}


async def parked(catalog: Catalog, engine: Any, wid: str) -> dict[str, Any]:
    from ..crash import until

    async def is_parked() -> dict[str, Any] | None:
        status = await catalog.status(wid)
        return status if status["status"] == "remediation_pending" else None

    return await until(is_parked, 30, "the run parks in remediation_pending")


async def test_remediated_re_runs_only_the_parked_step(open_engine):
    async with open_engine(app()) as engine:
        catalog = Catalog(engine)
        await catalog.save_composition(gated())
        wid = (await catalog.start("virtual.gated@1", {"bucket": "locked-1"}))["workflow_id"]
        status = await parked(catalog, engine, wid)
        assert status["state_data"]["remediation"] == {
            "step": "tag", "reason": "bucket locked-1 has a legal hold",
            "fix": {"action": "release_hold", "bucket": "locked-1"}}
        assert {s["name"]: s["status"] for s in status["steps"]} == {
            "create": "COMPLETED", "version": "COMPLETED", "tag": "remediation_pending"}
        assert engine.running() == []  # a parked run holds no worker
        with pytest.raises(CatalogError, match="resolution must be 'remediated' or 'denied', got 'fixed'"):
            await catalog.resolve(wid, "fixed")
        appmod.fix("locked-1")  # the operator applies the fix
        resolved = await catalog.resolve(wid, "remediated")
        assert resolved == {"workflow_id": wid, "status": "PENDING", "resolution": "remediated", "step": "tag"}
        await engine.result(wid, timeout=20)
        done = await catalog.status(wid)
        assert done["status"] == "COMPLETED" and "remediation" not in done["state_data"]
        assert done["output"] == {"version": {"bucket": "locked-1", "versioning": "Enabled", "count": 2},
                                  "tag": {"bucket": "locked-1", "tags": 0}}
        # only the parked step ran again
        assert sorted(effects()) == sorted(["create:locked-1", "version:locked-1", "tag-refused:locked-1",
                                            "tag:locked-1"])
        with pytest.raises(RunStateError, match="is COMPLETED, not remediation_pending"):
            await catalog.resolve(wid, "remediated")
        states = [h["state"] for h in await catalog.history(wid)]
        assert "remediation_pending" in states and states[-1] == "COMPLETED"


async def test_denied_compensates_in_reverse_and_fails(open_engine):
    async with open_engine(app()) as engine:
        catalog = Catalog(engine)
        await catalog.save_composition(gated())
        wid = (await catalog.start("virtual.gated@1", {"bucket": "locked-2"}))["workflow_id"]
        await parked(catalog, engine, wid)
        await catalog.resolve(wid, "denied")
        with pytest.raises(Exception, match="remediation denied"):
            await engine.result(wid, timeout=20)
        status = await catalog.status(wid)
        assert status["status"] == "FAILED"
        assert status["reason"]["code"] == "REMEDIATION_DENIED" and status["reason"]["step"] == "tag"
        # compensations of the completed steps, the last completed first
        undo = [e for e in effects() if e.startswith(("unversion:", "delete:"))]
        assert undo == ["unversion:locked-2", "delete:locked-2"]
        with pytest.raises(RunStateError, match="only a FAILED run|is FAILED, not remediation_pending"):
            await catalog.resolve(wid, "denied")


async def test_a_parked_run_is_resolved_only_once(open_engine):
    async with open_engine(app()) as engine:
        catalog = Catalog(engine)
        await catalog.save_composition(gated())
        wid = (await catalog.start("virtual.gated@1", {"bucket": "locked-3"}))["workflow_id"]
        await parked(catalog, engine, wid)
        # still refused: the run parks again on the same step, for a new answer
        await catalog.resolve(wid, "remediated")
        from ..crash import until

        await until(lambda: effects().count("tag-refused:locked-3") == 2 or None, 30, "the step runs again")
        again = await parked(catalog, engine, wid)
        assert again["state_data"]["remediation"]["step"] == "tag"
        appmod.fix("locked-3")
        await catalog.resolve(wid, "remediated")
        await engine.result(wid, timeout=20)
        assert effects().count("create:locked-3") == 1 and effects().count("tag:locked-3") == 1


async def test_retry_re_advances_a_failed_dag_without_rerunning_memoized_steps(open_engine):
    async with open_engine(app()) as engine:
        catalog = Catalog(engine)
        definition = {"name": "flaky", "version": "1", "layers": [
            {"name": "one", "steps": [{"name": "create", "workflow_type": "aws.s3.create_bucket",
                                       "input_mapping": {"bucket": {"source": "input", "field": "bucket"}}}]},
            {"name": "two", "steps": [{"name": "broken", "workflow_type": "billing.broken_output",
                                       "input_mapping": {"amount": {"source": "static", "value": 3}}}]}]}
        await catalog.save_composition(definition)
        wid = (await catalog.start("virtual.flaky@1", {"bucket": "r1"}))["workflow_id"]
        with pytest.raises(Exception):  # noqa: B017 - the step's own error, whatever its type
            await engine.result(wid, timeout=20)
        failed = await catalog.status(wid)
        assert failed["status"] == "FAILED" and failed["reason"]["step"] == "broken"
        assert failed["reason"]["code"] == "OUTPUT_INVALID"
        retried = await catalog.retry(wid)
        assert retried["status"] == "PENDING" and retried["step"] == "broken"
        with pytest.raises(Exception):  # noqa: B017
            await engine.result(wid, timeout=20)  # fails again: the type still breaks its schema
        assert effects() == ["create:r1"]  # the memoized step did not run again
        history = await catalog.history(wid)
        assert "execution.retried" in [h["event"] for h in history]
        with pytest.raises(RunStateError, match="cannot be retried: it is PENDING|cannot be retried: it is COMPLETED"):
            ok = (await catalog.start("aws.s3.create_bucket", {"bucket": "fine"}))["workflow_id"]
            await catalog.retry(ok)


async def test_refused_operations_leave_the_journal_as_it_was(open_engine):
    async with open_engine(app()) as engine:
        catalog = Catalog(engine)
        # a run waiting for a clerk: not parked, not failed
        wid = (await catalog.start("ops.await_clerk", {"note": "n"}))["workflow_id"]
        from ..crash import until

        await until(lambda: _waits(engine, wid), 10, "the run waits for its clerk")
        before = await engine.journal(wid)
        with pytest.raises(RunStateError, match="is PENDING, not remediation_pending: there is no remediation gate"):
            await catalog.resolve(wid, "remediated")
        with pytest.raises(RunStateError, match="cannot be retried: it is PENDING"):
            await catalog.retry(wid)
        with pytest.raises(CatalogError, match="resolution must be"):
            await catalog.resolve(wid, "maybe")
        assert await engine.journal(wid) == before
        # cancelled: a FAILED run in the three-state view, with its reason, and not retried
        await engine.cancel(wid, by="olga@example.com")
        await until(lambda: _ended(engine, wid), 10, "the run is cancelled")
        view = await catalog.status(wid)
        assert view["status"] == "FAILED" and view["reason"]["code"] == "CANCELLED", view
        ended = await engine.journal(wid)
        with pytest.raises(RunStateError, match="it was cancelled"):
            await catalog.retry(wid)
        assert await engine.journal(wid) == ended


async def _waits(engine: Any, eid: str) -> bool:
    return (await engine.status(eid)).status.value == "suspended"


async def _ended(engine: Any, eid: str) -> bool:
    return (await engine.status(eid)).terminal
