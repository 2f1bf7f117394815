"""A busy pipeline service frees what each request built by reference counting alone: creates,
batch pulls, results (a success, a failure retried), an approval and a cancel leave no object of
flowli in a reference cycle. (A cycle in one command's path made every command's write, with its
entries and items, wait for the cyclic collector, which then ran every few hundred commands and
took a tenth of the service's CPU.)"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from flowli.pipelines import Workers

from ..garbage import Garbage

pytestmark = pytest.mark.integration


def stages(*names: str, **options: Any) -> list[dict[str, Any]]:
    return [{"stageName": n, "stageHandlerName": "H", "input": n, **options} for n in names]


def results(jobs: list[dict[str, Any]], **answer: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    for job in jobs:
        yield str(job["stageId"]), {"executionId": job["executionId"], "attempt": job["attempt"], **answer}


async def test_creates_pulls_results_an_approval_and_a_cancel_leave_no_cycle(open_pipelines):
    async with open_pipelines() as (engine, access, pipelines):
        workers = Workers(engine, pipelines)
        boot = await workers.bootstrap(access, {"workerName": "w", "supportedHandlers": ["H"]})
        session = await workers.session(boot["workerSessionToken"])
        with Garbage() as garbage:
            made = [await pipelines.create(access, {"name": f"p{i}", "idempotencyKey": f"k{i}",
                                                    "stages": stages("a", "b", options={"maxRetries": 1, "retryInterval": 1})}, idempotent=True)
                    for i in range(4)]
            await pipelines.create(access, {"name": "legacy", "stages": stages("a")}, idempotent=False)
            jobs = await workers.pull_batch(session, {"max": 10, "waitSeconds": 0})
            assert len(jobs) == 5
            first, *others = jobs
            for stage_id, answer in results([first], isSuccess=False, errorCode="E", errorMessage="once"):
                assert (await workers.result(session, stage_id, answer))[0] == 202
            for stage_id, answer in results(others[:2], isSuccess=True, output="ok"):
                assert (await workers.result(session, stage_id, answer))[0] == 202
            waiting = others[2]
            for stage_id, answer in results([waiting], isSuccess=True, isWaitingForApproval=True):
                assert (await workers.result(session, stage_id, answer))[0] == 202
            await pipelines.decide(access, waiting["stageId"], True, "fine")
            await pipelines.cancel(access, made[1][0]["id"])
            assert (await pipelines.get(access, made[0][0]["id"]))["status"] == "Running"
            assert (await pipelines.list(access, search="p"))["totalCount"] == 4
        assert dict(garbage.found) == {}
