"""Lists of pipelines are a read model (the index the decider writes with each state), on both
backends: each filter of the contract picks exactly its rows, newest first, with the count of
all matches; a sensitive context value is never searchable; and a page costs the same few store
reads whatever the number of pipelines stored (no read per pipeline)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from flowli import Registry
from flowli.pipelines import Applications, Pipelines, install
from flowli.testing import store_of

from ..engine.conftest import wait_idle

pytestmark = pytest.mark.integration


def body(name: str, keyword: str, context: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"name": name, "pipelineKeywords": [{"key": "team", "value": keyword}],
            "pipelineContextItems": context or [],
            "stages": [{"stageName": "s", "stageHandlerName": "H"}]}


async def test_each_filter_picks_exactly_its_rows(open_engine: Any) -> None:
    registry = Registry()
    install(registry)
    async with open_engine(registry, worker=False) as engine, engine.worker(queues=("pipelines",)):
        apps = Applications(engine)
        _, key = await apps.create("billing")
        _, other_key = await apps.create("other")
        access, other = await apps.authenticate(key), await apps.authenticate(other_key)
        pipelines = Pipelines(engine)
        made = []
        for i, (name, team) in enumerate([("invoice", "a"), ("refund", "b"), ("invoice", "b"), ("payout", "a"),
                                         ("invoice", "a")]):
            context = [{"key": "customer", "value": f"ACME-{i}", "valueType": "string"},
                       {"key": "token", "value": f"secret-{i}", "isSensitive": True}]
            p, _ = await pipelines.create(access, body(name, team, context), idempotent=False)
            made.append(p["id"])
        await pipelines.create(other, body("invoice", "a"), idempotent=False)
        await wait_idle(engine)
        await pipelines.pause(access, made[1])
        await pipelines.cancel(access, made[3])
        one, two, three, four, five = made

        async def ids(**filters: Any) -> tuple[list[int], int]:
            page = await pipelines.list(access, **filters)
            return [p["id"] for p in page["items"]], page["totalCount"]

        assert await ids() == ([five, four, three, two, one], 5)
        assert await ids(size=2, page=2) == ([three, two], 5)
        assert await ids(statuses=["Paused"]) == ([two], 1)
        assert await ids(statuses=["Cancelled", "Running"]) == ([five, four, three, one], 4)
        assert await ids(name="invoice") == ([five, three, one], 3)
        assert await ids(keywords=["team:b"]) == ([three, two], 2)
        assert await ids(keywords=["team:a"], name="invoice") == ([five, one], 2)
        assert await ids(search="REFUND") == ([two], 1)
        assert await ids(search="acme-3") == ([four], 1)  # a context value that is not sensitive
        assert await ids(search="secret-3") == ([], 0)  # a sensitive one is never searchable
        assert await ids(search=str(three)) == ([three], 1)
        listed = (await pipelines.list(access, statuses=["Paused"]))["items"][0]
        assert listed == await pipelines.get(access, two)  # a row is the pipeline's own view


async def test_a_page_reads_the_store_the_same_few_times_for_any_number_of_pipelines(open_pipelines: Any) -> None:
    async with open_pipelines() as (engine, access, pipelines), engine.worker(queues=("pipelines",)):
        store = store_of(engine)
        calls: list[str] = []
        names = ("read_execution", "read_state", "read_journal", "read_tasks", "read_states", "read_executions")
        originals = {n: getattr(store, n) for n in names}

        def counted(name: str) -> Any:
            async def call(*args: Any, **kwargs: Any) -> Any:
                calls.append(name)
                return await originals[name](*args, **kwargs)
            return call

        reads = []
        for total in (3, 30):
            while len((await pipelines.list(access, size=500))["items"]) < total:
                await pipelines.create(access, body("p", "a"), idempotent=False)
            while await engine.tasks(queue="pipelines"):  # every start decided: nothing runs meanwhile
                await asyncio.sleep(0.01)
            for n in names:  # wrapped on the instance to count the engine's calls, then put back
                setattr(store, n, counted(n))
            try:
                calls.clear()
                page = await pipelines.list(access, size=500, statuses=["Running"])
                assert page["totalCount"] == total
                reads.append(sorted(calls))
            finally:
                for n in names:
                    setattr(store, n, originals[n])
        assert reads[0] == reads[1] == ["read_states"]  # the page, its total and its open attempts in one call
