"""A pipeline's ids are stored before its execution starts (issue: the records of a creation are
not yet written in one transition). A list made in between, or after a crash there, leaves that
pipeline out instead of answering 404 for the whole application (seen under load: a schedule's
firing made ``GET /pipelines`` fail)."""

from __future__ import annotations

import pytest

from flowli.pipelines import NotFound

pytestmark = pytest.mark.integration


async def test_a_pipeline_whose_execution_is_not_started_is_left_out_of_lists(open_pipelines):
    async with open_pipelines() as (engine, access, pipelines):
        made, _ = await pipelines.create(access, {"name": "real", "pipelineKeywords": [{"key": "k", "value": "v"}],
                                                  "stages": [{"stageName": "s", "stageHandlerName": "H"}]},
                                         idempotent=False)
        # what a creation has written when its execution is not started yet: the pipeline's record
        # (an item of kind "pipeline" keyed by the eid it will start), nothing else
        orphan, _ = await engine.items.put("pipeline", "billing", "0190f0f0-0000-7000-8000-000000000000",
                                           {"name": "half-made", "idempotencyKey": None}, engine.clock.now())
        listed = await pipelines.list(access)
        assert [p["id"] for p in listed["items"]] == [made["id"]] and listed["totalCount"] == 1
        for filters in ({"statuses": ["NotStarted", "Running"]}, {"keywords": ["k:v"]}, {"search": "half"}):
            found = await pipelines.list(access, **filters)
            assert [p["id"] for p in found["items"]] == ([] if "search" in filters else [made["id"]]), filters
        with pytest.raises(NotFound, match=f"no pipeline of execution {orphan.key}"):
            await pipelines.get(access, orphan.id)
