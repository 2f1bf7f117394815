"""An application worker that stops heartbeating: the workers list shows it offline, and
``engine.explain`` of a pipeline waiting for its handler says that no live worker serves the
queue; a heartbeat makes it live again. The clock is the test's: three silent intervals pass at
once."""

from __future__ import annotations

from datetime import timedelta

import pytest

from flowli import Registry
from flowli.catalog import Catalog
from flowli.domain import ExecutionRecord
from flowli.engine import Engine
from flowli.pipelines import WORKFLOW, Access, Applications, Pipelines, Workers, install
from flowli.testing import Clock

pytestmark = pytest.mark.integration


def pipelines_app() -> Registry:
    registry = Registry()
    install(registry)
    return registry


async def billing(engine: Engine) -> tuple[Access, Pipelines]:
    """The application ``billing`` (its admin's access) and the pipelines service."""
    apps = Applications(engine)
    _, key = await apps.create("billing")
    return await apps.authenticate(key), Pipelines(engine)


async def waiting_on(engine: Engine, pipelines: Pipelines, access: Access, handler: str) -> ExecutionRecord:
    """A one-stage pipeline of ``handler``, once it waits for a worker to take its stage."""
    await pipelines.create(access, {"name": "p", "stages": [{"stageName": "load", "stageHandlerName": handler}]},
                           idempotent=False)
    [record] = (await engine.list(workflow=WORKFLOW, application="billing")).items
    return await engine.wait_suspended(record.eid, application="billing")


async def test_a_silent_worker_is_offline_and_explain_says_no_live_worker_serves_its_queue(open_engine):
    clock = Clock()
    async with open_engine(pipelines_app(), clock=clock, worker=False) as engine:
        access, pipelines = await billing(engine)
        workers = Workers(engine, pipelines, lease_ttl=30.0)
        boot = await workers.bootstrap(access, {"workerName": "w1", "supportedHandlers": ["Load"]})
        interval = boot["heartbeat"]["intervalSeconds"]
        async with engine.worker(queues=("pipelines",)):
            record = await waiting_on(engine, pipelines, access, "Load")

            async def unserved() -> list[str]:
                why = await engine.explain(record.eid, application="billing")
                return [w["message"] for w in why.waits if w["kind"] == "queue"]

            assert [w["state"] for w in await workers.list(access)] == ["ready"]
            assert await unserved() == []
            await clock.advance(timedelta(seconds=3 * interval + 1))  # no heartbeat for three intervals
            assert [w["state"] for w in await workers.list(access)] == ["offline"]
            assert await unserved() == ["no live worker serves handler 'Load'"]  # the pipeline's words
            session = await workers.session(boot["workerSessionToken"])
            await workers.heartbeat(session, {"state": "ready", "inFlight": 0})
            assert [w["state"] for w in await workers.list(access)] == ["ready"]
            assert await unserved() == []


async def test_a_pipeline_whose_handler_no_worker_ever_served_is_stuck_and_says_so(open_engine):
    # no worker of the application ever bootstrapped with this handler: explain says no live
    # worker serves its queue, and the stuck runs list the pipeline with that reason
    clock = Clock()
    async with open_engine(pipelines_app(), clock=clock, worker=False) as engine:
        access, pipelines = await billing(engine)
        async with engine.worker(queues=("pipelines",)):
            record = await waiting_on(engine, pipelines, access, "Nobody")
            why = await engine.explain(record.eid, application="billing")
            # in the pipeline's words: its stage and its handler, not the engine's frame and queue
            assert "stage 'load' (attempt 1) waits for a worker to take its job" in why.summary, why.summary
            assert "no live worker serves handler 'Nobody'" in why.summary
            assert [w["queue"] for w in why.waits if w["kind"] == "queue"] == ["pipelines:billing:Nobody"]
            await clock.advance(timedelta(hours=2))
            stuck = await Catalog(engine).stuck(3600, application="billing")
            assert [s["workflow_id"] for s in stuck] == [record.eid]
            assert "no live worker serves handler 'Nobody'" in stuck[0]["waiting_on"]["summary"]
