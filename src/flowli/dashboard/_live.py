"""Live pages: ``/runs/{eid}/events`` streams a run's new journal entries as server-sent events
(each an ``entry`` event with its timeline row, then one ``state`` event with the run's live
section, per batch of entries that arrived together; ``end`` once the run is terminal). It
follows ``engine.watch``, which the engine's own wake-ups drive (in this process the hub every
commit touches; PostgreSQL's notifications from other processes), so an append reaches the page
without the browser or the server polling the store. ``/runs/events`` streams the changes of one
application's runs (the control log's lifecycle entries, of that application only): a ``run``
event per run changed (its new row, empty when it left the list's filters) and a ``counts``
event. Only the user's own applications are streamed."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import TYPE_CHECKING, Any

from sse_starlette.sse import EventSourceResponse
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from flowli.domain import Entry

from . import _rows, _run, _runs
from ._refusals import Refused

if TYPE_CHECKING:
    from ._app import Dashboard

PING = 15
"""Seconds between keep-alive comments on an idle stream."""


def routes(d: Dashboard) -> list[Route]:
    async def events(request: Request) -> Response:
        user = await d.user(request)
        application, record = await _run.find(d, user, request.path_params["eid"])
        q = request.query_params
        after = _run.number((q.get("after") or "").strip(), "after") or 0
        want = {k: q.get(k) or "" for k in ("frame", "kind", "attempt")}
        subset = (q.get("stages") or "").strip()
        stage_page = _run.number((q.get("stage_page") or "").strip(), "stage_page") or 0

        def shown(row: dict[str, Any]) -> bool:
            return ((not want["frame"] or row["fid"] == want["frame"]) and (not want["kind"] or row["kind"] == want["kind"])
                    and (not want["attempt"] or str(row["attempt"]) == want["attempt"]))

        async def live_state() -> tuple[Any, dict[str, str]]:
            now = await d.engine.status(record.eid, application=application)
            s = await _run.state(d, user, application, now, subset, stage_page)
            return now, {"event": "state", "data": live_tpl.render(user=user, application=application,
                                                                     rerun_warning=_run.RERUN_WARNING, **s)}

        live_tpl = d.templates.get_template("_run_live.html")

        async def stream() -> AsyncIterator[dict[str, str]]:
            entry_tpl = d.templates.get_template("_entry.html")
            # the state as it is now first: the page's was read before its last entry, and an entry
            # written in between (a decider writes a command's every change at once) is not streamed
            yield (await live_state())[1]
            async for batch in batches(d.engine.watch(record.eid, after, application=application)):
                for e in batch:
                    row = _run.row(e)
                    if shown(row):
                        yield {"event": "entry", "data": entry_tpl.render(e=row)}
                now, shown_state = await live_state()
                yield shown_state
                if now.terminal:
                    yield {"event": "end", "data": now.status.value}
                    return
            now, shown_state = await live_state()  # the watch of a run that ended: nothing more comes
            yield shown_state
            yield {"event": "end", "data": now.status.value}

        return EventSourceResponse(stream(), ping=PING, headers={"Cache-Control": "no-store"})

    async def runs_events(request: Request) -> Response:
        user = await d.user(request)
        application = d.application(request, user)
        if application is None:
            raise Refused(404, "You are not assigned to any application.")
        f, since, until = _runs.filters(request)
        given = _run.number((request.query_params.get("after") or "").strip(), "after")
        after = given if given is not None else await d.engine.log_position()

        async def stream() -> AsyncIterator[dict[str, str]]:
            row_tpl = d.templates.get_template("_run_row.html")
            counts_tpl = d.templates.get_template("_counts.html")
            async for batch in batches(d.engine.watch(None, after, application=application)):
                eids = list(dict.fromkeys(e.eid for e in batch))
                records = await d.engine.statuses(eids, application=application)
                kept = [r for r in records if _runs.accepts(f, since, until, r)]
                rows = {r["eid"]: r for r in await _rows.rows_of(d, application, kept) if _runs.shown(f, r)}
                for record in records:
                    row = rows.get(record.eid)
                    yield {"event": "run", "data": json.dumps(
                        {"eid": record.eid, "html": row_tpl.render(r=row) if row is not None else ""})}
                counted = await _runs.counts(d, application, f, since, until)
                yield {"event": "counts", "data": counts_tpl.render(counts=counted)}

        return EventSourceResponse(stream(), ping=PING, headers={"Cache-Control": "no-store"})

    return [Route("/runs/events", runs_events), Route("/runs/{eid:path}/events", events)]


async def batches(entries: AsyncIterator[Entry]) -> AsyncGenerator[list[Entry], None]:
    """The entries of a watch in batches: each what arrived while the last one was handled."""
    queue: asyncio.Queue[Entry] = asyncio.Queue()

    async def follow() -> None:
        async for entry in entries:
            queue.put_nowait(entry)

    follower = asyncio.create_task(follow())
    try:
        while True:
            batch = [await queue.get()]
            while not queue.empty():
                batch.append(queue.get_nowait())
            yield batch
    finally:
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await follower
