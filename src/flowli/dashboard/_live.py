"""Live pages: ``/runs/{eid}/events`` streams a run's new journal entries as server-sent events
(each an ``entry`` event with its timeline row, then one ``state`` event with the run's live
section, per batch of entries that arrived together; ``end`` once the run is terminal). It
follows ``engine.watch``, which the engine's own wake-ups drive (in this process the hub every
commit touches; PostgreSQL's notifications from other processes), so an append reaches the page
without the browser or the server polling the store. Only the user's own runs are streamed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from sse_starlette.sse import EventSourceResponse
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from flowli.domain import Entry

from . import _run

if TYPE_CHECKING:
    from ._app import Dashboard

PING = 15
"""Seconds between keep-alive comments on an idle stream."""


def routes(d: Dashboard) -> list[Route]:
    async def events(request: Request) -> Response:
        user = await d.user(request)
        application, record = await _run.find(d, user, request.path_params["eid"])
        q = request.query_params
        after = int(q["after"]) if (q.get("after") or "").isdigit() else 0
        want = {k: q.get(k) or "" for k in ("frame", "kind", "attempt")}

        def shown(row: dict[str, Any]) -> bool:
            return ((not want["frame"] or row["fid"] == want["frame"]) and (not want["kind"] or row["kind"] == want["kind"])
                    and (not want["attempt"] or str(row["attempt"]) == want["attempt"]))

        async def stream() -> AsyncIterator[dict[str, str]]:
            entries: asyncio.Queue[Entry] = asyncio.Queue()

            async def follow() -> None:
                async for entry in d.engine.watch(record.eid, after, application=application):
                    entries.put_nowait(entry)

            follower = asyncio.create_task(follow())
            try:
                entry_tpl = d.templates.get_template("_entry.html")
                live_tpl = d.templates.get_template("_run_live.html")
                while True:
                    batch = [await entries.get()]
                    while not entries.empty():
                        batch.append(entries.get_nowait())
                    for e in batch:
                        row = _run.row(e)
                        if shown(row):
                            yield {"event": "entry", "data": entry_tpl.render(e=row)}
                    now = await d.engine.status(record.eid, application=application)
                    s = await _run.state(d, user, application, now)
                    s.pop("journal")
                    yield {"event": "state", "data": live_tpl.render(user=user, application=application,
                                                                     rerun_warning=_run.RERUN_WARNING, **s)}
                    if now.terminal:
                        yield {"event": "end", "data": now.status.value}
                        return
            finally:
                follower.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await follower

        return EventSourceResponse(stream(), ping=PING, headers={"Cache-Control": "no-store"})

    return [Route("/runs/{eid:path}/events", events)]
