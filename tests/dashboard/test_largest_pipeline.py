"""A pipeline of the most stages a pipeline may have (1,000: ``MAX_STAGES``) on its page, against
the shared ``flowli serve``: the page lists its stages a hundred at a time (page 1 of 10, the next
page the next hundred), draws no graph of them all (it asks for a subset, which it then draws),
and weighs tens of kilobytes, not megabytes."""

from __future__ import annotations

import re

import httpx
import pytest

from flowli.pipelines import MAX_STAGES

from .conftest import Tenants, logged_in

pytestmark = pytest.mark.e2e

STAGES = MAX_STAGES


def stages(first: int, n: int) -> list[dict[str, str]]:
    return [{"stageName": f"s{i:04d}", "stageHandlerName": "NobodyServes"} for i in range(first, first + n)]


async def test_a_pipeline_of_the_most_stages_pages_its_stages_and_draws_a_subset(tenants: Tenants):
    url, key = tenants.service.url, tenants.billing_key
    async with httpx.AsyncClient(base_url=url, headers={"X-API-Key": key}, timeout=120) as api:
        made = await api.post("/pipelines", json={"name": "huge", "stages": stages(0, STAGES // 2)})
        assert made.status_code in (200, 201), made.text[:300]
        pid = made.json()["id"]
        added = await api.post(f"/pipelines/{pid}/stages", json={"stages": stages(STAGES // 2, STAGES // 2)})
        assert added.status_code == 200, added.text[:300]
        assert len((await api.get(f"/pipelines/{pid}")).json()["stages"]) == STAGES
    async with logged_in(url, tenants.vic) as vic:
        page = await vic.get(f"/pipelines/{pid}", headers={"Accept": "text/html"})
        assert page.status_code == 200
        assert len(page.content) < 150_000, len(page.content)
        rows = re.findall(r'<tr data-stage="(s\d{4})">', page.text)
        assert rows == [f"s{i:04d}" for i in range(100)]
        assert "Stages 1–100 of 1000" in page.text and "page 1 of 10" in page.text
        assert 'role="alert"' in page.text  # too many to draw: it asks for a subset
        eid = re.search(r'href="/runs/([^"?]+)/act"|action="/runs/([^"?]+)/act"|<dt>Run</dt><dd>([^<]+)</dd>', page.text)
        assert eid
        run = next(g for g in eid.groups() if g)
        second = await vic.get(f"/runs/{run}", params={"stage_page": "1"})
        assert re.findall(r'<tr data-stage="(s\d{4})">', second.text)[:2] == ["s0100", "s0101"]
        last = await vic.get(f"/runs/{run}", params={"stage_page": "999"})  # past the end: the last page
        assert re.findall(r'<tr data-stage="(s\d{4})">', last.text)[-1] == "s0999"
        subset = await vic.get(f"/runs/{run}", params={"stages": "s012"})
        assert "10 drawn" in subset.text and re.findall(r'<tr data-stage="(s\d{4})">', subset.text)[0] == "s0120"
        bad = await vic.get(f"/runs/{run}", params={"stage_page": "x"})
        assert bad.status_code == 400 and "stage_page must be a number" in bad.text
