"""The catalog of types: metadata, namespaces, schemas from type hints, prerequisites, the
definition and the dag of a type; starts validated against the input schema and results against
the output schema; the three-state view and the history of a run."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from pydantic import BaseModel
from typing_extensions import TypedDict

from flowli import Context, Registry
from flowli.catalog import Catalog, InputsInvalid, UnknownType
from flowli.domain import OutputInvalid, RegistrationError

from .app import app, effects

pytestmark = pytest.mark.integration


async def test_types_carry_their_metadata_and_namespace(open_engine):
    async with open_engine(app()) as engine:
        catalog = Catalog(engine)
        s3 = await catalog.types(prefix="aws.s3.")
        names = [t["name"] for t in s3]
        assert names == sorted(names) and "aws.s3.create_bucket" in names and "billing.broken_output" not in names
        create = next(t for t in s3 if t["name"] == "aws.s3.create_bucket")
        assert create == {"name": "aws.s3.create_bucket", "namespace": "aws.s3", "workflow_kind": "state_machine",
                          "featured": True, "scope": "library", "description": "Create an S3 bucket.", "version": "1"}
        listing = next(t for t in s3 if t["name"] == "aws.s3.list_buckets")
        assert listing["workflow_kind"] == "data" and listing["scope"] == "none"
        assert [t["name"] for t in await catalog.types(q="VERSIONING")] == [
            "aws.s3.enable_versioning", "aws.s3.suspend_versioning"]
        spaces = {n["namespace"]: n["types"] for n in await catalog.namespaces()}
        assert spaces["aws.s3"] == 6 and spaces["billing"] == 1 and "flowli" not in spaces
        # the engine's own workflows are not types
        assert not [t for t in await catalog.types() if t["name"].startswith("flowli.")]


async def test_the_schema_comes_from_the_type_hints(open_engine):
    async with open_engine(app()) as engine:
        catalog = Catalog(engine)
        schema = await catalog.schema("aws.s3.create_bucket")
        assert schema["input_schema"]["properties"]["bucket"]["type"] == "string"
        assert schema["input_schema"]["required"] == ["bucket"]
        assert set(schema["output_schema"]["properties"]) == {"bucket_name", "arn"}
        assert schema["fields"] == [{"name": "bucket", "type": "string", "required": True}]
        versioning = await catalog.schema("aws.s3.enable_versioning")
        assert versioning["fields"][1] == {"name": "count", "type": "integer", "required": False, "default": 1}
        assert schema["read_only"] is False and schema["has_prerequisites"] is True
        assert schema["workflow_kind"] == "state_machine"
        data = await catalog.schema("aws.s3.list_buckets")
        assert data["read_only"] is True and data["has_prerequisites"] is False  # data implies read_only
        assert data["output_schema"] == {"items": {"type": "string"}, "type": "array"}
        tagged = await catalog.schema("aws.s3.put_bucket_tagging")
        assert tagged["output_schema"]["properties"]["tags"]["type"] == "integer"  # a TypedDict


async def test_prerequisites_by_variant_definition_and_dag(open_engine):
    async with open_engine(app()) as engine:
        catalog = Catalog(engine)
        pre = [{"variant": "aws", "title": "An AWS connection", "guide": "Create a connection, then pass its uuid."}]
        assert await catalog.prerequisites("aws.s3.create_bucket") == pre
        assert await catalog.prerequisites("aws.s3.create_bucket", variant="aws") == pre
        with pytest.raises(Exception, match="variant 'gcp' is not a prerequisite variant of 'aws.s3.create_bucket'"):
            await catalog.prerequisites("aws.s3.create_bucket", variant="gcp")
        assert await catalog.prerequisites("aws.s3.list_buckets") == []
        d = await catalog.definition("aws.s3.create_bucket")
        assert d["permissions"] == ["s3:write"] and d["compensate"] == "aws.s3.delete_bucket"
        assert d["versions"] == ["1"] and d["code"].endswith("create_bucket")
        assert await catalog.dag("aws.s3.create_bucket") == {"workflow_type": "aws.s3.create_bucket", "layers": [
            {"name": "main", "steps": [{"name": "aws.s3.create_bucket", "workflow_type": "aws.s3.create_bucket"}]}]}


async def test_an_unknown_type_is_refused_with_a_did_you_mean(open_engine):
    async with open_engine(app()) as engine:
        catalog = Catalog(engine)
        for call in (catalog.schema("aws.s3.create_buckt"), catalog.start("aws.s3.create_buckt", {"bucket": "b"})):
            with pytest.raises(UnknownType, match=r"^unknown workflow type 'aws.s3.create_buckt'; did you mean"
                                                  r" 'aws.s3.create_bucket'\?$"):
                await call
        with pytest.raises(UnknownType, match=r"^unknown workflow type 'zzz'$"):
            await catalog.definition("zzz")
        with pytest.raises(UnknownType, match="flowli.pipeline"):
            await catalog.start("flowli.pipeline", {})
        assert len(await engine.list()) == 0  # nothing started


async def test_inputs_are_validated_before_the_run_starts_each_bad_field_named(open_engine):
    async with open_engine(app()) as engine:
        catalog = Catalog(engine)
        with pytest.raises(InputsInvalid) as bad:
            await catalog.start("aws.s3.enable_versioning", {"count": "many", "colour": "red"})
        assert bad.value.problems == ["bucket is required", "count: Input should be a valid integer, unable to parse"
                                      " string as an integer", "colour is not a parameter"]
        assert "the inputs of 'aws.s3.enable_versioning' do not match its schema" in str(bad.value)
        with pytest.raises(InputsInvalid, match="inputs must be a JSON object"):
            await catalog.start("aws.s3.enable_versioning", ["b"])
        assert len(await engine.list()) == 0 and effects() == []


async def test_a_run_completes_with_its_output_and_history(open_engine):
    async with open_engine(app()) as engine:
        catalog = Catalog(engine)
        started = await catalog.start("aws.s3.create_bucket", {"bucket": "b1"})
        assert started["status"] == "PENDING" and set(started) == {"workflow_id", "status"}
        wid = started["workflow_id"]
        await engine.result(wid, timeout=10)
        status = await catalog.status(wid)
        assert status["status"] == "COMPLETED" and status["workflow_type"] == "aws.s3.create_bucket"
        assert status["output"] == {"bucket_name": "b1", "arn": "arn:aws:s3:::b1"}  # the model, as JSON
        assert "reason" not in status and status["created_at"] <= status["updated_at"]
        history = await catalog.history(wid)
        assert [h["event"] for h in history][0] == "execution.started" and history[-1]["state"] == "COMPLETED"
        assert [h["seq"] for h in history] == sorted(h["seq"] for h in history)
        assert all("input" not in h and "output" not in h for h in history)  # no payloads unless asked
        assert {h.get("step") for h in history} >= {"make_bucket"}
        full = await catalog.history(wid, include_state_data=True)
        assert full[0]["input"] == {"bucket": "b1"}
        assert full[-1]["output"] == status["output"]
        assert full[0]["actor"] == "system:engine"


async def test_an_output_that_does_not_match_its_schema_fails_the_run(open_engine):
    async with open_engine(app()) as engine:
        catalog = Catalog(engine)
        wid = (await catalog.start("billing.broken_output", {"amount": 5}))["workflow_id"]
        with pytest.raises(OutputInvalid, match="does not match its schema"):
            await engine.result(wid, timeout=10)
        status = await catalog.status(wid)
        assert status["status"] == "FAILED" and status["reason"]["code"] == "OUTPUT_INVALID"
        assert status["reason"]["problems"] == ["output.bucket_name: Input should be a valid string",
                                                "output.arn is required"]
        assert "billing.broken_output" in status["reason"]["message"]


async def test_catalog_metadata_is_checked_at_registration():
    registry = Registry()

    async def wf(ctx: Context) -> None: ...

    with pytest.raises(RegistrationError, match="kind must be one of state_machine, data, dag, got 'saga'"):
        registry.workflow("x.y", kind="saga")(wf)
    with pytest.raises(RegistrationError, match="unknown keyword 'featurd'"):
        registry.workflow("x.y", featurd=True)(wf)
    with pytest.raises(RegistrationError, match="scope must be one of organization, library, none"):
        registry.workflow("x.y", scope="global")(wf)
    with pytest.raises(RegistrationError, match="permissions must be a list of capability names"):
        registry.workflow("x.y", permissions="s3:write")(wf)
    assert registry.names() == []


async def test_status_and_history_of_an_archived_run_read_its_archived_journal(open_engine):
    from datetime import timedelta

    from flowli.testing import Clock

    clock = Clock()
    async with open_engine(app(), clock=clock, retention=timedelta(days=1)) as engine:
        catalog = Catalog(engine)
        wid = (await catalog.start("aws.s3.create_bucket", {"bucket": "old"}))["workflow_id"]
        await engine.result(wid, timeout=10)
        live_status, live_history = await catalog.status(wid), await catalog.history(wid, include_state_data=True)
        await clock.advance(timedelta(days=2))
        await engine.retain()  # (the sweeper's own retention pass may be the one that archives it)
        from ..crash import until

        await until(lambda: engine.archived(wid), 10, "the run is archived")
        assert await engine.status(wid) is not None and await engine.statuses([wid]) == []  # no longer live
        assert await catalog.status(wid) == live_status
        assert await catalog.history(wid, include_state_data=True) == live_history


async def test_a_composition_run_archived_keeps_its_steps_state_data_and_history(open_engine):
    from datetime import timedelta

    from flowli.testing import Clock

    from ..crash import until

    clock = Clock()
    async with open_engine(app(), clock=clock, retention=timedelta(days=1)) as engine:
        catalog = Catalog(engine)
        await catalog.save_composition({"name": "pair", "version": "1", "layers": [
            {"name": "one", "steps": [{"name": "make", "workflow_type": "aws.s3.create_bucket",
                                       "input_mapping": {"bucket": {"source": "input", "field": "bucket"}}}]},
            {"name": "two", "steps": [{"name": "version", "workflow_type": "aws.s3.enable_versioning",
                                       "input_mapping": {"bucket": {"source": "step", "step": "make",
                                                                    "field": "bucket_name"}}}]}]})
        wid = (await catalog.start("virtual.pair@1", {"bucket": "kept"}))["workflow_id"]
        await engine.result(wid, timeout=20)
        live = (await catalog.status(wid), await catalog.history(wid), await catalog.history(wid, include_state_data=True))
        assert live[0]["status"] == "COMPLETED" and [s["status"] for s in live[0]["steps"]] == ["COMPLETED"] * 2
        assert live[0]["state_data"]["steps"]["make"]["bucket_name"] == "kept"
        await clock.advance(timedelta(days=2))
        await engine.retain()
        await until(lambda: engine.archived(wid), 10, "the composition run is archived")
        assert await engine.statuses([wid]) == []
        assert (await catalog.status(wid), await catalog.history(wid),
                await catalog.history(wid, include_state_data=True)) == live
        assert not any(k in h for h in live[1] for k in ("input", "output", "error", "state_data"))


async def test_a_bare_registration_journals_its_result_as_it_is(open_engine):
    registry = Registry()

    @registry.workflow("plain")
    async def plain(ctx: Context) -> str:
        return None  # type: ignore[return-value]  # the core contract's own example does this

    @registry.workflow("typed", description="The same, declared in the catalog.")
    async def typed(ctx: Context) -> str:
        return None  # type: ignore[return-value]

    async with open_engine(registry) as engine:
        assert await engine.result(await engine.start("plain"), timeout=10) is None
        with pytest.raises(OutputInvalid, match="output: Input should be a valid string"):
            await engine.result(await engine.start("typed"), timeout=10)
        # both have an output schema in the catalog
        assert (await Catalog(engine).schema("plain"))["output_schema"] == {"type": "string"}


@dataclass
class Point:
    x: int
    y: int = 0


class Owner(BaseModel):
    name: str
    email: str


class Limits(TypedDict):
    cpu: int


async def test_a_model_a_dataclass_and_a_typed_dict_input_reach_the_function_as_their_types(open_engine):
    registry = Registry()
    seen: list[tuple[str, str, str]] = []

    @registry.workflow("geo.place", description="Places a point for an owner.")
    async def place(ctx: Context, at: Point, owner: Owner, limits: Limits, note: str = "") -> dict[str, int]:
        seen.append((type(at).__name__, type(owner).__name__, type(limits).__name__))
        return {"sum": at.x + at.y + limits["cpu"] + len(owner.name)}

    async with open_engine(registry) as engine:
        catalog = Catalog(engine)
        with pytest.raises(InputsInvalid) as bad:
            await catalog.start("geo.place", {"at": {"x": "no"}, "owner": {"name": "a"}, "limits": {}})
        assert {"at.x: Input should be a valid integer, unable to parse string as an integer", "owner.email is required", "limits.cpu is required"} \
            <= set(bad.value.problems)
        assert len(await engine.list()) == 0
        wid = (await catalog.start("geo.place", {"at": {"x": 2, "y": 3}, "owner": {"name": "ann", "email": "a@x"},
                                                 "limits": {"cpu": 4}}))["workflow_id"]
        assert await engine.result(wid, timeout=10) == {"sum": 12}
        assert seen == [("Point", "Owner", "dict")]
        # arguments journaled as JSON that do not fit (a start that bypassed the catalog) fail the run
        broken = await engine.start("geo.place", {"x": "no"}, {"name": "b", "email": "b@x"}, {"cpu": 1})
        with pytest.raises(Exception, match="at.x: Input should be a valid integer"):
            await engine.result(broken, timeout=10)
        assert (await catalog.status(broken))["reason"]["code"] == "INPUT_INVALID"


async def test_a_run_started_before_its_parameters_were_typed_replays_with_its_json(open_engine):
    seen: list[str] = []

    def versions(typed: bool) -> Registry:
        registry = Registry()
        meta = {"description": "Waits, then places a point."} if typed else {}

        @registry.workflow("geo.later", **meta)
        async def later(ctx: Context, at: Point) -> int:
            await ctx.receive("go")
            seen.append(type(at).__name__)
            return int(at["x"] if isinstance(at, dict) else at.x)

        return registry

    async with open_engine(versions(typed=False)) as engine:  # the code before: a bare registration
        eid = await engine.start("geo.later", {"x": 7})
        from ..engine.conftest import wait_status

        await wait_status(engine, eid, "suspended")
        assert "typed" not in (await engine.journal(eid))[0].value
    async with open_engine(versions(typed=True)) as engine:  # the deploy types the parameter
        await engine.signal(eid, "go", True)
        assert await engine.result(eid, timeout=10) == 7
        fresh = await engine.start("geo.later", {"x": 8})
        await wait_status(engine, fresh, "suspended")
        assert (await engine.journal(fresh))[0].value["typed"] is True
        await engine.signal(fresh, "go", True)
        assert await engine.result(fresh, timeout=10) == 8
    assert seen == ["dict", "Point"]
