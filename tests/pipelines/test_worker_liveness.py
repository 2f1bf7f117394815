"""An application worker that stops heartbeating: the workers list shows it offline, and
``engine.explain`` of a pipeline waiting for its handler says that no live worker serves the
queue; a heartbeat makes it live again. The clock is the test's: three silent intervals pass at
once."""

from __future__ import annotations

from datetime import timedelta

import pytest

from flowli import Registry
from flowli.pipelines import WORKFLOW, Applications, Pipelines, Workers, install
from flowli.testing import Clock

pytestmark = pytest.mark.integration


async def test_a_silent_worker_is_offline_and_explain_says_no_live_worker_serves_its_queue(open_engine):
    clock = Clock()
    registry = Registry()
    install(registry)
    async with open_engine(registry, clock=clock, worker=False) as engine:
        apps = Applications(engine)
        _, key = await apps.create("billing")
        access = await apps.authenticate(key)
        pipelines = Pipelines(engine)
        workers = Workers(engine, pipelines, lease_ttl=30.0)
        boot = await workers.bootstrap(access, {"workerName": "w1", "supportedHandlers": ["Load"]})
        interval = boot["heartbeat"]["intervalSeconds"]
        async with engine.worker(queues=("pipelines",)):
            await pipelines.create(access, {"name": "p", "stages": [{"stageName": "load", "stageHandlerName": "Load"}]},
                                   idempotent=False)
            [record] = (await engine.list(workflow=WORKFLOW, application="billing")).items
            await engine.wait_suspended(record.eid, application="billing")

            async def unserved() -> list[str]:
                why = await engine.explain(record.eid, application="billing")
                return [w["message"] for w in why.waits if w["kind"] == "queue"]

            assert [w["state"] for w in await workers.list(access)] == ["ready"]
            assert await unserved() == []
            await clock.advance(timedelta(seconds=3 * interval + 1))  # no heartbeat for three intervals
            assert [w["state"] for w in await workers.list(access)] == ["offline"]
            assert await unserved() == ["no live worker serves queue 'pipelines:billing:Load'"]
            session = await workers.session(boot["workerSessionToken"])
            await workers.heartbeat(session, {"state": "ready", "inFlight": 0})
            assert [w["state"] for w in await workers.list(access)] == ["ready"]
            assert await unserved() == []


async def test_a_pipeline_whose_handler_no_worker_ever_served_is_stuck_and_says_so(open_engine):
    # no worker of the application ever bootstrapped with this handler: explain says no live
    # worker serves its queue, and the stuck runs list the pipeline with that reason
    from flowli.catalog import Catalog

    clock = Clock()
    registry = Registry()
    install(registry)
    async with open_engine(registry, clock=clock, worker=False) as engine:
        apps = Applications(engine)
        _, key = await apps.create("billing")
        access = await apps.authenticate(key)
        pipelines = Pipelines(engine)
        async with engine.worker(queues=("pipelines",)):
            await pipelines.create(access, {"name": "p", "stages": [{"stageName": "load", "stageHandlerName": "Nobody"}]},
                                   idempotent=False)
            [record] = (await engine.list(workflow=WORKFLOW, application="billing")).items
            await engine.wait_suspended(record.eid, application="billing")
            why = await engine.explain(record.eid, application="billing")
            assert "no live worker serves queue 'pipelines:billing:Nobody'" in why.summary
            await clock.advance(timedelta(hours=2))
            stuck = await Catalog(engine).stuck(3600, application="billing")
            assert [s["workflow_id"] for s in stuck] == [record.eid]
            assert "no live worker serves queue 'pipelines:billing:Nobody'" in stuck[0]["waiting_on"]["summary"]
