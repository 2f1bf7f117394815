"""``/overview``, the first page after login: one application's runs started, completed and
failed over a window (the last hour, day or week) per interval and per name (a pipeline's name,
else the workflow), the failure rate, the queues with jobs ready (per handler: how many, how long
the oldest has waited, how many live workers serve it) and the live workers. Charts are drawn on
the server (``_charts``) beside the tables they picture. ``/overview/events`` keeps the page live:
the figures again after the runs of the application change (at most once per ``THROTTLE``
seconds) and every ``REFRESH`` seconds (a queue's oldest job ages with nothing written)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from sse_starlette.sse import EventSourceResponse
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from flowli.pipelines import WORKFLOW, handler_of

from . import _charts
from ._durations import took
from ._live import PING, batches
from ._refusals import Refused

if TYPE_CHECKING:
    from ._app import Dashboard
    from ._auth import User

WINDOWS: dict[str, tuple[timedelta, timedelta, str]] = {
    "1h": (timedelta(hours=1), timedelta(minutes=5), "%H:%M"),
    "24h": (timedelta(hours=24), timedelta(hours=1), "%d %b %H:00"),
    "7d": (timedelta(days=7), timedelta(hours=6), "%d %b %H:00"),
}
"""The windows the page offers: how far back, the width of one interval, how an interval's start
is written."""
DEFAULT_WINDOW = "24h"
NAMES_SHOWN = 50
"""The names the table lists at most, the busiest first (the page says how many it left out)."""
LIVE_STATES = ("ready", "draining")
"""The states of an HTTP worker that is live (``GET /workers``: one silent too long is offline)."""
THROTTLE = 2.0
REFRESH = 15.0


@dataclass
class Figures:
    """The runs of one name (or of all) in a window: per interval, and their totals."""

    intervals: list[_charts.Interval]

    def total(self, what: str) -> int:
        if what == "started":
            return sum(i.started for i in self.intervals)
        return sum(i.ended.get(what, 0) for i in self.intervals)

    @property
    def failure_rate(self) -> str:
        """The share of the runs that ended (completed or failed) that failed, as the page says it."""
        failed, completed = self.total("failed"), self.total("completed")
        return f"{100 * failed / (failed + completed):.1f} %" if failed + completed else "no run ended"


def window_of(request: Request) -> str:
    """The window a request asks for (Refused 400 names the ones there are)."""
    window = (request.query_params.get("window") or DEFAULT_WINDOW).strip()
    if window not in WINDOWS:
        raise Refused(400, f"window must be one of {', '.join(WINDOWS)}, not {window[:40]!r}")
    return window


def _start(now: datetime, span: timedelta, width: timedelta) -> datetime:
    """The start of the window's first interval: intervals begin on multiples of their width (UTC),
    the last one is the interval now is in."""
    seconds = width.total_seconds()
    current = datetime.fromtimestamp(now.timestamp() // seconds * seconds, timezone.utc)
    return current - span + width


async def figures(d: Dashboard, user: User, application: str, window: str) -> dict[str, Any]:
    """What the page's live section shows (see the module's note)."""
    span, width, label = WINDOWS[window]
    now = d.engine.clock.now()
    since = _start(now, span, width)
    n = int(span / width)
    starts = [since + k * width for k in range(n)]

    def empty() -> Figures:
        return Figures([_charts.Interval(s.strftime(label), 0, {}) for s in starts])

    everything, by_name = empty(), dict[tuple[str, str | None], Figures]()
    for workflow, name, k, what, count in await d.engine.activity(since, width, application=application):
        if not 0 <= k < n:
            continue  # a run ended in the interval now is in, counted by an instant after now's
        for f in (everything, by_name.setdefault((workflow, name), empty())):
            i = f.intervals[k]
            if what == "started":
                i.started += count
            else:
                i.ended[what] = i.ended.get(what, 0) + count
    names = sorted(by_name.items(), key=lambda kv: (-kv[1].total("started"), kv[0][1] or kv[0][0], kv[0][0]))
    access = await d.access(user, application)
    http_workers = [w for w in await d.workers.list(access) if w.get("state") in LIVE_STATES]
    serving: dict[str, int] = {}
    seen = await d.engine.workers()
    for w in seen:
        for queue in w.get("queues") or ():
            serving[queue] = serving.get(queue, 0) + 1
    queues = []
    for queue, depth, age in await d.engine.queue_depths(application=application):
        handler = handler_of(queue, application)
        queues.append({"what": "handler" if handler is not None else "queue", "name": handler or queue,
                       "depth": depth, "age": took(age), "served": serving.get(queue, 0)})
    title = f"Runs of {application} over the last {window}, per {_words(width)}"
    return {
        "window": window, "windows": list(WINDOWS), "since": since, "now": now, "totals": everything,
        "chart": _charts.activity(everything.intervals, title),
        "names": [_named(application, workflow, name, f, width) for (workflow, name), f in names[:NAMES_SHOWN]],
        "names_left": max(0, len(names) - NAMES_SHOWN), "queues": queues, "http_workers": http_workers,
        # the engine's workers serve every application's Python runs: an admin's figure
        "engine_workers": sum(1 for w in seen if w.get("kind") == "engine") if user.sees_all else None,
    }


def _named(application: str, workflow: str, name: str | None, f: Figures, width: timedelta) -> dict[str, Any]:
    """A row of the names' table: a pipeline's name links to its runs, a workflow to its own."""
    shown, query = (f"pipeline {name}", {"pipeline": name}) if workflow == WORKFLOW and name is not None \
        else (workflow if name is None else f"{workflow}: {name}", {"workflow": workflow})
    return {"name": shown, "href": "/runs?" + urlencode({"application": application, **query}), "figures": f,
            "spark": _charts.sparkline(f.intervals, f"Runs of {shown} that ended, per {_words(width)}")}


def _words(width: timedelta) -> str:
    minutes = int(width.total_seconds() // 60)
    return f"{minutes} minutes" if minutes < 60 else "hour" if minutes == 60 else f"{minutes // 60} hours"


def routes(d: Dashboard) -> list[Route]:
    async def overview(request: Request) -> Response:
        user = await d.user(request)
        application = d.application(request, user)
        window = window_of(request)
        shown = await figures(d, user, application, window) if application is not None else None
        live = "/overview/events?" + urlencode({"application": application, "window": window}) if shown else None
        return d.page(request, "overview.html", user, application=application, o=shown, live=live)

    async def events(request: Request) -> Response:
        user = await d.user(request)
        application = d.application(request, user)
        if application is None:
            raise Refused(404, "You are not assigned to any application.")
        window = window_of(request)
        template = d.templates.get_template("_overview_live.html")
        after = await d.engine.log_position()

        async def render() -> dict[str, str]:
            shown = await figures(d, user, application, window)
            return {"event": "state", "data": template.render(user=user, application=application, o=shown)}

        async def stream() -> AsyncIterator[dict[str, str]]:
            changes = batches(d.engine.watch(None, after, application=application))
            waiting: asyncio.Task[Any] | None = None
            try:
                while True:
                    waiting = waiting or asyncio.ensure_future(anext(changes))
                    done, _ = await asyncio.wait({waiting}, timeout=REFRESH)
                    if done:
                        waiting.result()
                        waiting = None
                    yield await render()
                    await asyncio.sleep(THROTTLE)  # what changes meanwhile shows in the next one
            finally:
                if waiting is not None:
                    waiting.cancel()
                    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration, Exception):
                        await waiting
                await changes.aclose()

        return EventSourceResponse(stream(), ping=PING, headers={"Cache-Control": "no-store"})

    return [Route("/overview", overview), Route("/overview/events", events)]
