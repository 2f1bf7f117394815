"""Operations on catalog runs: stuck runs with what they wait on, force-terminate with its
guards, RBAC through the one transition path (PermissionDenied names the missing capability),
middleware that sees every transition, and ``audit.workflow-run.query``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from flowli import Context, Principal
from flowli.catalog import AUDIT, Catalog, CatalogError, PermissionDenied
from flowli.domain import OperationRefused, UnknownExecutionError
from flowli.testing import Clock

from ..crash import until
from .app import app, effects

pytestmark = pytest.mark.integration


def with_waits():
    registry = app()

    @registry.workflow("ops.wait_for_clerk", description="Waits for a clerk's answer.")
    async def wait_for_clerk(ctx: Context, note: str) -> Any:
        return await ctx.delegate("clerks", {"note": note})

    @registry.workflow("ops.nap", description="Sleeps a day.")
    async def nap(ctx: Context) -> str:
        await ctx.sleep(timedelta(days=1))
        return "rested"

    return registry


async def test_stuck_runs_say_what_they_wait_on_and_sleepers_are_not_stuck(open_engine):
    clock = Clock()
    async with open_engine(with_waits(), clock=clock) as engine:
        catalog = Catalog(engine)
        clerk = (await catalog.start("ops.wait_for_clerk", {"note": "sign"}))["workflow_id"]
        napper = (await catalog.start("ops.nap", {}))["workflow_id"]
        await engine.wait_suspended(clerk)
        await engine.wait_suspended(napper)
        assert await catalog.stuck(older_than_seconds=3600) == []  # nothing is old yet
        await clock.advance(timedelta(hours=2))
        [stuck] = await catalog.stuck(older_than_seconds=3600)
        assert stuck["workflow_id"] == clerk and stuck["workflow_type"] == "ops.wait_for_clerk"
        assert stuck["status"] == "PENDING" and stuck["idle_seconds"] >= 7200
        kinds = [w["kind"] for w in stuck["waiting_on"]["waits"]]
        assert "delegate" in kinds and "queue 'clerks'" in stuck["waiting_on"]["summary"]
        with pytest.raises(CatalogError, match="older_than_seconds must be a number of seconds >= 0, got -1"):
            await catalog.stuck(older_than_seconds=-1)


async def test_force_terminate_holds_its_guards(open_engine):
    clock = Clock()
    async with open_engine(with_waits(), clock=clock) as engine:
        catalog = Catalog(engine)
        wid = (await catalog.start("ops.wait_for_clerk", {"note": "sign"}))["workflow_id"]
        await engine.wait_suspended(wid)
        journal = await engine.journal(wid)
        with pytest.raises(OperationRefused, match="within min_idle of 600 s"):
            await catalog.terminate(wid, "abandoned")
        await clock.advance(timedelta(minutes=11))
        with pytest.raises(OperationRefused, match="not at the expected 1"):
            await catalog.terminate(wid, "abandoned", expected_last_seq=1)
        with pytest.raises(CatalogError, match="reason must say why"):
            await catalog.terminate(wid, " ")
        assert (await catalog.status(wid))["status"] == "PENDING"  # nothing changed
        done = await catalog.terminate(wid, "abandoned by ops", expected_last_seq=journal[-1].seq,
                                       by=Principal("ops@example.com", roles=("operator",)))
        assert done == {"workflow_id": wid, "status": "FAILED"}
        status = await catalog.status(wid)
        assert status["status"] == "FAILED"
        assert status["reason"] == {"code": "TERMINATED", "message": "abandoned by ops"}
        last = (await catalog.history(wid))[-1]
        assert last["event"] == "execution.failed" and last["actor"] == "human:ops@example.com"


async def test_rbac_refuses_by_capability_whatever_the_entry(open_engine):
    async with open_engine(app()) as engine:
        catalog = Catalog(engine)
        viewer = Principal("vic@example.com", roles=("viewer",))
        operator = Principal("olga@example.com", roles=("operator",))
        with pytest.raises(PermissionDenied, match="lacks the capability 'runs:start'"):
            await catalog.start("aws.s3.enable_versioning", {"bucket": "v"}, by=viewer)
        # the engine's own start is the same transition: no back door
        with pytest.raises(PermissionDenied, match="lacks the capability 'runs:start'"):
            await engine.start("aws.s3.enable_versioning", "v", by=viewer)
        # a data type is a read: a viewer may start it
        listing = (await catalog.start("aws.s3.list_buckets", {}, by=viewer))["workflow_id"]
        assert await engine.result(listing, timeout=10) == []
        # a type's declared permission: the operator role does not grant s3:write
        with pytest.raises(PermissionDenied, match="lacks the capability 's3:write'"):
            await catalog.start("aws.s3.create_bucket", {"bucket": "x"}, by=operator)
        catalog.roles.define("s3-operator", ["runs:start", "runs:read", "s3:write"])
        s3 = Principal("sam@example.com", roles=("s3-operator",))
        wid = (await catalog.start("aws.s3.create_bucket", {"bucket": "x"}, by=s3))["workflow_id"]
        await engine.result(wid, timeout=10)
        assert (await catalog.status(wid, by=viewer))["status"] == "COMPLETED"
        with pytest.raises(PermissionDenied, match="lacks the capability 'runs:operate'"):
            await catalog.terminate(wid, "x", by=viewer)
        with pytest.raises(PermissionDenied, match="lacks the capability 'catalog:write'"):
            await catalog.save_composition({"name": "n", "version": "1", "layers": [{"name": "l", "steps": [
                {"name": "s", "workflow_type": "aws.s3.list_buckets", "input_mapping": {}}]}]}, by=s3)
        nobody = Principal("guest@example.com", roles=("guest",))
        with pytest.raises(PermissionDenied, match="lacks the capability 'runs:read'"):
            await catalog.status(wid, by=nobody)
        # a composition needs the permissions of its steps
        definition = {"name": "mk", "version": "1", "layers": [{"name": "l", "steps": [
            {"name": "s", "workflow_type": "aws.s3.create_bucket",
             "input_mapping": {"bucket": {"source": "input", "field": "b"}}}]}]}
        await catalog.save_composition(definition, by=operator)
        with pytest.raises(PermissionDenied, match="'s3:write'"):
            await catalog.start("virtual.mk@1", {"b": "y"}, by=operator)
        assert effects() == ["create:x"]


async def test_middleware_sees_every_transition_and_may_refuse(open_engine):
    async with open_engine(app()) as engine:
        catalog = Catalog(engine)
        seen: list[tuple[str, str | None, str | None]] = []

        async def audit(t: Any, call_next: Any) -> Any:
            seen.append((t.kind, t.workflow, t.principal.id if t.principal else None))
            if t.kind == "start" and t.workflow == "aws.s3.list_buckets" and t.principal and t.principal.id == "eve":
                raise PermissionError("eve may not list buckets today")
            return await call_next()

        engine.use(audit)
        with pytest.raises(PermissionError, match="eve may not"):
            await catalog.start("aws.s3.list_buckets", {}, by="eve")
        wid = (await catalog.start("aws.s3.list_buckets", {}, by="adam"))["workflow_id"]
        await engine.result(wid, timeout=10)
        assert ("start", "aws.s3.list_buckets", "eve") in seen and ("start", "aws.s3.list_buckets", "adam") in seen
        assert len(await engine.list()) == 1  # the refused start wrote nothing


async def test_the_audit_query_lists_what_ran_compositions_included(open_engine):
    async with open_engine(app()) as engine:
        catalog = Catalog(engine)
        await catalog.save_composition({"name": "one", "version": "1", "layers": [{"name": "l", "steps": [
            {"name": "s", "workflow_type": "aws.s3.list_buckets", "input_mapping": {}}]}]})
        run = (await catalog.start("virtual.one@1", {}))["workflow_id"]
        await engine.result(run, timeout=10)
        assert AUDIT in [t["name"] for t in await catalog.types(prefix="audit.")]
        assert (await catalog.schema(AUDIT))["workflow_kind"] == "data"
        query = (await catalog.start(AUDIT, {"workflow_type": "virtual.one@1"}))["workflow_id"]
        found = await engine.result(query, timeout=10)
        assert [r["workflow_id"] for r in found["runs"]] == [run]
        assert found["runs"][0]["status"] == "COMPLETED"


async def test_lists_filter_by_state_and_page_with_a_cursor(open_engine):
    async with open_engine(app()) as engine:
        catalog = Catalog(engine)
        ids = []
        for i in range(5):
            wid = (await catalog.start("aws.s3.list_buckets", {"prefix": str(i)}))["workflow_id"]
            await engine.result(wid, timeout=10)
            ids.append(wid)
        broken = (await catalog.start("billing.broken_output", {"amount": 1}))["workflow_id"]
        await until(lambda: _terminal(engine, broken), 10, "the run fails")
        first = await catalog.list(workflow_type="aws.s3.list_buckets", limit=2)
        assert len(first["runs"]) == 2 and first["next"] is not None
        rest = await catalog.list(workflow_type="aws.s3.list_buckets", limit=10, cursor=first["next"])
        assert [r["workflow_id"] for r in first["runs"] + rest["runs"]] == list(reversed(ids)) and rest["next"] is None
        assert [r["workflow_id"] for r in (await catalog.list(status="FAILED"))["runs"]] == [broken]
        with pytest.raises(CatalogError, match="status must be one of PENDING, COMPLETED, FAILED, remediation_pending"):
            await catalog.list(status="done")
        with pytest.raises(UnknownExecutionError):
            await catalog.status(ids[0], application="another")


async def _terminal(engine: Any, eid: str) -> bool:
    return (await engine.status(eid)).terminal


async def test_a_dag_started_on_the_engine_directly_needs_its_steps_permissions(open_engine):
    async with open_engine(app()) as engine:
        catalog = Catalog(engine)
        definition = {"name": "mk", "version": "1", "layers": [{"name": "l", "steps": [
            {"name": "s", "workflow_type": "aws.s3.create_bucket",
             "input_mapping": {"bucket": {"source": "static", "value": "z"}}}]}]}
        compiled = catalog.compile(definition)
        operator = Principal("olga@example.com", roles=("operator",))
        with pytest.raises(PermissionDenied, match="'s3:write'"):  # the decider's one input
            await engine.start("flowli.dag", ["virtual.mk@1", compiled, {}], by=operator)
        with pytest.raises(PermissionDenied, match="'s3:write'"):  # the version 1 workflow's arguments
            await engine.start("flowli.dag", "virtual.mk@1", compiled, {}, by=operator, version="1")
        assert len(await engine.list()) == 0 and effects() == []


async def test_rbac_is_on_without_a_catalog_and_a_refusal_writes_nothing(open_engine):
    # a plain engine of flowli.connect, no Catalog built in this process: the same checks
    async with open_engine(with_waits()) as engine:
        viewer = Principal("vic@example.com", roles=("viewer",))
        operator = Principal("olga@example.com", roles=("operator",))
        with pytest.raises(PermissionDenied, match="lacks the capability 'runs:start'"):
            await engine.start("aws.s3.enable_versioning", "v", by=viewer)
        with pytest.raises(PermissionDenied, match="lacks the capability 's3:write'"):
            await engine.start("aws.s3.create_bucket", "b", by=operator)
        assert len(await engine.list()) == 0
        eid = await engine.start("ops.wait_for_clerk", "n", by=operator)
        await until(lambda: _suspended(engine, eid), 10, "the run waits for its clerk")
        before = await engine.journal(eid)
        with pytest.raises(PermissionDenied, match="lacks the capability 'runs:operate'"):
            await engine.cancel(eid, by=viewer)
        with pytest.raises(PermissionDenied, match="lacks the capability 'runs:operate'"):
            await engine.signal(eid, "nudge", {}, by=viewer)
        assert await engine.journal(eid) == before and (await engine.status(eid)).status.value == "suspended"
        await engine.cancel(eid, by=operator)  # the operator may
        await until(lambda: _status_is(engine, eid, "cancelled"), 10, "the run is cancelled")


async def _suspended(engine: Any, eid: str) -> bool:
    return await _status_is(engine, eid, "suspended")


async def _status_is(engine: Any, eid: str, status: str) -> bool:
    return (await engine.status(eid)).status.value == status
