"""Schedules' triggers and their next firing (``trigger``, ``next_fire``, ``firing_key`` of
``flowli.engine``; ``schedule_input`` of ``flowli.pipelines``): cron in a time zone, an
interval counted from the schedule's creation, one instant; each bad trigger refused in one
sentence naming the field."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any
from zoneinfo import ZoneInfo

import croniter  # noqa: F401  (imported with the module: its first import runs `file` on the interpreter, which the unit tier refuses in a test)
import pytest

from flowli.engine import ScheduleError, firing_key, next_fire, trigger
from flowli.pipelines import PipelineInputError, ScheduleIn, schedule_input

pytestmark = pytest.mark.unit

UTC = timezone.utc


def at(*args: int, tz: Any = UTC) -> datetime:
    return datetime(*args, tzinfo=tz)


# ---- cron -----------------------------------------------------------------------------------


def test_cron_fires_at_its_wall_clock_time_in_its_time_zone():
    weekdays = trigger(cron="0 9 * * 1-5", tz="Europe/Berlin")
    assert weekdays == {"cron": "0 9 * * 1-5", "timezone": "Europe/Berlin"}
    tuesday_noon = at(2026, 12, 1, 11)  # 12:00 in Berlin
    assert next_fire(weekdays, tuesday_noon, tuesday_noon) == at(2026, 12, 2, 8)
    friday = at(2026, 12, 4, 9)
    assert next_fire(weekdays, friday, friday) == at(2026, 12, 7, 8)  # Monday: no firing at the weekend
    # across the change to summer time (29 March 2026): 09:00 in Berlin is 07:00 UTC from then on
    assert next_fire(weekdays, at(2026, 3, 27, 12), at(2026, 3, 27, 12)) == at(2026, 3, 30, 7)
    new_york = trigger(cron="30 8 * * *", tz="America/New_York")
    first = next_fire(new_york, at(2026, 10, 31, 12), at(2026, 10, 31, 12))
    assert first == at(2026, 10, 31, 12, 30)  # 08:30 EDT
    assert next_fire(new_york, first, first) == at(2026, 11, 1, 13, 30)  # 08:30 EST, the day summer time ends


def test_cron_is_utc_by_default_strictly_after_and_answers_in_utc():
    quarterly = trigger(cron="*/15 * * * *")
    assert quarterly == {"cron": "*/15 * * * *", "timezone": "UTC"}
    assert trigger(cron="0 9 * * *", tz="") == {"cron": "0 9 * * *", "timezone": "UTC"}
    assert next_fire(quarterly, at(2030, 1, 1, 10, 7), at(2030, 1, 1)) == at(2030, 1, 1, 10, 15)
    assert next_fire(quarterly, at(2030, 1, 1, 10, 15), at(2030, 1, 1)) == at(2030, 1, 1, 10, 30)  # strictly after
    tokyo_time = at(2030, 1, 1, 19, 7, tz=ZoneInfo("Asia/Tokyo"))  # 10:07 UTC
    answer = next_fire(quarterly, tokyo_time, tokyo_time)
    assert answer == at(2030, 1, 1, 10, 15) and answer.utcoffset() == timedelta(0)


# ---- interval -------------------------------------------------------------------------------


def test_an_interval_fires_on_multiples_of_it_from_the_creation_strictly_after():
    created = at(2030, 1, 1, 12)
    hourly = trigger(interval=3600)
    assert hourly == {"intervalSeconds": 3600}
    assert next_fire(hourly, created, created) == at(2030, 1, 1, 13)  # the first firing is one interval on
    assert next_fire(hourly, at(2030, 1, 1, 13), created) == at(2030, 1, 1, 14)
    assert next_fire(hourly, at(2030, 1, 1, 13, 30), created) == at(2030, 1, 1, 14)
    # after a long stop the next firing is the next multiple: the missed ones are not made up
    assert next_fire(hourly, at(2030, 1, 1, 17, 10), created) == at(2030, 1, 1, 18)
    fast = trigger(interval=0.5)
    assert next_fire(fast, created + timedelta(seconds=1.2), created) == created + timedelta(seconds=1.5)


# ---- once -----------------------------------------------------------------------------------


def test_once_fires_at_its_instant_in_utc_then_never():
    once = trigger(run_at="2030-01-01T10:00:00+01:00")
    assert once == {"runAt": "2030-01-01T09:00:00+00:00"}
    assert trigger(run_at="2030-01-01T09:00:00Z") == once
    assert trigger(run_at=at(2030, 1, 1, 10, tz=timezone(timedelta(hours=1)))) == once
    before = at(2029, 12, 31)
    assert next_fire(once, before, before) == at(2030, 1, 1, 9)
    assert next_fire(once, at(2030, 1, 1, 9), before) is None  # its instant is not after itself
    assert next_fire(once, at(2030, 1, 2), before) is None


def test_a_firing_key_is_the_schedule_and_the_instant_in_utc():
    berlin = at(2026, 12, 2, 9, tz=ZoneInfo("Europe/Berlin"))
    assert firing_key(SimpleNamespace(id=4), berlin) == "schedule:4:2026-12-02T08:00:00+00:00"
    assert firing_key(SimpleNamespace(id=4), at(2026, 12, 2, 8)) == firing_key(SimpleNamespace(id=4), berlin)


# ---- refusals -------------------------------------------------------------------------------


@pytest.mark.parametrize(("given", "message"), [
    ({}, "a schedule takes exactly one trigger: cron, intervalSeconds or runAt"),
    ({"cron": "0 9 * * *", "interval": 5}, "a schedule takes exactly one trigger: cron, intervalSeconds or runAt"
                                           " (got cron, intervalSeconds)"),
    ({"interval": 5, "run_at": "2030-01-01T09:00:00Z"}, "a schedule takes exactly one trigger: cron, intervalSeconds"
                                                        " or runAt (got intervalSeconds, runAt)"),
    ({"cron": "every day"}, "cron 'every day' is not a cron expression such as '0 9 * * 1-5'"),
    ({"cron": "61 * * * *"}, "cron '61 * * * *' is not a cron expression such as '0 9 * * 1-5'"),
    ({"cron": 9}, "cron 9 is not a cron expression such as '0 9 * * 1-5'"),
    ({"cron": "0 9 * * *", "tz": "Mars/Base"}, "timezone 'Mars/Base' is not a time zone name such as Europe/Berlin"),
    ({"cron": "0 9 * * *", "tz": "../etc/passwd"},
     "timezone '../etc/passwd' is not a time zone name such as Europe/Berlin"),
    ({"cron": "0 9 * * *", "tz": 1}, "timezone must be a time zone name such as Europe/Berlin, got 1"),
    ({"interval": 60, "tz": "Europe/Berlin"}, "timezone goes with cron only"),
    ({"interval": -1}, "intervalSeconds must be a positive number, got -1"),
    ({"interval": 0}, "intervalSeconds must be a positive number, got 0"),
    ({"interval": True}, "intervalSeconds must be a positive number, got True"),
    ({"interval": "60"}, "intervalSeconds must be a positive number, got '60'"),
    ({"run_at": "tomorrow"}, "runAt must be an ISO 8601 instant, got 'tomorrow'"),
    ({"run_at": 1893488400}, "runAt must be an ISO 8601 instant, got 1893488400"),
    ({"run_at": "2026-12-01T10:00:00"}, "runAt must carry its offset (Z or +01:00), got '2026-12-01T10:00:00'"),
], ids=["none", "cron-and-interval", "interval-and-once", "words", "minute-61", "number", "unknown-zone",
        "zone-path", "zone-number", "zone-without-cron", "negative", "zero", "boolean", "text", "not-an-instant",
        "epoch-number", "no-offset"])
def test_each_bad_trigger_is_refused_naming_the_field(given, message):
    with pytest.raises(ScheduleError) as refused:
        trigger(**given)
    assert str(refused.value) == message


# ---- a pipeline schedule's body -----------------------------------------------------------------


def test_a_pipeline_schedule_validates_its_pipeline_before_anything_is_stored():
    pipeline = {"name": "nightly", "stages": [{"stageName": "a", "stageHandlerName": "H"}]}
    read = schedule_input({"name": "x", "cron": "0 9 * * *", "pipeline": pipeline})
    assert isinstance(read, ScheduleIn) and read.pipeline.model_dump(exclude_unset=True) == pipeline
    assert schedule_input(read) is read  # a body read already (the HTTP service's) is not read again
    for body, message in [([], "the body must be an object, got []"),
                          ({"name": "x", "intervalSeconds": 60}, "pipeline is required"),
                          ({"name": "x", "pipeline": "nightly"}, 'pipeline must be an object, got "nightly"'),
                          ({"pipeline": pipeline}, "name is required"),
                          ({"name": "x", "pipeline": {"name": "p", "stages": []}},
                           "stages: at least one stage is required"),
                          ({"name": "x", "pipeline": {"stages": pipeline["stages"]}}, "pipeline.name is required"),
                          ({"name": "x", "pipeline": {"name": " ", "stages": pipeline["stages"]}},
                           "name is required (a nonempty string)")]:
        with pytest.raises(PipelineInputError) as refused:
            schedule_input(body)
        assert str(refused.value) == message, body


@pytest.mark.parametrize(("given", "message"), [
    ({"interval": 1e-7}, "intervalSeconds must be from 0.5 to 31622400 seconds (366 days), got 1e-07"),
    ({"interval": 1e20}, "intervalSeconds must be from 0.5 to 31622400 seconds (366 days), got 1e+20"),
    ({"interval": float("inf")}, "intervalSeconds must be from 0.5 to 31622400 seconds (366 days), got inf"),
    ({"interval": float("nan")}, "intervalSeconds must be from 0.5 to 31622400 seconds (366 days), got nan"),
    ({"run_at": "0001-01-01T00:00:00+01:00"}, "runAt must be from 1970-01-01 to 9000-01-01, got"
                                              " '0001-01-01T00:00:00+01:00'"),
    ({"run_at": "9999-12-31T23:59:59-01:00"}, "runAt must be from 1970-01-01 to 9000-01-01, got"
                                              " '9999-12-31T23:59:59-01:00'"),
    ({"run_at": "9999-12-31T00:00:00Z"}, "runAt must be from 1970-01-01 to 9000-01-01, got '9999-12-31T00:00:00Z'"),
    ({"cron": "0 0 31 2 *"}, "cron '0 0 31 2 *' never fires (no such day)"),
    ({"cron": "0 0 30 2 *", "tz": "Europe/Berlin"}, "cron '0 0 30 2 *' never fires (no such day)"),
], ids=["interval-tiny", "interval-huge", "interval-inf", "interval-nan", "year-1", "year-9999-offset", "year-9999",
        "february-31", "february-30"])
def test_each_trigger_past_its_range_is_refused_naming_the_field(given, message):
    with pytest.raises(ScheduleError) as refused:
        trigger(**given)
    assert str(refused.value) == message


def test_the_ends_of_each_range_are_accepted():
    assert trigger(interval=0.5) == {"intervalSeconds": 0.5}
    assert trigger(interval=31_622_400) == {"intervalSeconds": 31_622_400}
    assert trigger(cron="0 0 29 2 *") == {"cron": "0 0 29 2 *", "timezone": "UTC"}  # every leap year
    assert trigger(run_at="8999-12-31T23:59:59Z") == {"runAt": "8999-12-31T23:59:59+00:00"}
    assert trigger(run_at="1970-01-01T00:00:00Z") == {"runAt": "1970-01-01T00:00:00+00:00"}
