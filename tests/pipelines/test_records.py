"""What a pipeline keeps when a write around it fails or loses a race (issue 25, item 5), through
the public HTTP routes of a service in this process (``flowli.http.create_app`` over httpx's ASGI
transport), so that the engine's public seam, its middleware (``engine.use``), can make one
transition fail or race: a decision whose signal failed is sent again by the retry, a refused
result leaves none of its ``appendStages`` behind, and a cancel keeps the stages that completed.
Both backends."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from flowli import Registry
from flowli.domain import DatabaseUnavailable
from flowli.engine import Engine
from flowli.http import create_app
from flowli.pipelines import Applications, install

pytestmark = pytest.mark.integration


class Service:
    """The HTTP routes of ``engine`` in this process, an application and its key."""

    def __init__(self, engine: Engine, http: httpx.AsyncClient, key: str):
        self.engine, self.http, self.key = engine, http, key
        self.api = {"X-API-Key": key}
        self.session: dict[str, str] = {}
        self.worker_id = ""
        self.running: contextlib.AbstractAsyncContextManager[Any] | None = None

    async def start(self) -> None:
        """Run the engine's worker of the pipelines' activations."""
        self.running = self.engine.worker(queues=("pipelines",))
        await self.running.__aenter__()

    async def stop(self) -> None:
        """Stop it: what is sent to a pipeline waits, not taken, until ``start``."""
        if self.running is not None:
            running, self.running = self.running, None
            await running.__aexit__(None, None, None)

    async def create(self, *stages: dict[str, Any]) -> dict[str, Any]:
        r = await self.http.post("/pipelines", headers=self.api, json={"name": "records", "stages": list(stages)})
        assert r.status_code == 200, r.text
        return dict(r.json())

    async def get(self, pid: int) -> dict[str, Any]:
        r = await self.http.get(f"/pipelines/{pid}", headers=self.api)
        assert r.status_code == 200, r.text
        return dict(r.json())

    async def bootstrap(self, *handlers: str) -> None:
        boot = (await self.http.post("/workers/bootstrap", headers=self.api, json={
            "workerName": "raw", "supportedHandlers": list(handlers)})).json()
        self.session = {"X-Worker-Session": boot["workerSessionToken"]}
        self.worker_id = boot["workerId"]

    async def job(self) -> dict[str, Any]:
        """The next job, acquired."""
        for _ in range(20):
            r = await self.http.post("/jobs/pull", headers=self.session, json={"waitSeconds": 1})
            if r.status_code == 200:
                job = dict(r.json())
                got = await self.http.post(f"/stages/{job['stageId']}/lease/acquire", headers=self.session,
                                           json={"executionId": job["executionId"], "workerId": self.worker_id})
                assert got.json()["acquired"] is True, got.text
                return job
        raise AssertionError("no job within 20 s")

    async def result(self, job: dict[str, Any], **fields: Any) -> httpx.Response:
        body = {"executionId": job["executionId"], "attempt": job["attempt"], "isSuccess": True, **fields}
        return await self.http.post(f"/stages/{job['stageId']}/result", headers=self.session, json=body)

    async def until(self, pid: int, check: Any, what: str, timeout: float = 15) -> dict[str, Any]:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            view = await self.get(pid)
            if check(view):
                return view
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"pipeline {pid}: not {what} within {timeout} s: {view}")
            await asyncio.sleep(0.05)


@pytest.fixture
def served(open_engine: Any) -> Any:
    @contextlib.asynccontextmanager
    async def make() -> AsyncIterator[Service]:
        registry = Registry()
        install(registry)
        async with open_engine(registry, worker=False) as engine, contextlib.AsyncExitStack() as stack:
            _, key = await Applications(engine).create("billing")
            app = create_app(engine, lease_ttl=30)
            transport = httpx.ASGITransport(app=app)
            http = await stack.enter_async_context(httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1"))
            svc = Service(engine, http, key)
            await svc.start()
            stack.push_async_callback(svc.stop)
            yield svc

    return make


def statuses(view: dict[str, Any]) -> list[tuple[str, str]]:
    return [(s["name"], s["status"]) for s in view["stages"]]


async def test_a_decision_whose_signal_failed_is_sent_by_the_retry_and_the_stage_moves_on(served):
    async with served() as svc:
        refused: list[Any] = []

        async def fail_once(t: Any, call_next: Any) -> Any:
            if not refused:  # the store is unreachable for the first signal: nothing is written
                refused.append(t.payload)
                raise DatabaseUnavailable("sqlite:///store", "the store went away (injected)", "yes")
            return await call_next()

        await svc.bootstrap("Review")
        made = await svc.create({"stageName": "review", "stageHandlerName": "Review"},
                                {"stageName": "after", "stageHandlerName": "Nobody"})
        job = await svc.job()
        assert (await svc.result(job, output="look", isWaitingForApproval=True)).status_code == 202
        await svc.until(made["id"], lambda v: v["stages"][0]["status"] == "WaitingForApproval", "waiting")
        svc.engine.use(fail_once, kinds=("signal",))
        decide = f"/stages/{job['stageId']}/resume"
        first = await svc.http.post(decide, headers=svc.api, json={"approved": True})
        assert first.status_code == 503 and refused, first.text
        again = await svc.http.post(decide, headers=svc.api, json={"approved": True})
        assert again.status_code == 204, again.text
        view = await svc.until(made["id"], lambda v: v["stages"][0]["status"] == "Completed", "decided", timeout=5)
        assert statuses(view) == [("review", "Completed"), ("after", "Pending")]
        # the decision is known by what was sent: an identical repeat is 204, another one 409
        assert (await svc.http.post(decide, headers=svc.api, json={"approved": True})).status_code == 204
        other = await svc.http.post(decide, headers=svc.api, json={"approved": False, "rejectionReason": "no"})
        assert other.status_code == 409 and "decided" in other.json()["error"], other.text


async def test_a_decision_is_taken_in_the_write_of_its_signal(served):
    """No activation is needed (the engine's worker is stopped): the pipeline's decider takes
    the decision in the signal's write; a repeat is 204 and a different decision 409, from the
    decision its state holds, not from a record beside it."""
    async with served() as svc:
        await svc.bootstrap("Review")
        made = await svc.create({"stageName": "review", "stageHandlerName": "Review"})
        job = await svc.job()
        assert (await svc.result(job, output="look", isWaitingForApproval=True)).status_code == 202
        await svc.until(made["id"], lambda v: v["stages"][0]["status"] == "WaitingForApproval", "waiting")
        await svc.stop()
        decide = f"/stages/{job['stageId']}/resume"
        assert (await svc.http.post(decide, headers=svc.api, json={"approved": False, "rejectionReason": "no"})
                ).status_code == 204
        view = await svc.get(made["id"])
        assert (view["status"], view["stages"][0]["status"], view["stages"][0]["errorMessage"]) == (
            "Failed", "Failed", "no"), view
        assert (await svc.http.post(decide, headers=svc.api, json={"approved": False, "rejectionReason": "no"})
                ).status_code == 204
        other = await svc.http.post(decide, headers=svc.api, json={"approved": True})
        assert other.status_code == 409 and "decided" in other.json()["error"], other.text


async def test_of_two_different_decisions_sent_at_once_the_one_written_first_wins(served):
    async with served() as svc:
        await svc.bootstrap("Review")
        made = await svc.create({"stageName": "review", "stageHandlerName": "Review"})
        job = await svc.job()
        assert (await svc.result(job, output="look", isWaitingForApproval=True)).status_code == 202
        await svc.until(made["id"], lambda v: v["stages"][0]["status"] == "WaitingForApproval", "waiting")
        decide = f"/stages/{job['stageId']}/resume"
        # both at once: the commands of one process for one execution take turns (two processes
        # race on the state's version: tests/engine/test_deciders.py), so one is written first,
        # and the other, different, is refused
        approval, rejection = await asyncio.gather(
            svc.http.post(decide, headers=svc.api, json={"approved": True}),
            svc.http.post(decide, headers=svc.api, json={"approved": False, "rejectionReason": "no"}))
        assert sorted([approval.status_code, rejection.status_code]) == [204, 409], (approval.text, rejection.text)
        if rejection.status_code == 204:
            view = await svc.until(made["id"], lambda v: v["status"] == "Failed", "failed")
            assert (view["stages"][0]["status"], view["stages"][0]["errorMessage"]) == ("Failed", "no")
        else:
            view = await svc.until(made["id"], lambda v: v["status"] == "Completed", "completed")
            assert view["stages"][0]["status"] == "Completed"


async def test_a_result_refused_in_a_race_leaves_none_of_its_appended_stages(served, open_engine):
    other_registry = Registry()
    install(other_registry)
    # the duplicate worker's answer goes through another process's engine on the same store (one
    # process's commands for one execution take turns: they cannot race)
    async with served() as svc, open_engine(other_registry, worker=False) as other:
        await svc.bootstrap("Discover")
        made = await svc.create({"stageName": "discover", "stageHandlerName": "Discover"},
                                {"stageName": "hold", "stageHandlerName": "Nobody"})
        job = await svc.job()
        raced: list[str] = []

        async def another_answer_first(t: Any, call_next: Any) -> Any:
            # the same attempt answered by another result just before this one's write (a
            # duplicate worker): this one loses the race at the store's fence
            if not raced:
                raced.append(job["executionId"])
                await other.answer(job["executionId"], {"ok": True, "output": "other", "attempt": job["attempt"]},
                                   application="billing")
            return await call_next()

        svc.engine.use(another_answer_first, kinds=("answer",))
        lost = await svc.result(job, output="mine", appendStages=[{"stageName": "ghost", "stageHandlerName": "Nobody"}])
        assert lost.status_code == 409 and lost.json()["accepted"] is False, lost.text
        view = await svc.until(made["id"], lambda v: v["stages"][0]["status"] == "Completed", "completed")
        await asyncio.sleep(0.3)
        view = await svc.get(made["id"])
        assert statuses(view) == [("discover", "Completed"), ("hold", "Pending")], view
        assert view["stages"][0]["output"] == "other"
        # nothing of the refused result is kept beside the pipeline either: no stage item (an id
        # that a view of its items would show as a NotStarted stage), and the refusal is in its history
        eid = (await svc.engine.items.get("pipeline", made["id"])).key
        assert await svc.engine.items.find("stage", f"{eid}/ghost", "billing") is None
        assert await svc.engine.items.count("stage", "billing", prefix=f"{eid}/") == 2
        [refusal] = [h for h in await history_with(svc, made["id"], "result.refused") if h["kind"] == "result.refused"]
        assert (refusal["attempt"], refusal["value"]["executionId"]) == (job["attempt"], job["executionId"]), refusal
        # the name is free: an append may use it, and its stage runs
        r = await svc.http.post(f"/pipelines/{made['id']}/stages", headers=svc.api,
                                json={"stages": [{"stageName": "ghost", "stageHandlerName": "Nobody"}]})
        assert r.status_code == 200, r.text
        view = await svc.get(made["id"])
        assert statuses(view) == [("discover", "Completed"), ("hold", "Pending"), ("ghost", "NotStarted")], view
        ghost = await svc.engine.items.find("stage", f"{eid}/ghost", "billing")
        assert ghost is not None and ghost.id == view["stages"][2]["id"] == r.json()["stages"][0]["id"]


async def test_a_result_refused_for_a_cancelled_pipeline_leaves_none_of_its_appended_stages(served):
    async with served() as svc:
        await svc.bootstrap("Discover")
        made = await svc.create({"stageName": "discover", "stageHandlerName": "Discover"})
        job = await svc.job()
        assert (await svc.http.post(f"/pipelines/{made['id']}/cancel", headers=svc.api)).status_code == 200
        await svc.until(made["id"], lambda v: v["status"] == "Cancelled", "cancelled")
        late = await svc.result(job, output="late", appendStages=[{"stageName": "ghost", "stageHandlerName": "Nobody"}])
        assert late.status_code == 409, late.text
        assert statuses(await svc.get(made["id"])) == [("discover", "Cancelled")]


async def test_a_cancel_keeps_the_stages_that_completed(served):
    async with served() as svc:
        await svc.bootstrap("Step")
        made = await svc.create({"stageName": "first", "stageHandlerName": "Step"},
                                {"stageName": "second", "stageHandlerName": "Step"},
                                {"stageName": "third", "stageHandlerName": "Step"})
        one = await svc.job()
        assert (await svc.result(one, output="done")).status_code == 202
        await svc.until(made["id"], lambda v: v["stages"][1]["status"] in ("Pending", "Running"), "second started")
        await svc.job()
        r = await svc.http.post(f"/pipelines/{made['id']}/cancel", headers=svc.api)
        assert r.status_code == 200, r.text
        view = await svc.until(made["id"], lambda v: v["status"] == "Cancelled", "cancelled")
        first = view["stages"][0]
        assert (first["status"], first["attempt"], first["output"]) == ("Completed", 1, "done"), view
        assert first["finishedAt"] is not None
        assert statuses(view) == [("first", "Completed"), ("second", "Cancelled"), ("third", "Cancelled")]


async def test_stages_appended_are_taken_in_the_write_that_carries_them(served):
    """An append (a route's, a result's) is in the pipeline's state from the write that carries
    it, with no activation (the engine's worker is stopped)."""
    async with served() as svc:
        await svc.bootstrap("Discover")
        made = await svc.create({"stageName": "discover", "stageHandlerName": "Discover"})
        job = await svc.job()
        await svc.stop()
        r = await svc.http.post(f"/pipelines/{made['id']}/stages", headers=svc.api,
                                json={"stages": [{"stageName": "routed", "stageHandlerName": "Discover"}]})
        assert r.status_code == 200, r.text
        assert statuses(await svc.get(made["id"]))[1] == ("routed", "NotStarted")
        assert (await svc.result(job, output="found", appendStages=[
            {"stageName": "found", "stageHandlerName": "Nobody"}])).status_code == 202
        view = await svc.get(made["id"])
        assert statuses(view) == [("discover", "Completed"), ("routed", "Pending"), ("found", "NotStarted")], view


async def history_with(svc: Service, pid: int, kind: str) -> list[dict[str, Any]]:
    """The pipeline's history once it holds an entry of ``kind`` (its execution ends a moment after
    the pipeline shows its outcome)."""
    for _ in range(200):
        history = (await svc.http.get(f"/pipelines/{pid}/history", headers=svc.api)).json()
        if any(h["kind"] == kind for h in history):
            return list(history)
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {kind} in the history of pipeline {pid}: {history}")


async def test_a_completed_pipelines_history_shows_no_machinery(served):
    async with served() as svc:
        await svc.bootstrap("Step")
        done = await svc.create({"stageName": "one", "stageHandlerName": "Step"})
        assert (await svc.result(await svc.job(), output="x")).status_code == 202
        history = await history_with(svc, done["id"], "execution.completed")
        assert [h for h in history if h["error"] is not None or h["kind"] == "frame.failed"] == [], history
        assert "nothing came within" not in str(history)


async def test_a_failed_pipelines_error_names_the_stage_and_its_attempts(served):
    async with served() as svc:
        await svc.bootstrap("Step")
        flaky = await svc.create({"stageName": "flaky", "stageHandlerName": "Step",
                                  "options": {"maxRetries": 5, "retryInterval": 0.01}})
        for n in range(6):
            job = await svc.job()
            assert job["attempt"] == n + 1
            r = await svc.result(job, isSuccess=False, errorCode="UPSTREAM_ERROR", errorMessage=f"down {n + 1}")
            assert r.status_code == 202, r.text
        history = await history_with(svc, flaky["id"], "pipeline.failed")
        view = await svc.get(flaky["id"])
        assert (view["status"], view["stages"][0]["attempt"]) == ("Failed", 6)
        # the history speaks the pipeline's words: each attempt's failure, and the end names the
        # stage, its id and its six attempts
        assert [h["attempt"] for h in history if h["kind"] == "stage.failed"] == [1, 2, 3, 4, 5, 6], history
        [end] = [h for h in history if h["kind"] == "pipeline.failed"]
        assert (end["value"]["stage"], end["value"]["stageId"], end["value"]["attempts"]) == (
            "flaky", view["stages"][0]["id"], 6), end
        assert end["error"] == {"errorCode": "UPSTREAM_ERROR", "errorMessage": "down 6"}, end
        assert "receive" not in str(history) and "nothing came within" not in str(history), history
        assert [h for h in history if h["kind"].startswith("frame.")] == [], history
        # a rerun reopens it, recorded with its actor
        r = await svc.http.post("/pipelines/rerunStage", headers=svc.api, json={"stageId": view["stages"][0]["id"]})
        assert r.status_code == 200, r.text
        assert (await svc.result(await svc.job(), output="fine")).status_code == 202
        view = await svc.until(flaky["id"], lambda v: v["status"] == "Completed", "completed")
        history = await history_with(svc, flaky["id"], "execution.completed")
        [rerun] = [h for h in history if h["kind"] == "stage.rerun"]
        assert rerun["value"]["stages"] == ["flaky"] and rerun["actor"].endswith("default"), rerun
