"""Pipelines created by the release before the decider (executions of the workflow
``flowli.pipeline`` of version 1) in a store that this release opens: each is converted once into
an execution of the decider (version 2), and then reads and finishes as the decider's. A
finished one keeps its view, the instant it ended and its history; one in flight finishes
through the HTTP routes: an open attempt dispatched again with its next attempt number (the
worker that still holds the old one gets the stale answer), a retry that was waiting runs at
once, a stage waiting for approval takes its decision, a failed one is rerun. A conversion cut
short by a crash is finished by the next process, and none is converted twice.

The old database is written as that release wrote it: its pipeline and stage items, then a start
of the workflow of version 1 run by an engine that has it (a frozen copy of that release's
workflow, kept in the tests only: ``v1_workflow``), its attempts answered as its worker routes
answered them (``engine.answer`` with the result's fields). Both backends."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest

from flowli import Registry
from flowli.domain import EntryKind, Task, keyed_eid
from flowli.engine import Engine
from flowli.http import create_app
from flowli.pipelines import WORKFLOW, Applications, Pipelines, install, plan
from flowli.pipelines._upgrade import convert  # the conversion of one pipeline, run twice below

from . import v1_workflow
from .test_records import Service, statuses

pytestmark = pytest.mark.integration


async def create_v1(engine: Engine, name: str, *stages: dict[str, Any]) -> tuple[int, str]:
    """A pipeline as the release before the decider created it: its items, then its workflow's start."""
    key = str(uuid.uuid4())
    eid = keyed_eid(WORKFLOW, f"billing/{key}")
    now = engine.clock.now()
    specs = [{"input": None, "description": None, "isEvent": False, "options": {}, "dependsOn": [], **s} for s in stages]
    specs = [{**s, "plan": plan(s, name, [], [])} for s in specs]
    wanted = [("pipeline", "billing", eid, {"name": name, "idempotencyKey": None})]
    wanted += [("stage", "billing", f"{eid}/{s['stageName']}", {"eid": eid, "name": s["stageName"], "spec": s})
               for s in specs]
    stored = await engine.items.put_many(wanted, now)
    pid = stored[0][0].id
    spec = {"pipelineId": pid, "name": name, "idempotencyKey": None, "traceId": None, "application": "billing",
            "stages": [{**s, "id": item.id} for s, (item, _) in zip(specs, stored[1:])], "keywords": [], "context": []}
    await engine.start(WORKFLOW, spec, key=key, queue="pipelines", version="1", application="billing")
    return pid, eid


async def open_task(engine: Engine, eid: str, handler: str = "Step", timeout: float = 10) -> Task:
    """The open attempt of the pipeline's workflow on the queue of ``handler``, once it is there."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        tasks = [t for t in await engine.tasks(f"pipelines:billing:{handler}", eid) if t.state == "ready"]
        if tasks:
            return tasks[0]
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"no task of {eid} on {handler} within {timeout} s")
        await asyncio.sleep(0.02)


async def answer(engine: Engine, task: Task, **value: Any) -> None:
    """An attempt answered as that release's result route did (its attempt: the frame's base plus its own)."""
    await engine.answer(task.id, {"ok": True, "output": None, "attempt": task.payload["base"] + task.attempt, **value})


async def settled(engine: Engine, eid: str, check: Any, what: str, timeout: float = 10) -> None:
    """Wait until the workflow took what was sent: it waits again with ``check`` true, or it ended."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        record = await engine.status(eid)
        if record.status.value in ("suspended", "completed", "failed") and not engine.running() \
                and await check(record):
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{eid} not {what} within {timeout} s: {record.status}")
        await asyncio.sleep(0.02)


async def has_task(engine: Engine, eid: str, handler: str) -> bool:
    return any(t.state == "ready" for t in await engine.tasks(f"pipelines:billing:{handler}", eid))


async def old_release(engine: Engine) -> dict[str, Any]:
    """The pipelines of the old release, as its workflow left them: finished ones and ones in flight."""
    out: dict[str, Any] = {}
    # completed, through a failed attempt and its retry (a sleep frame)
    out["done"] = await create_v1(engine, "old-done", {"stageName": "flaky", "stageHandlerName": "Step",
                                                       "options": {"maxRetries": 1, "retryInterval": 0.01}})
    eid = out["done"][1]
    await answer(engine, await open_task(engine, eid), ok=False, errorCode="UPSTREAM_ERROR", errorMessage="down")
    await settled(engine, eid, lambda r: has_task(engine, eid, "Step"), "retried")
    await answer(engine, await open_task(engine, eid), output="x")
    await settled(engine, eid, lambda r: _ended(r), "completed")

    # failed: its one attempt refused for good
    out["failed"] = await create_v1(engine, "old-failed", {"stageName": "once", "stageHandlerName": "Step"})
    eid = out["failed"][1]
    await answer(engine, await open_task(engine, eid), ok=False, errorCode="BAD", errorMessage="no", retryable=False)
    await settled(engine, eid, lambda r: _ended(r), "failed")

    # in flight: its first stage's attempt open (leased by a worker of the old release), a second to follow
    out["pending"] = await create_v1(engine, "old-pending", {"stageName": "first", "stageHandlerName": "Step"},
                                     {"stageName": "second", "stageHandlerName": "Step", "dependsOn": ["first"]})
    out["old_task"] = await open_task(engine, out["pending"][1])

    # in flight: waiting for an approval
    out["waiting"] = await create_v1(engine, "old-waiting", {"stageName": "review", "stageHandlerName": "Review"})
    eid = out["waiting"][1]
    await answer(engine, await open_task(engine, eid, "Review"), output="look", waiting=True)
    await settled(engine, eid, lambda r: _no_task(engine, eid, "Review"), "waiting")

    # in flight: a retry waiting an hour on its sleep frame
    out["sleeping"] = await create_v1(engine, "old-sleeping", {"stageName": "slow", "stageHandlerName": "Slow",
                                                               "options": {"maxRetries": 2, "retryInterval": 3600}})
    eid = out["sleeping"][1]
    await answer(engine, await open_task(engine, eid, "Slow"), ok=False, errorCode="UPSTREAM_ERROR", errorMessage="busy")
    await settled(engine, eid, lambda r: _timer_set(engine, eid), "sleeping")
    out["ended"] = {k: (await engine.status(out[k][1])).updated_at for k in ("done", "failed")}
    return out


async def _ended(record: Any) -> bool:
    return bool(record.terminal)


async def _no_task(engine: Engine, eid: str, handler: str) -> bool:
    return not await has_task(engine, eid, handler)


async def _timer_set(engine: Engine, eid: str) -> bool:
    return bool(await engine.timers(eid))


@pytest.fixture
def engines(open_engine: Any) -> Any:
    """``old()``: an engine of the old release (with the workflow of version 1, and a worker);
    ``new()``: one of this release with its HTTP routes (``Service``), on the same database."""

    @contextlib.asynccontextmanager
    async def old(*, worker: bool = True) -> AsyncIterator[Engine]:
        registry = Registry()
        install(registry)
        v1_workflow.install(registry)
        async with open_engine(registry, worker=False) as engine, contextlib.AsyncExitStack() as stack:
            if worker:
                await stack.enter_async_context(engine.worker(queues=("pipelines",)))
            yield engine

    @contextlib.asynccontextmanager
    async def new(*, bootstrap: bool = True, **tuning: Any) -> AsyncIterator[Service]:
        registry = Registry()
        install(registry)
        async with open_engine(registry, worker=False, **tuning) as engine, contextlib.AsyncExitStack() as stack:
            svc = Service(engine, None, "")  # type: ignore[arg-type]
            if bootstrap:
                _, key = await Applications(engine).create("billing")
                transport = httpx.ASGITransport(app=create_app(engine, lease_ttl=30))
                svc.http = await stack.enter_async_context(httpx.AsyncClient(transport=transport,
                                                                             base_url="http://127.0.0.1"))
                svc.key, svc.api = key, {"X-API-Key": key}
                await svc.start()
                stack.push_async_callback(svc.stop)
            yield svc

    return old, new


def migrated(journal: list[Any]) -> int:
    return sum(1 for e in journal if e.kind is EntryKind.EXECUTION_MIGRATED)


async def test_pipelines_of_the_old_release_are_converted_once_and_finish_as_the_deciders(engines):
    old, new = engines
    async with old() as engine:
        made = await old_release(engine)
    eids = {k: made[k][1] for k in ("done", "failed", "pending", "waiting", "sleeping")}
    pids = {k: made[k][0] for k in eids}

    async with new() as svc:
        engine = svc.engine
        r = await svc.http.get("/pipelines", headers=svc.api, params={"pageSize": 50})
        assert r.status_code == 200, r.text
        listed = r.json()
        assert {p["id"] for p in listed["items"]} == set(pids.values())
        for eid in eids.values():  # every one is the decider's now, converted once
            assert (await engine.status(eid)).version == "2"
            assert migrated(await engine.journal(eid)) == 1
            assert (await engine.decider_state(eid))[0] >= 1

        # finished: their views, the instant each ended, their histories
        done = await svc.get(pids["done"])
        assert done["status"] == "Completed" and statuses(done) == [("flaky", "Completed")]
        assert done["stages"][0]["output"] == "x" and done["stages"][0]["attempt"] == 2
        for k in ("done", "failed"):
            assert (await engine.status(eids[k])).updated_at == made["ended"][k]
        history = (await svc.http.get(f"/pipelines/{pids['done']}/history", headers=svc.api)).json()
        assert any(h["kind"] == "execution.completed" for h in history)
        failed = await svc.get(pids["failed"])
        assert failed["status"] == "Failed" and failed["stages"][0]["errorCode"] == "BAD"
        history = (await svc.http.get(f"/pipelines/{pids['failed']}/history", headers=svc.api)).json()
        ended = [h for h in history if h["kind"] == "execution.failed"]
        assert ended and ended[0]["error"]["stage"] == "once" and ended[0]["error"]["errorCode"] == "BAD"

        await svc.bootstrap("Step", "Review", "Slow")
        # in flight: the open attempt runs again as the decider's, its number continued (the worker
        # that still holds the old attempt gets the stale answer); the retry that waited an hour
        # runs now, its second attempt
        jobs = {j["pipelineId"]: j for j in [await svc.job(), await svc.job()]}
        job = jobs[pids["pending"]]
        assert job["stageName"] == "first" and job["attempt"] == 2
        stale = {"stageId": job["stageId"], "executionId": made["old_task"].id, "attempt": 1}
        assert (await svc.result(stale, output="late")).status_code == 409
        assert (await svc.result(job, output="one")).status_code == 202
        second = await svc.job()
        assert second["stageName"] == "second" and second["prevStageOutput"] == "one"
        assert (await svc.result(second, output="two")).status_code == 202
        pending = await svc.until(pids["pending"], lambda v: v["status"] == "Completed", "completed")
        assert statuses(pending) == [("first", "Completed"), ("second", "Completed")]
        job = jobs[pids["sleeping"]]
        assert job["stageName"] == "slow" and job["attempt"] == 2
        assert (await svc.result(job, output="late but fine")).status_code == 202
        await svc.until(pids["sleeping"], lambda v: v["status"] == "Completed", "completed")

        # waiting for an approval: approved now
        waiting = await svc.get(pids["waiting"])
        assert statuses(waiting) == [("review", "WaitingForApproval")]
        inbox = (await svc.http.get("/pipelines", headers=svc.api, params={"statuses": "Running"})).json()
        assert pids["waiting"] in {p["id"] for p in inbox["items"]}
        r = await svc.http.post(f"/stages/{waiting['stages'][0]['id']}/resume", headers=svc.api, json={"approved": True})
        assert r.status_code == 204, r.text
        await svc.until(pids["waiting"], lambda v: v["status"] == "Completed", "completed")

        # failed: rerun, as the decider's
        r = await svc.http.post("/pipelines/rerunStage", headers=svc.api, json={"stageId": failed["stages"][0]["id"]})
        assert r.status_code == 200, r.text
        assert (await svc.result(await svc.job(), output="fine")).status_code == 202
        await svc.until(pids["failed"], lambda v: v["status"] == "Completed", "completed")

        # converting again changes nothing
        for eid in eids.values():
            assert await convert(engine, eid) is True
            assert migrated(await engine.journal(eid)) == 1
        record = await engine.list(workflow=WORKFLOW, application="billing")
        assert sorted(r.version for r in record) == ["2"] * 5
        # each journal, folded from the state of its conversion, gives the state stored
        checked = (await engine.verify(engine.registry, workflow=WORKFLOW, limit=50)).checked
        assert len(checked) == 5 and [c.difference for c in checked] == [None] * 5
        history = (await svc.http.get(f"/pipelines/{pids['pending']}/history", headers=svc.api)).json()
        converted = [h for h in history if h["kind"] == "execution.migrated"]
        assert [h["value"] for h in converted] == [{"from": "1", "to": "2", "decider": True}]
        assert [h["kind"] for h in history].count("stage.dispatched") == 2  # its attempts as the decider's


async def test_a_conversion_cut_short_is_finished_by_the_next_process_and_none_is_converted_twice(engines):
    old, new = engines
    async with old() as engine:
        first = await create_v1(engine, "a", {"stageName": "one", "stageHandlerName": "Step"})
        second = await create_v1(engine, "b", {"stageName": "one", "stageHandlerName": "Step"})
        for _, eid in (first, second):
            await open_task(engine, eid)

    async with new(bootstrap=False) as svc:
        engine = svc.engine

        converted: list[str] = []

        async def crash(t: Any, call_next: Any) -> Any:
            if t.kind == "migrate" and converted:  # the process dies before the second conversion's write
                raise RuntimeError("the process dies before this write")
            result = await call_next()
            converted.append(t.eid)
            return result

        engine.use(crash)
        with pytest.raises(RuntimeError, match="dies"):
            await Pipelines(engine).upgrade()
        versions = sorted([(await engine.status(eid)).version for _, eid in (first, second)])
        assert versions == ["1", "2"]
        assert await engine.items.find("upgrade", "pipelines-of-version-1-converted", "") is None
        unconverted = next(eid for _, eid in (first, second) if eid not in converted)

    async with new() as svc:  # the next process: the rest converted, and the first left as it was
        engine = svc.engine
        # two conversions of the same pipeline at once: one of them converts it
        assert await asyncio.gather(convert(engine, unconverted), convert(engine, unconverted)) == [True, True]
        for _, eid in (first, second):
            assert (await engine.status(eid)).version == "2"
            assert migrated(await engine.journal(eid)) == 1
            assert (await engine.decider_state(eid))[0] == 1
        await svc.bootstrap("Step")
        for _ in range(2):
            job = await svc.job()
            assert job["attempt"] == 2
            assert (await svc.result(job, output="ok")).status_code == 202
        for pid, _ in (first, second):
            await svc.until(pid, lambda v: v["status"] == "Completed", "completed")


async def test_a_pipeline_the_upgrade_did_not_list_is_converted_when_it_is_read_or_its_attempt_pulled(engines):
    old, new = engines
    async with old() as engine:
        read = await create_v1(engine, "read", {"stageName": "one", "stageHandlerName": "Step"})
        pulled = await create_v1(engine, "pulled", {"stageName": "one", "stageHandlerName": "Step"})
        for _, eid in (read, pulled):
            await open_task(engine, eid)

    async with new() as svc:
        engine = svc.engine
        # an upgrade that found nothing to convert (their starts were not in the list it read)
        await engine.items.put("upgrade", "", "pipelines-of-version-1-converted", {"converted": 0}, engine.clock.now())
        view = await svc.get(read[0])
        assert (await engine.status(read[1])).version == "2"
        assert statuses(view) == [("one", "Pending")] and view["stages"][0]["attempt"] == 2
        assert (await engine.status(pulled[1])).version == "1"
        await svc.bootstrap("Step")
        jobs = {j["pipelineId"]: j for j in [await svc.job(), await svc.job()]}  # the old attempt is not handed out
        assert sorted(jobs) == sorted([read[0], pulled[0]]) and {j["attempt"] for j in jobs.values()} == {2}
        assert (await engine.status(pulled[1])).version == "2"
        for pid, job in jobs.items():
            assert (await svc.result(job, output="ok")).status_code == 202
            await svc.until(pid, lambda v: v["status"] == "Completed", "completed")


async def test_a_pipeline_of_version_1_archived_before_the_upgrade_still_reads(engines):
    old, new = engines
    async with old() as engine:
        pid, eid = await create_v1(engine, "archived", {"stageName": "one", "stageHandlerName": "Step"})
        await answer(engine, await open_task(engine, eid), output="kept")
        await settled(engine, eid, lambda r: _ended(r), "completed")

    async with new(retention=timedelta(0)) as svc:
        engine = svc.engine
        await engine.retain()
        assert await engine.archived(eid) is not None
        view = await svc.get(pid)  # nothing to convert: its archived journal, folded
        assert view["status"] == "Completed" and statuses(view) == [("one", "Completed")]
        assert view["stages"][0]["output"] == "kept" and view["stages"][0]["attempt"] == 1
        history = (await svc.http.get(f"/pipelines/{pid}/history", headers=svc.api)).json()
        assert any(h["kind"] == "execution.completed" for h in history)


async def test_a_cancel_the_workflow_had_not_taken_yet_is_taken_by_the_decider(engines):
    old, new = engines
    async with old() as engine:
        pid, eid = await create_v1(engine, "cancelled", {"stageName": "one", "stageHandlerName": "Step"})
        task = await open_task(engine, eid)
    async with old(worker=False) as engine:  # asked while no worker of the old release ran
        await engine.cancel(eid, by="olga@example.com", reason="not needed")

    async with new() as svc:
        view = await svc.get(pid)
        assert view["status"] == "Cancelled" and statuses(view) == [("one", "Cancelled")]
        record = await svc.engine.status(eid)
        assert (record.version, record.status.value) == ("2", "cancelled")
        assert (await svc.engine.task(task.id)).state == "withdrawn"  # type: ignore[union-attr]
        history = (await svc.http.get(f"/pipelines/{pid}/history", headers=svc.api)).json()
        cancelled = [h for h in history if h["kind"] == "pipeline.cancelled"]
        assert len(cancelled) == 1 and cancelled[0]["value"]["reason"] == "not needed"
