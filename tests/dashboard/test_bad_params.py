"""The dashboard's query parameters past their range, against a real ``flowli serve``: a number
of 20 digits (past the store's 64 bits) or a number of seconds past any date is refused with 400
naming the parameter, never a 500."""

from __future__ import annotations

import re

import pytest

from ..served import log_checked
from .conftest import Tenants, logged_in, pipeline

pytestmark = pytest.mark.e2e

TWENTY = "9" * 20


async def test_numbers_past_their_range_in_a_pages_query_are_refused_naming_the_parameter(tenants: Tenants):
    url = tenants.service.url
    await pipeline(url, tenants.billing_key, name="ranged")
    with log_checked(tenants.service):
        async with logged_in(url, tenants.ann) as ann:
            [eid] = re.findall(r'href="/runs/([^"?]+)"', (await ann.get("/runs")).text)
            for name in ("before", "attempt"):
                r = await ann.get(f"/runs/{eid}", params={name: TWENTY})
                assert r.status_code == 400 and name in r.text, (name, r.status_code, r.text[-500:])
                assert (await ann.get(f"/runs/{eid}", params={name: "3"})).status_code == 200
            for older in ("1e22", "1" + "0" * 22, "inf", "nan"):
                r = await ann.get("/stuck", params={"older_than": older})
                assert r.status_code == 400 and "older_than" in r.text, (older, r.status_code, r.text[-500:])
            assert (await ann.get("/stuck", params={"older_than": "60"})).status_code == 200
            for name, value in (("since", "0001-01-01T00:00+01:00"), ("until", "9999-12-31T23:59-01:00"),
                                ("cursor", TWENTY), ("cursor", "x" * 300)):
                r = await ann.get("/runs", params={name: value})
                assert r.status_code in (200, 400), (name, value, r.status_code, r.text[-500:])
            r = await ann.get(f"/runs/{eid}/events", params={"after": TWENTY})
            assert r.status_code == 400 and "after" in r.text, (r.status_code, r.text[-500:])
