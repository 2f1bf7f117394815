"""Schedules: a stored trigger (cron with a time zone, an interval, or one instant) and what to
start at each firing. They are store items (kind ``schedule``), scoped by application. Every
process that runs a sweeper fires the due ones; a firing's start is keyed by the schedule and
its instant, so each firing starts exactly one run however many processes fire it.

What a firing starts: an execution of a workflow (``engine.schedule``), or what a layer above
registered for its kind (``engine.on_fire``: the pipelines layer creates a pipeline). The schedule
is advanced past a firing in the write that starts its run, only if it is still as the firing
read it: a pause that answered before that write leaves nothing started, and a firing written
before a pause is the last one (``engine.fire_schedules``)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from typing import Any, Awaitable, Callable, Sequence
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from flowli.domain import FlowliError

SCHEDULE = "schedule"
Firer = Callable[[Any, datetime, Sequence[Any]], Awaitable[Any]]
"""``fire(item, instant, items)``: start what the schedule item says, for the firing at
``instant``, with ``items`` (``NewItem``: the schedule advanced past the firing, as it was read)
written in the write that creates what it starts. A schedule changed since it was read (paused,
deleted, fired by another process) refuses that write with StaleItem: nothing starts."""
MIN_INTERVAL, MAX_INTERVAL = 0.5, 31_622_400
"""The range of ``intervalSeconds``: half a second to 366 days."""
EARLIEST, LATEST = datetime(1970, 1, 1, tzinfo=timezone.utc), datetime(9000, 1, 1, tzinfo=timezone.utc)
"""The range of an instant (``runAt``): from 1970 to before the year 9000."""
MAX_NAME = 200
"""The longest name of a schedule (characters)."""


class ScheduleError(FlowliError):
    """A schedule's trigger or target is not valid: the message names the field."""


def parse_instant(value: Any, field: str = "runAt") -> datetime:
    if isinstance(value, datetime):
        at = value
    elif isinstance(value, str):
        try:
            at = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ScheduleError(f"{field} must be an ISO 8601 instant, got {value!r}") from None
    else:
        raise ScheduleError(f"{field} must be an ISO 8601 instant, got {value!r}")
    if at.tzinfo is None:
        raise ScheduleError(f"{field} must carry its offset (Z or +01:00), got {value!r}")
    try:
        in_utc = at.astimezone(timezone.utc)
    except OverflowError:  # an offset that takes it past year 1 or 9999
        in_utc = None
    if in_utc is None or not EARLIEST <= in_utc < LATEST:
        raise ScheduleError(f"{field} must be from {EARLIEST:%Y-%m-%d} to {LATEST:%Y-%m-%d}, got {value!r}")
    return in_utc


def trigger(cron: Any = None, tz: Any = None, interval: Any = None, run_at: Any = None) -> dict[str, Any]:
    """The trigger of a schedule, validated: exactly one of cron, interval (seconds) or run_at."""
    given = [name for name, v in (("cron", cron), ("intervalSeconds", interval), ("runAt", run_at)) if v is not None]
    if len(given) != 1:
        raise ScheduleError("a schedule takes exactly one trigger: cron, intervalSeconds or runAt"
                            + (f" (got {', '.join(given)})" if given else ""))
    if cron is not None:
        from croniter import CroniterBadDateError, croniter  # here: only a cron schedule pays its import

        if not isinstance(cron, str) or not croniter.is_valid(cron):
            raise ScheduleError(f"cron {cron!r} is not a cron expression such as '0 9 * * 1-5'")
        zone = tz or "UTC"
        if not isinstance(zone, str):
            raise ScheduleError(f"timezone must be a time zone name such as Europe/Berlin, got {tz!r}")
        try:
            where = ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ScheduleError(f"timezone {zone!r} is not a time zone name such as Europe/Berlin") from None
        try:  # from the start of a leap year: a day that exists at all comes within eight years
            croniter(cron, datetime(2000, 1, 1, tzinfo=where), max_years_between_matches=8).get_next(datetime)
        except CroniterBadDateError:
            raise ScheduleError(f"cron {cron!r} never fires (no such day)") from None
        return {"cron": cron, "timezone": zone}
    if tz is not None:
        raise ScheduleError("timezone goes with cron only")
    if interval is not None:
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or interval <= 0:
            raise ScheduleError(f"intervalSeconds must be a positive number, got {interval!r}")
        if not math.isfinite(interval) or not MIN_INTERVAL <= interval <= MAX_INTERVAL:
            raise ScheduleError(f"intervalSeconds must be from {MIN_INTERVAL} to {MAX_INTERVAL} seconds (366 days),"
                                f" got {interval!r}")
        return {"intervalSeconds": interval}
    return {"runAt": parse_instant(run_at).isoformat()}


def next_fire(t: dict[str, Any], after: datetime, created: datetime) -> datetime | None:
    """The first firing instant of trigger ``t`` strictly after ``after`` (None: no more)."""
    if "cron" in t:
        from croniter import croniter  # here: only a cron schedule pays its import

        zone = ZoneInfo(t["timezone"])
        nxt: datetime = croniter(t["cron"], after.astimezone(zone)).get_next(datetime)
        return nxt.astimezone(timezone.utc)
    if "intervalSeconds" in t:
        step = timedelta(seconds=t["intervalSeconds"])
        n = int((after - created) / step) + 1
        return created + n * step
    at = parse_instant(t["runAt"])
    return at if at > after else None


def iso(at: datetime | None) -> str | None:
    return None if at is None else at.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def firing_key(item: Any, instant: datetime) -> str:
    return f"schedule:{item.id}:{instant.astimezone(timezone.utc).isoformat()}"
