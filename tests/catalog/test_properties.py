"""Properties of compositions: a random valid composition compiles to the same hash every time
and runs to COMPLETED; a random single-field mutation of one gives at least one error whose text
names the mutated step."""

from __future__ import annotations

import asyncio
import copy
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import flowli
from flowli.catalog import Catalog, compile_definition, validate

from .app import app

REGISTRY = app()
OUT_FIELD = {"aws.s3.create_bucket": "bucket_name", "aws.s3.enable_versioning": "bucket",
             "aws.s3.put_bucket_tagging": "bucket"}


@st.composite
def compositions(draw: Any) -> dict[str, Any]:
    layers: list[dict[str, Any]] = []
    earlier: list[tuple[str, str]] = []  # (step, its type) of the layers before
    n = 0
    for li in range(draw(st.integers(1, 3))):
        steps = []
        for _ in range(draw(st.integers(1, 3))):
            n += 1
            name = f"s{n}"
            wtype = draw(st.sampled_from(sorted(OUT_FIELD)))
            source = draw(st.sampled_from(["input", "static", "step"] if earlier else ["input", "static"]))
            if source == "input":
                bucket = {"source": "input", "field": "bucket"}
            elif source == "static":
                bucket = {"source": "static", "value": draw(st.sampled_from(["alpha", "beta"]))}
            else:
                other, otype = draw(st.sampled_from(earlier))
                bucket = {"source": "step", "step": other, "field": OUT_FIELD[otype]}
            mapping: dict[str, Any] = {"bucket": bucket}
            if wtype == "aws.s3.put_bucket_tagging":
                mapping["tagging"] = {"source": "static", "value": {"TagSet": [{"Key": "k", "Value": "v"}]}}
            if wtype == "aws.s3.enable_versioning" and draw(st.booleans()):
                mapping["count"] = {"source": "static", "value": draw(st.integers(0, 9))}
            steps.append({"name": name, "workflow_type": wtype, "input_mapping": mapping})
        layers.append({"name": f"layer_{li + 1}", "steps": steps})
        earlier += [(s["name"], s["workflow_type"]) for s in steps]
    return {"name": f"prop_{n}", "version": "1", "layers": layers}


def steps_of(d: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for layer in d["layers"] for s in layer["steps"]]


async def run_one(definition: dict[str, Any], tmp: Path) -> dict[str, Any]:
    engine = await flowli.connect(f"sqlite:///{tmp / 'p.db'}", app(), bucket=str(tmp / "bucket"),
                                  poll_interval=0.05, sweep_interval=0.05)
    async with engine, engine.worker(concurrency=16):
        catalog = Catalog(engine)
        saved = await catalog.save_composition(definition)
        uses_input = any(s["input_mapping"]["bucket"]["source"] == "input" for s in steps_of(definition))
        inputs = {"bucket": "input-bucket"} if uses_input else {}
        wid = (await catalog.start(saved["workflow_type"], inputs))["workflow_id"]
        await engine.result(wid, timeout=30)
        return await catalog.status(wid)


@pytest.mark.integration
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(compositions())
def test_a_valid_composition_compiles_to_one_hash_and_runs_to_completed(definition):
    v = validate(REGISTRY, definition)
    assert v.errors == [], v.errors
    first = compile_definition(definition)
    again = compile_definition(json.loads(json.dumps(definition)))
    assert first == again and first["metadata"]["content_hash"] == again["metadata"]["content_hash"]
    with tempfile.TemporaryDirectory() as tmp:
        status = asyncio.run(run_one(definition, Path(tmp)))
    assert status["status"] == "COMPLETED", status
    assert {s["name"] for s in status["steps"] if s["status"] == "COMPLETED"} == {s["name"] for s in steps_of(definition)}


MUTATIONS = ("workflow_type", "source_field", "step_ref", "param_name", "static_type", "duplicate_name")


@pytest.mark.unit
@settings(max_examples=150, deadline=None)
@given(compositions(), st.sampled_from(MUTATIONS), st.data())
def test_a_single_field_mutation_is_an_error_naming_the_mutated_step(definition, mutation, data):
    d = copy.deepcopy(definition)
    candidates = steps_of(d)
    if mutation in ("source_field", "step_ref"):
        candidates = [s for s in candidates if s["input_mapping"]["bucket"]["source"] == "step"]
    elif mutation == "duplicate_name":
        candidates = candidates[1:]
    assume(candidates)  # a composition without such a step is no example of this mutation
    step = data.draw(st.sampled_from(candidates))
    mapping = step["input_mapping"]
    if mutation == "workflow_type":
        step["workflow_type"] += "x"
    elif mutation == "source_field":
        mapping["bucket"]["field"] = "no_such_field"
    elif mutation == "step_ref":
        mapping["bucket"]["step"] = step["name"]  # itself: a cycle
    elif mutation == "param_name":
        mapping["bucket_id"] = mapping.pop("bucket")
    elif mutation == "static_type":
        mapping["bucket"] = {"source": "static", "value": 42}
    else:
        step["name"] = steps_of(d)[0]["name"]
    errors = validate(REGISTRY, d).errors
    assert any(e.startswith(f"step '{step['name']}': ") for e in errors), (mutation, errors)
