"""``/runs``: the Python executions and the pipelines of one of the user's applications, newest
first, 50 a page, with the counts per status, each audience in its own words: a Python run's
status is the engine's (``suspended``), a pipeline's its own (``Running``), and a status filter
takes either vocabulary. A pipeline status lists pipelines from the pipelines' read model (their
index: status, name, keyword, text and time are filters of it, a page at the cost of its
answer). An engine status lists Python runs: status, workflow, application and time range are
filters of the projection's index; a pipeline's name, a keyword (``key:value``) and free text are
matched on each candidate's declaration (its arguments: a pipeline's name, keywords and context,
where a sensitive value is stored as ``***`` and so never matches), a bounded scan of the newest
candidates that says where it stopped."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from flowli.domain import ExecutionRecord, Status
from flowli.engine import StateQuery
from flowli.pipelines import PIPELINE_STATUSES, WORKFLOW

from ._refusals import Refused
from ._rows import declaration, in_words, summary

if TYPE_CHECKING:
    from ._app import Dashboard

PAGE_SIZE = 50
SCAN = 200
"""Candidates read per round of a matched filter (name, keyword, text)."""
SCAN_MAX = 5000
"""The most candidates one page of a matched filter reads; the page says where it stopped."""
STATUSES = tuple(s.value for s in Status)
"""A Python run's statuses (the engine's words)."""
PIPELINE_WORDS = tuple(PIPELINE_STATUSES)
"""A pipeline's statuses (its own words)."""


def routes(d: Dashboard) -> list[Route]:
    async def runs(request: Request) -> Response:
        user = await d.user(request)
        application = d.application(request, user)
        f, since, until = filters(request)
        cursor = request.query_params.get("cursor") or None
        page, live = None, None
        if application is not None:
            position = await d.engine.log_position()  # before the page: what follows it is streamed
            page = await _page(d, application, f, since, until, cursor)
            if cursor is None:  # the first page follows the runs' changes live
                live = "/runs/events?" + urlencode({**{k: v for k, v in f.items() if v}, "application": application,
                                                    "after": position})
        return d.page(request, "runs.html", user, application=application, page=page, filters=f, statuses=STATUSES,
                      pipeline_statuses=PIPELINE_WORDS, live=live)

    return [Route("/runs", runs)]


def filters(request: Request) -> tuple[dict[str, str], datetime | None, datetime | None]:
    """The runs list's filters of a request, checked (Refused 400 names the one that is wrong)."""
    q = request.query_params
    f = {k: (q.get(k) or "").strip() for k in ("status", "workflow", "pipeline", "keyword", "text", "since", "until")}
    if f["status"] and f["status"] not in STATUSES + PIPELINE_WORDS:
        raise Refused(400, f"status must be a Python run's ({', '.join(STATUSES)}) or a pipeline's"
                           f" ({', '.join(PIPELINE_WORDS)}), not {f['status']!r}")
    if f["status"] in PIPELINE_WORDS and f["workflow"] not in ("", WORKFLOW):
        raise Refused(400, f"{f['status']} is a pipeline's status, and runs of {f['workflow']} are not pipelines:"
                           " clear one of the two filters")
    if f["status"] in STATUSES and (f["pipeline"] or f["workflow"] == WORKFLOW):
        raise Refused(400, f"{f['status']} is a Python run's status; a pipeline's are {', '.join(PIPELINE_WORDS)}")
    if f["keyword"] and ":" not in f["keyword"]:
        raise Refused(400, f"keyword must be key:value, not {f['keyword']!r}")
    if f["pipeline"] and f["workflow"] not in ("", WORKFLOW):
        raise Refused(400, f"a pipeline is a run of {WORKFLOW}, not of {f['workflow']}: clear one of the two filters")
    return f, _time(f["since"], "since"), _time(f["until"], "until")


def accepts(f: dict[str, str], since: datetime | None, until: datetime | None, record: ExecutionRecord) -> bool:
    """Whether a run passes every filter of the list but a pipeline status, which its row in
    words says (``shown``): the live list asks both of each change."""
    if f["status"] in PIPELINE_WORDS and record.workflow != WORKFLOW:
        return False
    if f["status"] in STATUSES and (record.status.value != f["status"] or record.workflow == WORKFLOW):
        return False
    if (f["workflow"] or (WORKFLOW if f["pipeline"] else "")) not in ("", record.workflow):
        return False
    if since is not None and record.created_at < since or until is not None and record.created_at >= until:
        return False
    return _matches(record, f["pipeline"] or None, f["keyword"], f["text"])


def shown(f: dict[str, str], row: dict[str, Any]) -> bool:
    """Whether a row in words (``_rows.in_words``) passes the list's pipeline status."""
    return f["status"] not in PIPELINE_WORDS or row["status"] == f["status"]


async def counts(d: Dashboard, application: str, f: dict[str, str], since: datetime | None,
                 until: datetime | None) -> dict[str, dict[str, int]]:
    """The runs per status, each audience in its words, within the list's workflow, pipeline
    name and time range: the Python runs per engine status (the projection's counts, less the
    pipelines' when both are listed), the pipelines per pipeline status (their index's counts)."""
    workflow = WORKFLOW if f["pipeline"] else f["workflow"] or None
    python: dict[str, int] = {}
    if workflow != WORKFLOW:
        python = (await d.engine.list(None, workflow, 1, application=application, since=since, until=until)).counts
        if workflow is None:
            theirs = (await d.engine.list(None, WORKFLOW, 1, application=application, since=since,
                                          until=until)).counts
            python = {k: n - theirs.get(k, 0) for k, n in python.items() if n > theirs.get(k, 0)}
    pipelines: dict[str, int] = {}
    if workflow in (None, WORKFLOW):
        counted = await d.engine.decided_counts(StateQuery(
            WORKFLOW, application, name=f["pipeline"] or None,
            since=since.timestamp() if since else None, until=until.timestamp() if until else None))
        pipelines = {word: counted[word] for word in PIPELINE_WORDS if word in counted}
    return {"Python runs": python, "Pipelines": pipelines}


def _time(text: str, field: str) -> datetime | None:
    if not text:
        return None
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise Refused(400, f"{field} must be a date and time (YYYY-MM-DDTHH:MM), not {text!r}") from None
    return at if at.tzinfo else at.replace(tzinfo=timezone.utc)


async def _page(d: Dashboard, application: str, f: dict[str, str], since: datetime | None, until: datetime | None,
                cursor: str | None) -> dict[str, Any]:
    counted = await counts(d, application, f, since, until)
    if f["status"] in PIPELINE_WORDS:
        return {**await _pipelines(d, application, f, since, until, cursor), "counts": counted}
    return {**await _runs(d, application, f, since, until, cursor), "counts": counted}


async def _pipelines(d: Dashboard, application: str, f: dict[str, str], since: datetime | None,
                     until: datetime | None, cursor: str | None) -> dict[str, Any]:
    """A page of pipelines of one status, from their index (the cursor: how many came before)."""
    offset = _offset(cursor)
    query = StateQuery(WORKFLOW, application, labels=(f["status"],), name=f["pipeline"] or None,
                       tags=(f["keyword"],) if f["keyword"] else (), text=f["text"] or None,
                       since=since.timestamp() if since else None, until=until.timestamp() if until else None,
                       offset=offset, limit=PAGE_SIZE)
    rows, total = await d.engine.decided(query)
    items = await in_words(d, application, [summary(r.record, r.record) for r in rows])
    more = offset + len(rows) < total
    return {"items": items, "next": str(offset + len(rows)) if more else None, "scanned": None}


def _offset(cursor: str | None) -> int:
    if not cursor:
        return 0
    if not cursor.isdigit():
        raise Refused(400, f"cursor must be the number of pipelines before the page, not {cursor!r}")
    return int(cursor)


async def _runs(d: Dashboard, application: str, f: dict[str, str], since: datetime | None, until: datetime | None,
                cursor: str | None) -> dict[str, Any]:
    pipeline_name = f["pipeline"] or None
    workflow = WORKFLOW if pipeline_name is not None else f["workflow"] or None
    python_only = f["status"] in STATUSES and workflow is None
    matched = pipeline_name is not None or bool(f["keyword"] or f["text"]) or python_only
    try:
        first = await d.engine.list(f["status"] or None, workflow, SCAN if matched else PAGE_SIZE,
                                    application=application, cursor=cursor, since=since, until=until)
    except ValueError as exc:
        raise Refused(400, str(exc)) from None
    if not matched:
        return {"items": await in_words(d, application, [summary(s, None) for s in first]), "next": first.next,
                "scanned": None}
    items: list[dict[str, Any]] = []
    page, scanned, last = first, 0, cursor
    while True:
        # the records come in no set order, and without the runs archived meanwhile: each row
        # is paired with its own record by its eid
        records = {r.eid: r for r in await d.engine.statuses([s.eid for s in page], application=application)}
        for s in page:
            scanned += 1
            last = s.cursor
            record = records.get(s.eid)
            if record is not None and _matches(record, pipeline_name, f["keyword"], f["text"]) \
                    and not (python_only and record.workflow == WORKFLOW):
                items.append(summary(s, record))
                if len(items) == PAGE_SIZE:
                    break
        if len(items) == PAGE_SIZE or page.next is None or scanned >= SCAN_MAX:
            break
        page = await d.engine.list(f["status"] or None, workflow, SCAN, application=application, cursor=page.next,
                                   since=since, until=until)
    consumed = not page.items or last == page.items[-1].cursor
    more = page.next is not None or not consumed
    return {"items": await in_words(d, application, items), "next": last if more else None,
            "scanned": scanned if scanned >= SCAN_MAX else None}


def _matches(record: ExecutionRecord, name: str | None, keyword: str, text: str) -> bool:
    spec = declaration(record)
    if name is not None and (spec is None or spec.get("name") != name):
        return False
    if keyword:
        key, _, value = keyword.partition(":")
        keywords = (spec or {}).get("keywords") or []
        if not any(k.get("key") == key and k.get("value") == value for k in keywords):
            return False
    if text:
        if spec is not None:
            shown = [spec.get("name"), *[f"{k.get('key')}:{k.get('value')}" for k in spec.get("keywords") or []],
                     *[f"{c.get('key')} {c.get('value')}" for c in spec.get("context") or [] if not c.get("isSensitive")]]
            haystack = " ".join(str(x) for x in shown)
        else:
            haystack = json.dumps(record.args, default=str)
        if text.lower() not in haystack.lower():
            return False
    return True

