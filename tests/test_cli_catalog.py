"""The catalog in the CLI, run as a user runs it (a subprocess on a real SQLite file):
``flowli types``, ``flowli type``, ``flowli compose validate|save``, ``flowli stuck``."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from . import forked
from .catalog.test_compositions import error_example, vw_demo

pytestmark = pytest.mark.e2e

APP = "tests.catalog.app:registry"


def flowli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "FLOWLI_TEST_EFFECTS": str(tmp_path / "effects")}
    return forked.run(["--db", f"sqlite:///{tmp_path / 'f.db'}", "--app", APP, *args], timeout=120, env=env)


def test_types_and_one_type(tmp_path):
    listed = flowli(tmp_path, "types", "--prefix", "aws.s3.", "--json")
    assert listed.returncode == 0, listed.stderr
    names = [t["name"] for t in json.loads(listed.stdout)]
    assert "aws.s3.create_bucket" in names and all(n.startswith("aws.s3.") for n in names)
    table = flowli(tmp_path, "types", "-q", "versioning")
    assert "aws.s3.enable_versioning" in table.stdout and "aws.s3.create_bucket" not in table.stdout
    one = json.loads(flowli(tmp_path, "type", "aws.s3.create_bucket").stdout)
    assert one["fields"] == [{"name": "bucket", "type": "string", "required": True}]
    assert one["dag"][0]["steps"][0]["workflow_type"] == "aws.s3.create_bucket"
    unknown = flowli(tmp_path, "type", "aws.s3.create_buckt")
    assert unknown.returncode == 2 and "did you mean 'aws.s3.create_bucket'?" in unknown.stderr
    assert "Traceback" not in unknown.stderr


def test_compose_validate_and_save(tmp_path):
    good, bad = tmp_path / "demo.json", tmp_path / "bad.json"
    good.write_text(json.dumps(vw_demo()))
    broken = vw_demo()
    broken["layers"][1]["steps"][0]["workflow_type"] = "aws.s3.put_bucket_taging"
    bad.write_text(json.dumps(broken))
    refused = flowli(tmp_path, "compose", "validate", str(bad))
    assert refused.returncode == 2 and error_example()["errors"][0] in refused.stdout
    as_json = flowli(tmp_path, "compose", "validate", str(bad), "--json")
    assert json.loads(as_json.stdout) == error_example()
    assert flowli(tmp_path, "compose", "validate", str(good)).returncode == 0
    saved = flowli(tmp_path, "compose", "save", str(good))
    assert saved.returncode == 0, saved.stderr
    assert saved.stdout.startswith("virtual.vw_demo@1.0 saved (sha256:")
    again = flowli(tmp_path, "compose", "save", str(good))
    assert "virtual.vw_demo@1.0 saved already" in again.stdout
    not_json = tmp_path / "x.json"
    not_json.write_text("{oops")
    failed = flowli(tmp_path, "compose", "save", str(not_json))
    assert failed.returncode == 2 and "the definition is not JSON" in failed.stderr
    missing = flowli(tmp_path, "compose", "save", str(tmp_path / "nope.json"))
    assert missing.returncode == 2 and "cannot read the composition" in missing.stderr


def test_stuck_says_what_a_run_waits_on(tmp_path):
    started = flowli(tmp_path, "start", "ops.await_clerk", '"sign"')
    assert started.returncode == 0, started.stderr
    found = json.loads(flowli(tmp_path, "stuck", "--older-than", "0", "--json").stdout)
    assert [r["workflow_type"] for r in found] == ["ops.await_clerk"]
    assert "no live worker serves queue 'default'" in found[0]["waiting_on"]["summary"]
    none = flowli(tmp_path, "stuck")
    assert "no run has been idle for 3600 s or more" in none.stdout
