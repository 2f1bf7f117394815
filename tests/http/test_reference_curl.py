"""The curl examples of reference/pipelines-reliability.md run verbatim against a real ``flowli
serve``: they are read from the reference file at test time (so they cannot drift), and only
the address ``http://localhost:8081`` becomes the test service's."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "pipelines-reliability.md"
COPY = Path(__file__).with_name("reference") / "pipelines-reliability.md"
"""The reference as the project keeps it, for machines without the shared folder beside the
checkout (CI); where the shared one is there, the copy must equal it."""
REFERENCE = SHARED if SHARED.is_file() else COPY


def test_the_kept_copy_of_the_reference_is_the_reference():
    assert COPY.is_file()
    if SHARED.is_file():
        assert COPY.read_text() == SHARED.read_text(), "the reference changed: copy it to tests/http/reference/"


def curl_examples() -> list[str]:
    text = REFERENCE.read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    return [b for b in blocks if b.lstrip().startswith("curl")]


def run(script: str, url: str, key: str) -> subprocess.CompletedProcess[str]:
    script = script.replace("http://localhost:8081", url)
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "PIPELOGIQ_API_KEY": key})


def test_the_reference_has_the_two_examples():
    examples = curl_examples()
    assert len(examples) == 2
    assert "/pipelines/idempotent" in examples[0] and "/pipelines/by-idempotency-key" in examples[1]


def test_the_idempotent_create_then_the_lookup_run_as_written(service, billing):
    create, lookup = curl_examples()
    first = run(create, service.url, billing[1])
    assert first.returncode == 0, first.stdout + first.stderr
    assert first.stdout.startswith("HTTP/1.1 201"), first.stdout
    assert '"created":true' in first.stdout and '"name":"validate-invoice"' in first.stdout
    again = run(create, service.url, billing[1])  # after a timeout: the same key again
    assert again.returncode == 0 and again.stdout.startswith("HTTP/1.1 200"), again.stdout
    assert '"wasExisting":true' in again.stdout
    found = run(lookup, service.url, billing[1])
    assert found.returncode == 0, found.stdout + found.stderr
    assert '"idempotencyKey":"invoice-42:validate:v1"' in found.stdout and '"stageName"' not in found.stdout
    # --fail-with-body makes curl fail on the refusals
    refused = run(lookup, service.url, "flk_not-a-key")
    assert refused.returncode != 0 and '"error"' in refused.stdout
