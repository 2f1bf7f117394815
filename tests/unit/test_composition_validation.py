"""Composition validation and compilation (``validate``, ``compile_definition`` and
``content_hash`` of ``flowli.catalog``) against a registry built here, without an engine: each
kind of error and warning with its exact sentence, the phases' order, the compiled form and the
stability of the content hash."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import pytest
from pydantic import BaseModel
from typing_extensions import TypedDict

from flowli import Context, Registry
from flowli.catalog import COMPILED_FORMAT_VERSION, compile_definition, content_hash, validate

pytestmark = pytest.mark.unit


class BucketOut(BaseModel):
    bucket_name: str
    arn: str


class Versioned(TypedDict):
    bucket: str
    versioning: str
    count: int


class Tagged(TypedDict):
    bucket: str
    tags: int


def catalog() -> Registry:
    registry = Registry()

    @registry.workflow("aws.s3.create_bucket")
    async def create_bucket(ctx: Context, bucket: str) -> BucketOut:
        raise NotImplementedError

    @registry.workflow("aws.s3.put_bucket_tagging")
    async def put_bucket_tagging(ctx: Context, bucket: str, tagging: dict[str, Any]) -> Tagged:
        raise NotImplementedError

    @registry.workflow("aws.s3.enable_versioning")
    async def enable_versioning(ctx: Context, bucket: str, count: int = 1) -> Versioned:
        raise NotImplementedError

    @registry.workflow("aws.s3.list_buckets")
    async def list_buckets(ctx: Context, prefix: str = "") -> list[str]:
        raise NotImplementedError

    @registry.workflow("ops.scale")
    async def scale(ctx: Context, ratio: float, note: str | None = None) -> dict[str, Any]:
        raise NotImplementedError

    @registry.workflow("ops.ping")
    async def ping(ctx: Context) -> None:
        raise NotImplementedError

    return registry


REGISTRY = catalog()


def demo() -> dict[str, Any]:
    """Create a bucket named by the composition's input, then tag it."""
    return {"name": "demo", "version": "1.0", "layers": [
        {"name": "layer_1", "steps": [{"name": "s1", "workflow_type": "aws.s3.create_bucket", "input_mapping": {
            "bucket": {"source": "input", "field": "bucket_name"}}}]},
        {"name": "layer_2", "steps": [{"name": "s2", "workflow_type": "aws.s3.put_bucket_tagging", "input_mapping": {
            "bucket": {"source": "step", "step": "s1", "field": "bucket_name"},
            "tagging": {"source": "static", "value": {"TagSet": [{"Key": "env", "Value": "demo"}]}}}}]}]}


def edited(*edits: tuple[list[Any], Any]) -> dict[str, Any]:
    out = demo()
    for path, value in edits:
        target = out
        for p in path[:-1]:
            target = target[p]
        target[path[-1]] = value
    return out


def outcome(definition: Any, saved: bool = False) -> tuple[list[str], list[str]]:
    v = validate(REGISTRY, definition, saved)
    return v.errors, v.warnings


S1 = ["layers", 0, "steps", 0]
S2 = ["layers", 1, "steps", 0]


def test_the_demo_validates_without_errors_or_warnings():
    assert outcome(demo()) == ([], [])


# ---- phase 0: the authoring shape ---------------------------------------------------------------


def test_the_shape_of_the_definition_each_field_named():
    assert outcome([1]) == (["composition: the definition must be a JSON object, got list"], [])
    assert outcome("text") == (["composition: the definition must be a JSON object, got str"], [])
    assert outcome({"name": "x", "version": "1"}) == (["composition: layers must be a non-empty list of layers"], [])
    assert outcome({"name": "x", "version": "1", "layers": []}) == (
        ["composition: layers must be a non-empty list of layers"], [])
    broken = {"name": "a b", "layers": "all", "colour": "red", "after": 1}
    assert outcome(broken) == ([
        "composition: version must be a non-empty string, got None",
        "composition: name 'a b' may hold letters, digits, _ . - only",
        "composition: unknown field 'after' (a definition has name, version, layers)",  # the first, sorted
        "composition: layers must be a non-empty list of layers"], [])
    assert outcome(edited((["name"], ""), (["version"], 1)))[0] == [
        "composition: name must be a non-empty string, got ''",
        "composition: version must be a non-empty string, got 1"]
    assert outcome(edited((["description"], "Create and tag")))[0] == []


def test_the_shape_of_layers_and_steps_each_named_by_name_or_position():
    definition = {"name": "x", "version": "1", "layers": [
        {"name": "l", "steps": [1, {}, {"name": "x y"}, {"name": "s", "workflow_type": "t", "input_mapping": []}]},
        "L",
        {"steps": [{"name": "q", "workflow_type": "t", "input_mapping": {
            "a": {"source": "input"}, "b": {"source": "step", "step": ""}, "c": {"source": "static"},
            "d": {"source": "static", "value": {"$input": "x"}}, "e": {"source": "input", "field": "f", "value": 1},
            "f": {"source": "env", "field": "x"}, "g": "bucket"}}]},
        {"name": "e", "steps": []},
        {"name": "p", "parallel": True, "steps": [{"name": "r", "workflow_type": "t", "retries": 3}]}]}
    assert outcome(definition) == ([
        "layer 'l': step #1 must be an object with name, workflow_type and input_mapping",
        "layer 'l': step #2 needs a name",
        "step 'x y': the name may hold letters, digits, _ . - only",
        "step 'x y': workflow_type must be the name of a workflow type",
        "step 's': input_mapping must be an object of parameter: source",
        "layer '#2': a layer must be an object with name and steps",
        "layer '#3': name must be a non-empty string",
        "step 'q': input 'a' (source input) needs field",
        "step 'q': input 'b' (source step) needs step",
        "step 'q': input 'b' (source step) needs field",
        "step 'q': input 'c' (source static) needs value",
        "step 'q': input 'd': a static value may not hold the key $input",
        "step 'q': input 'e' (source input) has unknown field 'value'",
        "step 'q': input 'f' needs a source of input, step or static, got {'source': 'env', 'field': 'x'}",
        "step 'q': input 'g' needs a source of input, step or static, got 'bucket'",
        "layer 'e': steps must be a non-empty list of steps",
        "layer 'p': unknown field 'parallel' (a layer has name, steps)",
        "step 'r': unknown field 'retries' (a step has name, workflow_type, input_mapping)"], [])


def test_a_saved_definition_keeps_the_layer_fields_it_was_saved_with():
    with_extra = edited((["layers", 0, "parallel"], True))
    assert outcome(with_extra)[0] == ["layer 'layer_1': unknown field 'parallel' (a layer has name, steps)"]
    assert outcome(with_extra, saved=True) == ([], [])
    assert outcome(edited(([*S1, "retries"], 3)), saved=True)[0] == [  # a step's fields are checked still
        "step 's1': unknown field 'retries' (a step has name, workflow_type, input_mapping)"]


def test_a_shape_error_stops_before_the_other_phases():
    # an unknown type and a missing version: only the shape is reported
    assert outcome(edited((["version"], None), ([*S2, "workflow_type"], "nope")))[0] == [
        "composition: version must be a non-empty string, got None"]


# ---- phase 1: structure -------------------------------------------------------------------------


@pytest.mark.parametrize(("edits", "errors"), [
    ([(["layers", 1, "name"], "layer_1")], ["layer 'layer_1': the name is used by another layer"]),
    ([([*S2, "input_mapping", "bucket", "step"], "s9")],
     ["step 's2': input 'bucket' maps step 's9', which is not a step of this composition"]),
    # (the fields mapped below are fields of the step's own output: the structure alone is wrong)
    ([([*S2, "input_mapping", "bucket"], {"source": "step", "step": "s2", "field": "bucket"})],
     ["step 's2': input 'bucket' maps step 's2', itself: a cycle"]),
    ([([*S1, "input_mapping", "bucket"], {"source": "step", "step": "s2", "field": "bucket"})],
     ["step 's1': input 'bucket' maps step 's2', which is not in an earlier layer (a cycle, or a step of the same"
      " layer)"]),
], ids=["duplicate-layer", "not-a-step", "itself", "later-layer"])
def test_each_structural_error_names_the_step_or_layer(edits, errors):
    assert outcome(edited(*edits))[0] == errors


def test_a_step_name_used_twice_is_named():
    definition = demo()
    definition["layers"][1]["steps"].append(copy.deepcopy(definition["layers"][1]["steps"][0]))
    assert outcome(definition) == (["step 's2': the name is used by another step"], [])


def test_a_step_of_the_same_layer_is_not_earlier():
    definition = demo()
    definition["layers"][0]["steps"].append({"name": "s1b", "workflow_type": "aws.s3.enable_versioning",
                                             "input_mapping": {"bucket": {"source": "step", "step": "s1",
                                                                          "field": "bucket_name"}}})
    assert outcome(definition)[0] == [
        "step 's1b': input 'bucket' maps step 's1', which is not in an earlier layer (a cycle, or a step of the same"
        " layer)"]


# ---- phase 2: references ------------------------------------------------------------------------


def test_an_unknown_type_is_named_with_the_nearest_one_when_there_is_one():
    assert outcome(edited(([*S2, "workflow_type"], "aws.s3.put_bucket_taging")))[0] == [
        "step 's2': unknown workflow type 'aws.s3.put_bucket_taging'; did you mean 'aws.s3.put_bucket_tagging'?"]
    assert outcome(edited(([*S2, "workflow_type"], "billing.pay")))[0] == [
        "step 's2': unknown workflow type 'billing.pay'"]
    assert outcome(edited(([*S2, "workflow_type"], "flowli.dag")))[0] == [  # the engine's own are no types
        "step 's2': unknown workflow type 'flowli.dag'"]


# ---- phase 3: compatibility ---------------------------------------------------------------------


@pytest.mark.parametrize(("edits", "errors", "warnings"), [
    ([([*S1, "input_mapping"], {})],
     ["step 's1': required input 'bucket' of 'aws.s3.create_bucket' is not mapped"], []),
    ([([*S1, "input_mapping", "colour"], {"source": "static", "value": 1})],
     ["step 's1': 'colour' is not a parameter of 'aws.s3.create_bucket' (it takes bucket)"], []),
    ([([*S2, "input_mapping", "tagging", "value"], "not-a-dict")],
     ["step 's2': static value of input 'tagging' does not fit its schema: tagging: Input should be a valid"
      " dictionary"],
     []),
    ([([*S2, "input_mapping", "bucket", "field"], "bucket_nam")],
     ["step 's2': input 'bucket' maps field 'bucket_nam' of step 's1', which its output (aws.s3.create_bucket) does"
      " not have; it has bucket_name, arn"], []),
    ([([*S2, "input_mapping", "tagging"], {"source": "step", "step": "s1", "field": "arn"})],
     ["step 's2': input 'tagging' is object, but field 'arn' of step 's1' is string"], []),
    ([([*S1, "workflow_type"], "aws.s3.enable_versioning"), ([*S2, "input_mapping", "bucket", "field"], "count")],
     ["step 's2': input 'bucket' is string, but field 'count' of step 's1' is integer"],
     ["step 's1': optional input 'count' is not mapped; its default applies"]),
    ([([*S1, "workflow_type"], "aws.s3.list_buckets"), ([*S1, "input_mapping"], {})],
     ["step 's2': input 'bucket' maps field 'bucket_name' of step 's1', whose output (aws.s3.list_buckets) is array,"
      " not an object"], ["step 's1': optional input 'prefix' is not mapped; its default applies"]),
], ids=["required-unmapped", "not-a-parameter", "static-type", "missing-field", "object-from-string",
        "string-from-integer", "output-not-an-object"])
def test_each_compatibility_error_names_the_step_the_input_and_the_types(edits, errors, warnings):
    assert outcome(edited(*edits)) == (errors, warnings)


def test_a_type_without_parameters_takes_none():
    definition = demo()
    ping = {"name": "s3", "workflow_type": "ops.ping", "input_mapping": {"x": {"source": "static", "value": 1}}}
    definition["layers"].append({"name": "layer_3", "steps": [ping]})
    assert outcome(definition) == (["step 's3': 'x' is not a parameter of 'ops.ping' (it takes none)"],
                                   ["step 's2': its output is used by no later step"])


def test_an_integer_field_fits_a_number_and_an_open_object_is_not_checked():
    definition = demo()
    for n, (step, field) in enumerate([("s2", "tags"), ("s3", "anything")], start=3):
        ratio = {"source": "step", "step": step, "field": field}
        definition["layers"].append({"name": f"layer_{n}", "steps": [
            {"name": f"s{n}", "workflow_type": "ops.scale", "input_mapping": {"ratio": ratio}}]})
    assert outcome(definition) == ([], ["step 's3': optional input 'note' is not mapped; its default applies",
                                        "step 's4': optional input 'note' is not mapped; its default applies"])


def test_one_input_field_has_one_type_and_unused_outputs_are_warned_of():
    definition = {"name": "two", "version": "1", "layers": [
        {"name": "a", "steps": [
            {"name": "make", "workflow_type": "aws.s3.create_bucket",
             "input_mapping": {"bucket": {"source": "input", "field": "x"}}},
            {"name": "ver", "workflow_type": "aws.s3.enable_versioning",
             "input_mapping": {"bucket": {"source": "static", "value": "b"},
                               "count": {"source": "input", "field": "x"}}}]},
        {"name": "b", "steps": [{"name": "last", "workflow_type": "aws.s3.list_buckets", "input_mapping": {}}]}]}
    assert outcome(definition) == (
        ["step 'ver': input field 'x' is used as integer here and as string by step 'make'"],
        ["step 'last': optional input 'prefix' is not mapped; its default applies",
         "step 'make': its output is used by no later step", "step 'ver': its output is used by no later step"])


# ---- compilation and the content hash -----------------------------------------------------------


def test_compile_gives_each_step_its_inputs_its_state_data_and_the_stamp():
    assert compile_definition(demo()) == {
        "name": "demo", "version": "1.0", "type": "dag", "layers": [
            {"name": "layer_1", "steps": [{"name": "s1", "workflow_type": "aws.s3.create_bucket",
                                           "input": {"bucket": {"$input": "bucket_name"}}, "state_data": {}}]},
            {"name": "layer_2", "steps": [{"name": "s2", "workflow_type": "aws.s3.put_bucket_tagging",
                                           "input": {"tagging": {"TagSet": [{"Key": "env", "Value": "demo"}]}},
                                           "state_data": {"bucket": {"step": "s1", "field": "bucket_name"}}}]}],
        "metadata": {"content_hash": content_hash(demo()), "compiled_format_version": COMPILED_FORMAT_VERSION}}
    assert COMPILED_FORMAT_VERSION == 1
    no_mapping = {"name": "n", "version": "1", "layers": [{"name": "l", "steps": [
        {"name": "s", "workflow_type": "aws.s3.list_buckets", "description": "listed"}]}]}
    assert compile_definition(no_mapping)["layers"] == [{"name": "l", "steps": [
        {"name": "s", "workflow_type": "aws.s3.list_buckets", "input": {}, "state_data": {}}]}]


def test_the_content_hash_is_the_sha256_of_the_canonical_json():
    definition = {**demo(), "description": "Bucket – tagged"}
    canonical = json.dumps(definition, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert content_hash(definition) == "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
    # a saved composition is compared by this hash: it must not move between releases
    assert content_hash(definition) == "sha256:6b79699112d616f99d79708b1ca958f40c9cab46cda079cdd465aa3f66d9893f"


def test_the_hash_ignores_key_order_and_follows_any_change_of_content():
    reordered = json.loads(json.dumps(demo(), sort_keys=True))
    assert list(reordered) != list(demo()) and content_hash(reordered) == content_hash(demo())
    assert compile_definition(reordered) == compile_definition(demo())
    base = content_hash(demo())
    changes = [edited(([*S2, "input_mapping", "tagging", "value", "TagSet", 0, "Value"], "prod")),
               edited((["version"], "1.1")),
               edited((["description"], "")),
               edited(([*S1, "input_mapping", "bucket", "field"], "bucket")),
               {**demo(), "layers": list(reversed(demo()["layers"]))}]  # layer order is content
    hashes = [content_hash(c) for c in changes]
    assert base not in hashes and len(set(hashes)) == len(hashes)
    assert content_hash(copy.deepcopy(demo())) == base
