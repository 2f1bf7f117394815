"""``flowli serve`` converts the pipelines of the older release when it starts, not at their
first request: a pipeline in flight under the workflow of version 1, its database then opened
by a real service process, is the decider's a moment later without any request."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import flowli
from flowli import Registry
from flowli.pipelines import install

from ..served import Service
from . import v1_workflow
from .test_upgrade import create_v1

pytestmark = pytest.mark.e2e


async def test_serve_converts_the_older_releases_pipelines_when_it_starts(db_url: str, tmp_path: Any) -> None:
    registry = Registry()
    install(registry)
    v1_workflow.install(registry)
    old = await flowli.connect(db_url, registry, bucket=str(tmp_path / "bucket"))
    async with old, old.worker(queues=("pipelines",)):
        _, eid = await create_v1(old, "in-flight", {"stageName": "first", "stageHandlerName": "Step"})
        assert (await old.status(eid)).version == "1"
    service = Service(db_url, log=tmp_path / "serve.log").start()
    try:
        plain = Registry()
        install(plain)
        reader = await flowli.connect(db_url, plain, bucket=str(tmp_path / "bucket"))
        async with reader:
            for _ in range(200):
                if (await reader.status(eid)).version == "2":
                    break
                await asyncio.sleep(0.05)
            assert (await reader.status(eid)).version == "2", service.logs()[-2000:]
            version, state = await reader.decider_state(eid)
            assert version >= 1 and state["stages"]["first"]["status"] == "Pending"
    finally:
        service.stop()
