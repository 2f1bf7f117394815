"""schemathesis against ``/openapi.json`` of a real ``flowli serve``: a fixed number of examples
per route finds no 5xx and no response that contradicts the schema."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ..served import Service, application, serving

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_no_route_answers_5xx_or_contradicts_its_schema(backend, tmp_path):
    # a server of its own: the fuzzed requests leave schedules firing and workers registered,
    # which would load the shared server for every later test
    async with serving(backend, tmp_path) as service:
        _, key, _ = await application(service.db, "billing")
        check(service, key)


def check(service: Service, key: str) -> None:
    st = Path(sys.executable).with_name("st")
    done = subprocess.run(
        [str(st), "run", f"{service.url}/openapi.json", "-H", f"X-API-Key: {key}", "-n", "10",
         "--checks", "not_a_server_error,response_schema_conformance,status_code_conformance",
         "--phases", "examples,fuzzing", "--generation-deterministic", "--request-timeout", "40"],
        capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    summary = done.stdout[done.stdout.index("SUMMARY"):]
    assert "generated" in summary and "failed" not in summary.split("Test cases:")[1].splitlines()[1]
    assert "Tested: " in summary
    assert "Traceback" not in service.logs() and "internal error" not in service.logs()
