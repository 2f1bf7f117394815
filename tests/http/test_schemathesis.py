"""schemathesis against ``/openapi.json`` of the shared ``flowli serve``: every route declares its
answers (their schemas and statuses), and a bounded number of generated requests per route, valid
and invalid, finds no 5xx, no answer outside its schema and no status the document does not list.
The test's application is seeded with a pipeline, a job, a schedule, a policy and a run, whose ids
the generator uses part of the time, so that requests reach the routes' logic and not only 404."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from ..served import Names, Service, log_checked

pytestmark = pytest.mark.e2e

CHECKS = "not_a_server_error,response_schema_conformance,status_code_conformance,content_type_conformance"
EXAMPLES = 8
"""Generated requests per route and mode (valid, invalid): about 12 s a backend on two cores."""


async def seed(http: httpx.AsyncClient) -> dict[str, Any]:
    """A pipeline of two stages (the first one's job pulled by a worker), a schedule that fires
    once a year, a policy and a finished catalog run: the ids a request may name."""
    boot = (await http.post("/workers/bootstrap", json={"workerName": "fuzzed", "supportedHandlers": ["Fuzz"]})).json()
    session = {"X-Worker-Session": boot["workerSessionToken"]}
    made = await http.post("/pipelines", json={"name": "fuzzed", "stages": [
        {"stageName": "first", "stageHandlerName": "Fuzz", "input": "{}"},
        {"stageName": "second", "stageHandlerName": "Fuzz"}]})
    assert made.status_code == 200, made.text
    pipeline = made.json()
    job = await http.post("/jobs/pull", json={"waitSeconds": 10}, headers=session)
    assert job.status_code == 200, job.text
    schedule = await http.post("/schedules", json={"name": "yearly", "cron": "0 0 1 1 *", "pipeline": {
        "name": "scheduled", "stages": [{"stageName": "only", "stageHandlerName": "Fuzz"}]}})
    policy = await http.post("/policies", json={"name": "retry", "rules": {"maxRetries": 1, "intervalSeconds": 1}})
    run = await http.post("/catalog/runs", json={"workflow_type": "aws.s3.list_buckets", "inputs": {}})
    assert (schedule.status_code, policy.status_code, run.status_code) == (201, 201, 201)
    return {"session": boot["workerSessionToken"], "pipeline": pipeline["id"],
            "stages": [s["id"] for s in pipeline["stages"]], "execution": job.json()["executionId"],
            "token": job.json()["token"], "schedule": schedule.json()["id"], "policy": policy.json()["id"],
            "run": run.json()["workflow_id"]}


def config(seeded: dict[str, Any]) -> str:
    """schemathesis's configuration: the seeded ids as dictionaries, used by half the requests;
    a long poll never waits (``waitSeconds`` 0)."""
    dictionaries = {"pipelines": [str(seeded["pipeline"])], "stages": [str(s) for s in seeded["stages"]],
                    "stage_ids": seeded["stages"], "executions": [seeded["execution"]], "tokens": [seeded["token"]],
                    "schedules": [str(seeded["schedule"])], "policies": [str(seeded["policy"])],
                    "runs": [seeded["run"]], "types": ["aws.s3.list_buckets"], "zero": [0]}
    bound = {"path.pipeline_id": "pipelines", "path.stage_id": "stages", "body.stageId": "stage_ids",
             "body.executionId": "executions", "body.token": "tokens", "path.schedule_id": "schedules",
             "path.policy_id": "policies", "path.workflow_id": "runs", "path.name": "types",
             "body.workflow_type": "types"}
    lines = []
    for name, values in dictionaries.items():
        lines += [f"[dictionaries.{name}]", f"values = {json.dumps(values)}", ""]
    lines.append("[parameters]")
    lines += [f'"{key}" = {{ dictionary = "{name}", probability = 0.5 }}' for key, name in bound.items()]
    lines.append('"body.waitSeconds" = { dictionary = "zero", probability = 1.0 }')
    return "\n".join(lines) + "\n"


def fuzz(service: Service, key: str, session: str, config_file: Path, *only: str) -> str:
    """``st run`` against the server: the routes ``only`` names, else every route but the worker's
    shutdown (which would end the session the others use)."""
    st = Path(sys.executable).with_name("st")
    chosen = [arg for path in only for arg in ("--include-path", path)] or ["--exclude-path", "/workers/shutdown"]
    done = subprocess.run(
        [str(st), "--config-file", str(config_file), "run", f"{service.url}/openapi.json", "-H", f"X-API-Key: {key}",
         "-H", f"X-Worker-Session: {session}", "-n", str(EXAMPLES), "--checks", CHECKS, "--phases", "examples,fuzzing",
         "--mode", "all", "--generation-deterministic", "--request-timeout", "30", "-w", "1", "--no-color", *chosen],
        capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    summary = done.stdout[done.stdout.index("SUMMARY"):]
    cases = summary.split("Test cases:")[1].splitlines()[1]
    assert "generated" in cases and "failed" not in cases, summary
    return summary


def test_every_route_declares_an_answer_schema(service: Service):
    doc = httpx.get(f"{service.url}/openapi.json").json()
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            successes = {code: r for code, r in op["responses"].items() if code.startswith("2")}
            assert successes, (method, path)
            for code, answer in successes.items():
                if code == "204":  # no content
                    continue
                schemas = [c.get("schema") for c in answer.get("content", {}).values()]
                assert schemas and all(schemas), (method, path, code, answer)
            if path not in ("/healthz", "/openapi.json"):
                assert {"400", "401", "404", "413"} <= set(op["responses"]), (method, path)


def test_every_route_says_what_it_does_and_which_credential_it_takes(service: Service):
    doc = httpx.get(f"{service.url}/openapi.json").json()
    schemes = doc["components"]["securitySchemes"]
    assert (schemes["workerSession"]["in"], schemes["workerSession"]["name"]) == ("header", "X-Worker-Session")
    assert (schemes["apiKey"]["in"], schemes["apiKey"]["name"]) == ("header", "X-API-Key")
    assert schemes["bearer"] == {**schemes["bearer"], "type": "http", "scheme": "bearer"}
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            assert len(op.get("description") or "") > 10, (method, path)
            if path == "/healthz":
                continue
            credential = "workerSession" if path.startswith(("/jobs/", "/stages/{stage_id}/lease", "/stages/results",
                                                             "/stages/{stage_id}/result")) \
                or path in ("/workers/heartbeat", "/workers/shutdown") else "apiKey"
            assert op["security"] == [{credential: []}, {"bearer": []}], (method, path, op.get("security"))


async def test_no_route_answers_5xx_or_outside_its_schema(service: Service, names: Names, tmp_path: Path):
    _, key, _ = await service.application(names("fuzzed"))
    async with httpx.AsyncClient(base_url=service.url, headers={"X-API-Key": key}, timeout=30) as http:
        seeded = await seed(http)
        config_file = tmp_path / "schemathesis.toml"
        config_file.write_text(config(seeded))
        started = time.monotonic()
        try:
            with log_checked(service):
                summary = fuzz(service, key, seeded["session"], config_file)
                assert "Tested: " in summary
                fuzz(service, key, seeded["session"], config_file, "/workers/shutdown")
        finally:
            # the schedules the generator made would fire on the shared server for the rest of the session
            for schedule in (await http.get("/schedules")).json():
                await http.delete(f"/schedules/{schedule['id']}")
        # bounded: a few seconds a route at most (no route waits out a long poll or a lease); 40 s
        # on a slow two-core machine, 75 s there with a second suite running beside it
        assert time.monotonic() - started < 100
