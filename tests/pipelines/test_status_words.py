"""A worked example of adding a status: a pipeline's and a stage's status words, each with its
tone, are one table in ``flowli.pipelines`` (``PIPELINE_STATUSES``, ``STAGE_STATUSES``), and every
room that shows or checks them reads that table: the list filter of ``GET /pipelines``, the
OpenAPI document's enums, and the dashboard, which styles a status by its tone (five rules)
rather than by its word. Adding a status is adding it to its table, beside the decider's rule
that sets it; here the test adds one to the tables alone and sees it accepted and shown."""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

import pytest

from flowli import Registry
from flowli.catalog import RUN_TONES
from flowli.dashboard import Dashboard
from flowli.domain import STATUS_TONES, Tone
from flowli.http import create_app
from flowli.pipelines import PIPELINE_STATUSES, STAGE_STATUSES, Applications, PipelineInputError, install

pytestmark = pytest.mark.integration


def test_every_status_word_of_every_audience_has_one_tone() -> None:
    tables = {"execution": STATUS_TONES, "catalog run": RUN_TONES, "pipeline": PIPELINE_STATUSES,
              "stage": STAGE_STATUSES}
    seen: dict[str, tuple[str, Tone]] = {}
    for audience, table in tables.items():
        assert table, audience
        for word, tone in table.items():
            assert isinstance(tone, Tone), (audience, word)
            if word in seen:  # a word two audiences share looks the same to both
                assert seen[word][1] is tone, (word, seen[word], (audience, tone))
            seen.setdefault(word, (audience, tone))
    assert seen["WaitingForApproval"][1] is Tone.WAITING and seen["remediation_pending"][1] is Tone.WAITING
    assert seen["Failed"][1] is Tone.BAD and seen["COMPLETED"][1] is Tone.OK


async def test_a_status_added_to_its_table_is_filtered_documented_and_shown(open_engine: Any, monkeypatch: Any):
    # the one change of the example: the word and its tone, in flowli.pipelines' tables
    monkeypatch.setitem(PIPELINE_STATUSES, "Held", Tone.WAITING)
    monkeypatch.setitem(STAGE_STATUSES, "Held", Tone.WAITING)
    registry = Registry()
    install(registry)
    async with open_engine(registry, worker=False) as engine:
        _, key = await Applications(engine).create("billing")
        service = create_app(engine)
        access = await service.services.applications.authenticate(key)
        pipelines = service.services.pipelines

        # the list filter knows the new word, and names it among the statuses of a refusal
        assert (await pipelines.list(access, statuses=["Held"]))["totalCount"] == 0
        with pytest.raises(PipelineInputError) as refused:
            await pipelines.list(access, statuses=["Parked"])
        assert str(refused.value).startswith("statuses: 'Parked' is not a pipeline status (")
        assert "Held" in str(refused.value) and "WaitingForApproval" not in str(refused.value)

        # the dashboard shows it in its tone: a row of the runs list, a stage of a run, a node
        dashboard = Dashboard(service.routes, engine, service.services)
        now = datetime.now(timezone.utc)
        row = dashboard.templates.get_template("_run_row.html").render(r=SimpleNamespace(
            eid="e1", workflow="flowli.pipeline", version="2", pipeline=7, status="Held", created_at=now,
            updated_at=now))
        assert '<span class="status tone-waiting">Held</span>' in row
        counts = dashboard.templates.get_template("_counts.html").render(counts={"Pipelines": {"Held": 2, "Completed": 1}})
        assert '<span class="status tone-waiting">Held</span> 2' in counts
        assert '<span class="status tone-ok">Completed</span> 1' in counts
        unknown = dashboard.templates.get_template("_counts.html").render(counts={"Pipelines": {"Parked": 1}})
        assert '<span class="status tone-idle">Parked</span>' in unknown  # a word no table knows


async def test_the_openapi_document_lists_the_tables_words(open_engine: Any) -> None:
    registry = Registry()
    install(registry)
    async with open_engine(registry, worker=False) as engine:
        components = create_app(engine).api.openapi()["components"]["schemas"]
    assert components["PipelineOut"]["properties"]["status"]["enum"] == list(PIPELINE_STATUSES)
    assert components["StageOut"]["properties"]["status"]["enum"] == list(STAGE_STATUSES)
