"""Lost and stale work in the worker protocol, against the shared ``flowli serve``: a renewal after
a cancel says so, a long poll whose client went away takes no job, an identical result sent again
is accepted again whatever it carries, a result of an execution the stage never had is a stale
one, and a worker that stopped heartbeating is shown offline."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from flowli.client import HttpWorker, PipelinesClient

pytestmark = pytest.mark.e2e


async def bootstrap(http: httpx.AsyncClient, key: str, handlers: list[str], name: str = "raw") -> tuple[dict[str, Any], dict[str, str]]:
    boot = (await http.post("/workers/bootstrap", headers={"X-API-Key": key}, json={
        "workerName": name, "supportedHandlers": handlers})).json()
    return boot, {"X-Worker-Session": boot["workerSessionToken"]}


async def until(check: Callable[[], Awaitable[Any]], timeout: float, what: str) -> Any:
    """The first truthy answer of ``check`` (asked every 50 ms), within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        found = await check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout} s")
        await asyncio.sleep(0.05)


def one_stage(handler: str, name: str = "s") -> dict[str, Any]:
    return {"name": f"{handler.lower()}-pipeline", "stages": [{"stageName": name, "stageHandlerName": handler}]}


async def test_a_renewal_after_a_cancel_says_cancel_requested(service, billing):
    _, key = billing
    async with PipelinesClient(service.url, key) as client, httpx.AsyncClient(base_url=service.url) as http:
        made = await client.create(one_stage("Slow"))
        boot, s = await bootstrap(http, key, ["Slow"])
        job = (await http.post("/jobs/pull", headers=s, json={"waitSeconds": 10})).json()
        lease = {"executionId": job["executionId"], "workerId": boot["workerId"]}
        assert (await http.post(f"/stages/{job['stageId']}/lease/acquire", headers=s, json=lease)).json()["acquired"]
        renewed = (await http.post(f"/stages/{job['stageId']}/lease/renew", headers=s, json=lease)).json()
        assert (renewed["acquired"], renewed["cancelRequested"]) == (True, False), renewed
        await client.cancel(made["id"])
        renewed = (await http.post(f"/stages/{job['stageId']}/lease/renew", headers=s, json=lease)).json()
        assert renewed.get("cancelRequested") is True, renewed


async def test_an_http_worker_stops_its_handler_when_its_pipeline_is_cancelled(service, billing):
    _, key = billing
    started, stopped = asyncio.Event(), asyncio.Event()
    worker = HttpWorker(service.url, key, "cooperative", wait_seconds=2)

    @worker.handler("Endless")
    async def endless(job: dict[str, Any]) -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            stopped.set()
            raise
        return "never"

    running = asyncio.create_task(worker.run())
    try:
        async with PipelinesClient(service.url, key) as client:
            made = await client.create(one_stage("Endless"))
            await asyncio.wait_for(started.wait(), 20)
            await client.cancel(made["id"])
            # the next renewal (a third of the lease) says so, and the handler stops
            await asyncio.wait_for(stopped.wait(), 2 * float(worker.session["lease"]["ttlSeconds"]) + 5)
    finally:
        worker.stop()
        await asyncio.wait_for(running, 30)


async def test_a_long_poll_whose_client_went_away_takes_no_job(service, billing):
    _, key = billing
    async with PipelinesClient(service.url, key) as client, httpx.AsyncClient(base_url=service.url) as http:
        boot, s = await bootstrap(http, key, ["Gone"])
        # a poll of 30 s whose client gives up after one (curl --max-time): its connection closes
        async with httpx.AsyncClient(base_url=service.url, timeout=1.0) as impatient:
            with pytest.raises(httpx.ReadTimeout):
                await impatient.post("/jobs/pull", headers=s, json={"waitSeconds": 30})
        live = asyncio.create_task(http.post("/jobs/pull", headers=s, json={"waitSeconds": 10}, timeout=20))
        made = await client.create(one_stage("Gone"))
        r = await live
        assert r.status_code == 200, "no job came to the poll whose client is there"
        job = r.json()
        # the first attempt, at once: not the second, after the first's lease ran out on the dead poll
        assert (job["pipelineId"], job["attempt"]) == (made["id"], 1), job
        done = await http.post(f"/stages/{job['stageId']}/result", headers=s, json={
            "executionId": job["executionId"], "attempt": 1, "isSuccess": True, "output": "ok"})
        assert done.status_code == 202, done.text
        history = await client.history(made["id"])
        assert not [h for h in history if "LEASE_EXPIRED" in str(h["error"])], history


async def test_an_identical_result_sent_again_is_accepted_whatever_it_carries_and_whenever_it_comes(service, billing):
    _, key = billing
    async with PipelinesClient(service.url, key) as client, httpx.AsyncClient(base_url=service.url) as http:
        made = await client.create(one_stage("Grow", "first"))
        _, s = await bootstrap(http, key, ["Grow"])
        job = (await http.post("/jobs/pull", headers=s, json={"waitSeconds": 10})).json()
        result = {"executionId": job["executionId"], "attempt": job["attempt"], "isSuccess": True, "output": "grown",
                  "appendStages": [{"stageName": "second", "stageHandlerName": "Grow"}],
                  "contextItems": [{"key": "seen", "value": "yes"},
                                   {"key": "token", "value": "s3cret", "isSensitive": True}],
                  "logs": [{"message": "grew", "logLevel": "Information", "created": "2026-12-01T10:00:00Z"}]}
        path = f"/stages/{job['stageId']}/result"
        first = await http.post(path, headers=s, json=result)
        assert first.status_code == 202, first.text
        again = await http.post(path, headers=s, json=result)  # its 202 was lost: the worker sends it again
        assert (again.status_code, again.json()) == (202, {"accepted": True}), again.text
        # the pipeline moves on: the appended stage runs, the pipeline completes
        second = (await http.post("/jobs/pull", headers=s, json={"waitSeconds": 10})).json()
        assert second["stageName"] == "second"
        assert (await http.post(f"/stages/{second['stageId']}/result", headers=s, json={
            "executionId": second["executionId"], "attempt": second["attempt"], "isSuccess": True})).status_code == 202
        await until(lambda: _completed(client, made["id"]), 20, "completed pipeline")
        late = await http.post(path, headers=s, json=result)
        assert (late.status_code, late.json()) == (202, {"accepted": True}), late.text
        # a result that is not the one accepted is stale, and changes nothing
        other = await http.post(path, headers=s, json={**result, "output": "other"})
        assert other.status_code == 409 and other.json()["accepted"] is False, other.text
        view = await client.get(made["id"])
        assert [(st["name"], st["status"], st["output"]) for st in view["stages"]] == [
            ("first", "Completed", "grown"), ("second", "Completed", None)]


async def _completed(client: PipelinesClient, pid: int) -> bool:
    return (await client.get(pid))["status"] == "Completed"


async def test_a_result_of_an_execution_the_stage_never_had_is_stale_and_in_the_history(service, billing):
    _, key = billing
    async with PipelinesClient(service.url, key) as client, httpx.AsyncClient(base_url=service.url) as http:
        made = await client.create({"name": "two", "stages": [{"stageName": "a", "stageHandlerName": "Two"},
                                                              {"stageName": "b", "stageHandlerName": "Two"}]})
        _, s = await bootstrap(http, key, ["Two"])
        job = (await http.post("/jobs/pull", headers=s, json={"waitSeconds": 10})).json()
        other_stage = made["stages"][1]["id"]
        for stage, execution in ((job["stageId"], "no-such-execution"), (other_stage, job["executionId"])):
            r = await http.post(f"/stages/{stage}/result", headers=s, json={
                "executionId": execution, "attempt": 1, "isSuccess": True, "output": "x"})
            assert r.status_code == 409, r.text
            assert r.json()["accepted"] is False and r.json()["reason"], r.text
        refused = [h for h in await client.history(made["id"]) if h["kind"] == "result.refused"]
        assert sorted((h["value"]["executionId"], h["value"]["stageId"]) for h in refused) == sorted([
            ("no-such-execution", job["stageId"]), (job["executionId"], other_stage)])
        view = await client.get(made["id"])
        assert view["stages"][0]["status"] in ("Pending", "Running") and view["stages"][1]["status"] == "NotStarted", view


async def test_a_silent_worker_is_offline_and_an_http_worker_heartbeats(service, billing):
    _, key = billing
    async with httpx.AsyncClient(base_url=service.url, headers={"X-API-Key": key}) as http:
        boot, _ = await bootstrap(http, key, ["Quiet"], name="silent")
        interval = boot["heartbeat"]["intervalSeconds"]

        async def state_of(name: str) -> dict[str, Any] | None:
            return next((w for w in (await http.get("/workers")).json() if w["workerName"] == name), None)

        assert (await state_of("silent"))["state"] == "ready"
        await until(lambda: _in_state(state_of, "silent", "offline"), 4 * interval + 5, "silent worker shown offline")

        worker = HttpWorker(service.url, key, "beating", wait_seconds=2)
        worker.handler("Beat")(lambda job: "ok")
        running = asyncio.create_task(worker.run())
        try:
            async def beat_long_after_start() -> bool:  # its heartbeats keep it ready past three intervals
                w = await state_of("beating")
                return w is not None and w["state"] == "ready" and \
                    _seconds(w["lastHeartbeat"]) - _seconds(w["startedAt"]) > 3.5 * interval
            await until(beat_long_after_start, 4 * interval + 5, "heartbeat three intervals after the start")
        finally:
            worker.stop()
            await asyncio.wait_for(running, 30)
        assert (await state_of("beating"))["state"] == "stopped"


async def _in_state(state_of: Callable[[str], Awaitable[dict[str, Any] | None]], name: str, state: str) -> bool:
    w = await state_of(name)
    return w is not None and w["state"] == state


def _seconds(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp).timestamp()
