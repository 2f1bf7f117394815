"""Compositions: the reference's authoring example and error example, read from the reference at
test time and checked verbatim; the three validation phases; compile and its content hash;
``composition.save`` and ``virtual.<name>@<version>`` runs with data threaded between layers."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from flowli.catalog import (
    COMPILED_FORMAT_VERSION,
    Catalog,
    CompositionConflict,
    CompositionInvalid,
    compile_definition,
    content_hash,
)
from flowli.domain import UnknownExecutionError, keyed_eid

from .app import app, effects

pytestmark = pytest.mark.integration

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "catalog-and-compositions.md"
COPY = Path(__file__).with_name("reference") / "catalog-and-compositions.md"
REFERENCE = SHARED if SHARED.is_file() else COPY


def test_the_kept_copy_of_the_reference_is_the_reference():
    assert COPY.is_file()
    if SHARED.is_file():
        assert COPY.read_text() == SHARED.read_text(), "the reference changed: copy it to tests/catalog/reference/"


def json_blocks() -> list[Any]:
    return [json.loads(b) for b in re.findall(r"```json\n(.*?)```", REFERENCE.read_text(), re.S)]


def vw_demo() -> dict[str, Any]:
    [demo] = [b for b in json_blocks() if isinstance(b, dict) and b.get("name") == "vw_demo"]
    return demo


def error_example() -> dict[str, Any]:
    [example] = [b for b in json_blocks() if isinstance(b, dict) and "errors" in b]
    return example


async def test_the_reference_authoring_example_validates_saves_and_runs(open_engine):
    async with open_engine(app()) as engine:
        catalog = Catalog(engine)
        demo = vw_demo()
        assert await catalog.validate_composition(demo) == {"errors": [], "warnings": []}
        saved = await catalog.save_composition(demo)
        assert saved["workflow_type"] == "virtual.vw_demo@1.0" and saved["created"] is True
        assert saved["content_hash"] == content_hash(demo) and saved["content_hash"].startswith("sha256:")
        # not a type of the catalog, but a saved composition of this application
        assert "virtual.vw_demo@1.0" not in [t["name"] for t in await catalog.types()]
        assert await catalog.types(prefix="virtual.") == []
        [listed] = await catalog.compositions()
        assert listed["workflow_type"] == "virtual.vw_demo@1.0" and listed["content_hash"] == saved["content_hash"]
        run = await catalog.start("virtual.vw_demo@1.0", {"bucket_name": "demo-1"})
        await engine.result(run["workflow_id"], timeout=20)
        status = await catalog.status(run["workflow_id"])
        assert status["status"] == "COMPLETED" and status["workflow_type"] == "virtual.vw_demo@1.0"
        # data threaded between layers: s2 tagged the bucket s1 created, with the static tag set
        assert status["output"] == {"s2": {"bucket": "demo-1", "tags": 1}}
        assert status["state_data"]["steps"]["s1"] == {"bucket_name": "demo-1", "arn": "arn:aws:s3:::demo-1"}
        assert status["steps"] == [{"name": "s1", "layer": "layer_1", "status": "COMPLETED"},
                                   {"name": "s2", "layer": "layer_2", "status": "COMPLETED"}]
        assert effects() == ["create:demo-1", "tag:demo-1"]
        dag = await catalog.dag("virtual.vw_demo@1.0")
        assert dag["layers"] == [{"name": "layer_1", "steps": [{"name": "s1", "workflow_type": "aws.s3.create_bucket"}]},
                                 {"name": "layer_2", "steps": [{"name": "s2", "workflow_type": "aws.s3.put_bucket_tagging"}]}]
        schema = await catalog.schema("virtual.vw_demo@1.0")
        assert schema["input_schema"]["required"] == ["bucket_name"] and schema["workflow_kind"] == "dag"
        listed_runs = (await catalog.list(workflow_type="virtual.vw_demo@1.0"))["runs"]
        assert [r["workflow_id"] for r in listed_runs] == [run["workflow_id"]]


async def test_the_reference_error_example_verbatim(open_engine):
    async with open_engine(app()) as engine:
        catalog = Catalog(engine)
        demo = vw_demo()
        demo["layers"][1]["steps"][0]["workflow_type"] = "aws.s3.put_bucket_taging"
        assert await catalog.validate_composition(demo) == error_example()
        with pytest.raises(CompositionInvalid):
            await catalog.save_composition(demo)
        assert await catalog.compositions() == [] and len(await engine.list()) == 0  # nothing stored


def test_compile_gives_the_reference_compiled_form():
    compiled = compile_definition(vw_demo())
    assert compiled["type"] == "dag"
    assert compiled["metadata"] == {"content_hash": content_hash(vw_demo()),
                                    "compiled_format_version": COMPILED_FORMAT_VERSION}
    s1 = compiled["layers"][0]["steps"][0]
    s2 = compiled["layers"][1]["steps"][0]
    assert s1["input"] == {"bucket": {"$input": "bucket_name"}} and s1["state_data"] == {}
    assert s2["input"] == {"tagging": {"TagSet": [{"Key": "env", "Value": "demo"}]}}
    assert s2["state_data"] == {"bucket": {"step": "s1", "field": "bucket_name"}}
    # the same definition always gives the same hash; key order does not matter, content does
    reordered = json.loads(json.dumps(vw_demo(), sort_keys=True))
    assert content_hash(reordered) == content_hash(vw_demo())
    changed = vw_demo()
    changed["layers"][1]["steps"][0]["input_mapping"]["tagging"]["value"]["TagSet"][0]["Value"] = "prod"
    assert content_hash(changed) != content_hash(vw_demo())


async def test_saving_twice_is_one_save_and_a_changed_definition_is_refused(open_engine):
    async with open_engine(app()) as engine:
        catalog = Catalog(engine)
        first = await catalog.save_composition(vw_demo())
        # composition.save is itself a registered state_machine workflow, and the save one of its runs
        assert (await catalog.schema("composition.save"))["workflow_kind"] == "state_machine"
        saved_run = await engine.status(first["workflow_id"])
        assert (saved_run.workflow, saved_run.status.value) == ("composition.save", "completed")
        again = await catalog.save_composition(json.dumps(vw_demo()))  # as JSON text too
        assert again["workflow_id"] == first["workflow_id"] and len(await catalog.compositions()) == 1
        changed = vw_demo()
        changed["layers"][1]["steps"][0]["input_mapping"]["tagging"]["value"]["TagSet"][0]["Value"] = "prod"
        with pytest.raises(CompositionConflict, match="composition 'vw_demo' version '1.0' is saved already with"
                                                      " another definition"):
            await catalog.save_composition(changed)
        [kept] = await catalog.compositions()
        assert kept["content_hash"] == first["content_hash"]
        with pytest.raises(UnknownExecutionError):  # refused before anything ran: no failed save left behind
            await engine.status(keyed_eid("composition.save", content_hash(changed)))
        changed["version"] = "1.1"  # a new version is a new type
        newer = await catalog.save_composition(changed)
        assert newer["workflow_type"] == "virtual.vw_demo@1.1" and len(await catalog.compositions()) == 2


def mutate(demo: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(demo)
    target = out
    for p in path[:-1]:
        target = target[p]
    target[path[-1]] = value
    return out


@pytest.mark.parametrize(("path", "value", "expected"), [
    (["layers", 1, "steps", 0, "input_mapping", "bucket", "field"], "bucket_nam",
     "step 's2': input 'bucket' maps field 'bucket_nam' of step 's1', which its output (aws.s3.create_bucket) does"
     " not have; it has bucket_name, arn"),
    (["layers", 0, "steps", 0, "input_mapping", "bucket"], {"source": "step", "step": "s2", "field": "bucket"},
     "step 's1': input 'bucket' maps step 's2', which is not in an earlier layer (a cycle, or a step of the same"
     " layer)"),
    (["layers", 1, "steps", 0, "name"], "s1", "step 's1': the name is used by another step"),
    (["layers", 1, "name"], "layer_1", "layer 'layer_1': the name is used by another layer"),
    (["layers", 1, "steps", 0, "input_mapping", "tagging", "value"], "not-a-dict",
     "step 's2': static value of input 'tagging' does not fit its schema: tagging: Input should be a valid dictionary"),
    (["layers", 0, "steps", 0, "input_mapping"], {}, "step 's1': required input 'bucket' of 'aws.s3.create_bucket'"
                                                      " is not mapped"),
    (["layers", 0, "steps", 0, "input_mapping", "colour"], {"source": "static", "value": 1},
     "step 's1': 'colour' is not a parameter of 'aws.s3.create_bucket' (it takes bucket)"),
    (["layers", 0, "steps", 0, "input_mapping", "bucket"], {"source": "env", "field": "x"},
     "step 's1': input 'bucket' needs a source of input, step or static, got {'source': 'env', 'field': 'x'}"),
    (["layers", 1, "steps"], [], "layer 'layer_2': steps must be a non-empty list of steps"),
    (["layers"], "all", "composition: layers must be a non-empty list of layers"),
])
async def test_each_bad_composition_gets_its_sentence(open_engine, path, value, expected):
    async with open_engine(app(), worker=False) as engine:
        result = await Catalog(engine).validate_composition(mutate(vw_demo(), path, value))
        assert expected in result["errors"], result


async def test_an_input_field_used_with_two_types_and_warnings(open_engine):
    async with open_engine(app(), worker=False) as engine:
        catalog = Catalog(engine)
        definition = {"name": "two", "version": "1", "layers": [
            {"name": "a", "steps": [
                {"name": "make", "workflow_type": "aws.s3.create_bucket",
                 "input_mapping": {"bucket": {"source": "input", "field": "x"}}},
                {"name": "ver", "workflow_type": "aws.s3.enable_versioning",
                 "input_mapping": {"bucket": {"source": "static", "value": "b"},
                                   "count": {"source": "input", "field": "x"}}}]},
            {"name": "b", "steps": [{"name": "last", "workflow_type": "aws.s3.list_buckets", "input_mapping": {}}]}]}
        result = await catalog.validate_composition(definition)
        assert result["errors"] == ["step 'ver': input field 'x' is used as integer here and as string by step 'make'"]
        assert result["warnings"] == ["step 'last': optional input 'prefix' is not mapped; its default applies",
                                      "step 'make': its output is used by no later step",
                                      "step 'ver': its output is used by no later step"]
        assert (await catalog.validate_composition("{not json"))["errors"][0].startswith(
            "composition: the definition is not JSON")
        assert (await catalog.validate_composition([1]))["errors"] == [
            "composition: the definition must be a JSON object, got list"]


DROP = object()
"""In an edit of ``edited``: remove the key instead of setting it."""


def edited(demo: dict[str, Any], *edits: tuple[list[Any], Any]) -> dict[str, Any]:
    out = copy.deepcopy(demo)
    for path, value in edits:
        target = out
        for p in path[:-1]:
            target = target[p]
        if value is DROP:
            del target[path[-1]]
        else:
            target[path[-1]] = value
    return out


S1_UNUSED = "step 's1': its output is used by no later step"


@pytest.mark.parametrize(("edits", "errors", "warnings"), [
    # compatibility: a step field whose type does not fit the parameter it is mapped to
    ([(["layers", 1, "steps", 0, "input_mapping", "tagging"], {"source": "step", "step": "s1", "field": "arn"})],
     ["step 's2': input 'tagging' is object, but field 'arn' of step 's1' is string"], []),
    ([(["layers", 0, "steps", 0, "workflow_type"], "aws.s3.enable_versioning"),
      (["layers", 1, "steps", 0, "input_mapping", "bucket", "field"], "count")],
     ["step 's2': input 'bucket' is string, but field 'count' of step 's1' is integer"],
     ["step 's1': optional input 'count' is not mapped; its default applies"]),
    # structure: a step source naming no step of the composition, or the step itself
    ([(["layers", 1, "steps", 0, "input_mapping", "bucket", "step"], "s9")],
     ["step 's2': input 'bucket' maps step 's9', which is not a step of this composition"], [S1_UNUSED]),
    ([(["layers", 1, "steps", 0, "input_mapping", "bucket"], {"source": "step", "step": "s2", "field": "bucket"})],
     ["step 's2': input 'bucket' maps step 's2', itself: a cycle"], [S1_UNUSED]),
    ([(["layers", 0, "steps", 0, "input_mapping", "bucket"], {"source": "step", "step": "s1", "field": "arn"})],
     ["step 's1': input 'bucket' maps step 's1', itself: a cycle"], []),
    # the authoring shape: unknown fields, a missing name or version
    ([(["colour"], "red")], ["composition: unknown field 'colour' (a definition has name, version, layers)"], []),
    ([(["layers", 0, "parallel"], True)], ["layer 'layer_1': unknown field 'parallel' (a layer has name, steps)"], []),
    ([(["layers", 0, "steps", 0, "retries"], 3)],
     ["step 's1': unknown field 'retries' (a step has name, workflow_type, input_mapping)"], []),
    ([(["name"], DROP)], ["composition: name must be a non-empty string, got None"], []),
    ([(["version"], DROP)], ["composition: version must be a non-empty string, got None"], []),
    ([(["version"], "  ")], ["composition: version must be a non-empty string, got '  '"], []),
    ([(["name"], DROP), (["version"], DROP)], ["composition: name must be a non-empty string, got None",
                                               "composition: version must be a non-empty string, got None"], []),
], ids=["step-field-type", "step-field-integer-into-string", "not-a-step", "itself", "itself-in-the-first-layer",
        "unknown-definition-field", "unknown-layer-field", "unknown-step-field", "no-name", "no-version", "blank-version",
        "no-name-no-version"])
async def test_more_bad_compositions_get_their_exact_sentences(open_engine, edits, errors, warnings):
    async with open_engine(app(), worker=False) as engine:
        catalog = Catalog(engine)
        definition = edited(vw_demo(), *edits)
        result = await catalog.validate_composition(definition)
        assert result == {"errors": errors, "warnings": warnings}
        assert await catalog.validate_composition(json.dumps(definition)) == result  # as JSON text too
        # validating stores nothing, and a save is refused with the same sentences before anything runs
        assert await catalog.compositions() == [] and len(await engine.list()) == 0
        with pytest.raises(CompositionInvalid) as refused:
            await catalog.save_composition(definition)
        assert refused.value.errors == errors
        assert await catalog.compositions() == [] and len(await engine.list()) == 0
