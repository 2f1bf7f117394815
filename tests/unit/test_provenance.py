"""A provenance read back from its JSON (every entry, task and message read has one) equals the
one written, and the parts that recur (its actor, site and code) are one shared frozen instance."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from flowli.domain import Actor, Code, Provenance, Site

pytestmark = pytest.mark.unit


def made(worker: str, at: datetime, **code: str) -> Provenance:
    return Provenance(actor=Actor("worker", worker), site=Site(host="h", pid=7, worker=worker),
                      code=Code(workflow="wf", version="1", **code), at=at, attempt=2)


def test_a_provenance_read_back_equals_the_one_written() -> None:
    at = datetime(2026, 12, 7, 8, 0, 1, 250, tzinfo=timezone.utc)
    p = made("w1", at, frame_kind="step", frame_name="charge")
    assert Provenance.from_json(p.to_json()) == p
    assert Provenance.from_json({**p.to_json(), "on_behalf_of": "ann"}).on_behalf_of == "ann"


def test_the_recurring_parts_of_provenances_read_back_are_shared() -> None:
    one = Provenance.from_json(made("w1", datetime(2026, 12, 7, tzinfo=timezone.utc)).to_json())
    two = Provenance.from_json(made("w1", datetime(2026, 12, 8, tzinfo=timezone.utc)).to_json())
    other = Provenance.from_json(made("w2", datetime(2026, 12, 8, tzinfo=timezone.utc)).to_json())
    assert one.at != two.at
    assert one.actor is two.actor and one.site is two.site and one.code is two.code
    assert other.actor is not one.actor and other.actor == Actor("worker", "w2") and other.code is one.code


def test_a_part_with_a_field_that_is_not_hashable_is_read_all_the_same() -> None:
    data = made("w1", datetime(2026, 12, 7, tzinfo=timezone.utc)).to_json()
    data["site"]["region"] = ["eu", "west"]  # not written by flowli: read as it is, never shared
    p = Provenance.from_json(data)
    assert p.site.region == ["eu", "west"] and p.site.host == "h"
