"""A run's page (``/runs/{eid}``; a pipeline's also at ``/pipelines/{id}``): its facts, its
stages drawn as a DAG, context and keywords (sensitive values ``***``), evidence, the journal as
a timeline (the newest page, filtered by frame, kind and attempt; a refused late result is an
entry of its own) and the actions the run allows. An action is a form (CSRF-checked, refused to
a viewer) that goes through the same services as the HTTP API and the CLI, with the user as the
actor, and comes back to the page."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from flowli.access import Access, ServiceError
from flowli.catalog import DAG, decided, steps_of
from flowli.catalog import remediation as remediation_of
from flowli.domain import (
    DECIDE_RUNS,
    OPERATE_RUNS,
    EntryKind,
    ExecutionRecord,
    FlowliError,
    Status,
    UnknownExecutionError,
    is_eid,
)
from flowli.pipelines import WORKFLOW
from flowli.pipelines import redact as redact_value

from . import _graph, _python_run
from ._refusals import Refused, refusal

if TYPE_CHECKING:
    from ._app import Dashboard
    from ._auth import User

REFUSED = "result.refused"
"""The timeline's word for a late result the service refused (kept beside the journal)."""
KINDS = (*(k.value for k in EntryKind), REFUSED)
STAGES_SHOWN = 100
"""The stages a pipeline's page lists at once (a page of them: a pipeline of 5,000 stages is 50)."""
ENTRIES_SHOWN = 200
"""The timeline shows this many entries a page, the newest first."""
VALUE_CHARS = 400
"""A journal entry's value shows this many characters at most in the timeline."""
MAX_NUMBER = 2**63 - 1
"""The largest number a page's query may give (a seq, an attempt): the store's are 64-bit."""
RERUN_WARNING = ("A rerun queues the stage again and clears its stored output and retry state; it does not "
                 "rewind later stages. Treat it as replaying side effects, not as automatic compensation.")
DONE = {"cancel": "Cancellation requested.", "pause": "Pause requested.", "resume": "Resume requested.",
        "retry": "The run is retried from its last good point.", "rerun": "The stage is queued again.",
        "skip": "The stage is skipped.", "approve": "The stage is approved.", "reject": "The stage is rejected.",
        "remediated": "The remediation gate is resolved: the parked step runs again.",
        "denied": "The remediation gate is denied: completed steps are compensated and the run fails.",
        "signal": "The message is sent: the run resumes with it.",
        "migrate": "The run is migrated: it resumes on the version chosen, which replayed its journal."}

DECISIONS = ("approve", "reject", "remediated", "denied")
"""The actions of a run's page that answer a person's decision (``runs:decide``); the others act
on the run (``runs:operate``)."""


def routes(d: Dashboard) -> list[Route]:
    async def run(request: Request) -> Response:
        user = await d.user(request)
        return await _show(d, request, user, *await find(d, user, request.path_params["eid"]))

    async def pipeline(request: Request) -> Response:
        user = await d.user(request)
        pid = request.path_params["pid"]
        for application in user.applications:
            access = await d.access(user, application)
            try:
                view = await d.pipelines.get(access, pid)
            except ServiceError:
                continue
            eid = await _eid_of(d, access, view["id"])
            return await _show(d, request, user, application, await d.engine.status(eid, application=application))
        raise Refused(404, f"There is no pipeline {pid} in your applications.")

    async def act(request: Request) -> Response:
        user = await d.user(request)
        application, record = await find(d, user, request.path_params["eid"])
        form = await d.form(request, user, capability=None)
        action = str(form.get("action") or "")
        d.require(user, DECIDE_RUNS if action in DECISIONS else OPERATE_RUNS)
        try:
            await _act(d, await d.access(user, application), record, action, form)
        except FlowliError as exc:  # the services refuse with FlowliErrors, each its kind
            raise refusal(exc, action) from None
        return RedirectResponse(f"/runs/{record.eid}?done={action}", status_code=303)

    return [Route("/runs/{eid:path}/act", act, methods=["POST"]), Route("/runs/{eid:path}", run),
            Route("/pipelines/{pid}", pipeline)]


async def find(d: Dashboard, user: User, eid: str) -> tuple[str, ExecutionRecord]:
    """The run ``eid`` of one of the user's applications (another application's is unknown, as is
    an id without an eid's form, which reaches no store)."""
    for application in user.applications if is_eid(eid) else ():
        try:
            return application, await d.engine.status(eid, application=application)
        except UnknownExecutionError:
            continue
    raise Refused(404, f"There is no run {eid[:80]} in your applications.")


async def _eid_of(d: Dashboard, access: Access, pid: int) -> str:
    item = await d.engine.items.get("pipeline", int(pid))
    if item is None or item.application != access.application:
        raise Refused(404, f"There is no pipeline {pid} in your applications.")
    return str(item.key)


def _pipeline_id(record: ExecutionRecord) -> int | None:
    if record.workflow == WORKFLOW and record.args and isinstance(record.args[0], dict):
        return record.args[0].get("pipelineId")
    return None


async def state(d: Dashboard, user: User, application: str, record: ExecutionRecord,
                subset: str = "", stage_page: int = 0) -> dict[str, Any]:
    """What the live parts of the page show: the facts, the graph (of the nodes whose name holds
    ``subset``, when given) and the stages (a pipeline's), and the actions the run allows now."""
    access = await d.access(user, application)
    pid = _pipeline_id(record)
    # the whole journal, once, for what is built from it: a pipeline's stages, a dag's steps, a
    # remediation gate, a Python run's frames; the timeline reads its page on its own. A decider's
    # run is read from its stored state instead.
    journal: list[Any] = []
    dstate: Any = None
    if decided(record):
        dstate = (await d.engine.decider_state(record.eid, application=application))[1]
    else:
        journal = await d.engine.journal(record.eid, application=application)
    view = await d.pipelines.get(access, pid, journal=journal) if pid is not None else None
    nodes: list[_graph.Node] = []
    title = ""
    if view is not None:
        nodes = [_graph.Node(s["name"], tuple(s["dependsOn"]), s["status"], _label(s["status"], s["attempt"]))
                 for s in view["stages"]]
        title = f"Stages of pipeline {view['name']}"
    elif steps := steps_of(record, journal, dstate):
        nodes = _graph.layered([(x["name"], x["layer"], x["status"]) for x in steps])
        title = f"Steps of {record.eid}"
    graph, too_large = None, None
    if subset:
        nodes = [n for n in nodes if subset.lower() in n.name.lower()]
    if nodes:
        try:
            graph = _graph.svg(nodes, title)
        except _graph.TooLarge as exc:
            too_large = str(exc)
    gate = remediation_of(record, journal, dstate) if view is None and (journal or dstate) and not record.terminal \
        else None
    status = view["status"] if view is not None else record.status.value
    live = not record.terminal
    python = _python_run.sections(d, record, journal) if view is None and dstate is None and record.workflow != DAG \
        else None
    actions = {
        "cancel": live,
        # a message to the run's channel (what its ctx.receive waits for); the engine's own runs
        # (a pipeline, an approval, a composition) move on through their own operations
        "signal": live and not record.workflow.startswith("flowli."),
        "pause": view is not None and status in ("Running", "NotStarted"),
        "resume": view is not None and status == "Paused",
        "retry": view is None and record.status is Status.FAILED,
        "resolve": gate is not None,
        # another version of its workflow, checked first by the dry replay (engine.migrate)
        "migrate": bool(python and python["versions"]),
    }
    return {"record": record, "view": view, "graph": graph, "too_large": too_large, "status": status,
            "channels": waited_channels(record.eid, journal),
            **_stage_page(view, subset, stage_page),
            "actions": actions, "gate": gate, "python": python, "can_act": user.can_act, "can_decide": user.can_decide, "subset": subset,
            "drawn": len(nodes)}


def _stage_page(view: dict[str, Any] | None, subset: str, page: int) -> dict[str, Any]:
    """The page of a pipeline's stages table: STAGES_SHOWN stages (of those whose name holds
    ``subset``), page ``page`` of them (the last one when past it)."""
    if view is None:
        return {"stages": [], "stage_page": 0, "stage_pages": 0, "stages_listed": 0}
    listed = [x for x in view["stages"] if subset.lower() in x["name"].lower()] if subset else view["stages"]
    pages = max(1, -(-len(listed) // STAGES_SHOWN))
    page = min(page, pages - 1)
    shown = listed[page * STAGES_SHOWN:(page + 1) * STAGES_SHOWN]
    return {"stages": shown, "stage_page": page, "stage_pages": pages, "stages_listed": len(listed),
            "stage_first": page * STAGES_SHOWN + 1, "stage_last": page * STAGES_SHOWN + len(shown)}


def waited_channels(eid: str, journal: list[Any]) -> list[str]:
    """The channels a suspended run's last suspension waits on for a message (its own, by name)."""
    last = next((e for e in reversed(journal or []) if e.kind is EntryKind.EXECUTION_SUSPENDED), None)
    if last is None or not isinstance(last.value, dict):
        return []
    waits = last.value.get("waits") or []
    return [w["channel"].removeprefix(f"{eid}.") for w in waits
            if isinstance(w, dict) and w.get("kind") == "message" and isinstance(w.get("channel"), str)]


def _label(status: str, attempt: int) -> str:
    """What a stage's node says under its name: its status and attempt, short enough to fit."""
    if not attempt:
        return status
    long = f"{status} · attempt {attempt}"
    return long if len(long) <= _graph.NAME_CHARS + 2 else f"{status} · #{attempt}"


async def _show(d: Dashboard, request: Request, user: User, application: str, record: ExecutionRecord) -> Response:
    q = request.query_params
    s = await state(d, user, application, record, (q.get("stages") or "").strip(),
                    number((q.get("stage_page") or "").strip(), "stage_page") or 0)
    filters = {k: (q.get(k) or "").strip() for k in ("frame", "kind", "attempt", "before")}
    attempt, before = number(filters["attempt"], "attempt"), number(filters["before"], "before")
    if filters["kind"] and filters["kind"] not in KINDS:
        raise Refused(400, f"kind must be one of {', '.join(KINDS)}, not {filters['kind']!r}")
    kind = filters["kind"] or None
    entries: list[dict[str, Any]] = []
    matched = 0
    if kind != REFUSED:
        page, matched = await d.engine.journal_page(record.eid, fid=filters["frame"] or None, kind=kind,
                                                    attempt=attempt, before=before, limit=ENTRIES_SHOWN,
                                                    application=application)
        entries = [row(e) for e in page]
    more = len(entries) == ENTRIES_SHOWN
    if s["view"] is not None and before is None and not filters["frame"] and kind in (None, REFUSED):
        # a refused late result is no journal entry (nothing changed): it shows among the newest
        # those of the journal are in its page already, unless a filter left them out
        journaled = kind == REFUSED or attempt is not None
        refused = [r for r in await _refused_results(d, application, record.eid, journaled)
                   if attempt is None or r["attempt"] == attempt]
        matched += len(refused)
        entries = sorted(entries + refused, key=lambda e: e["at"], reverse=True)
    unfiltered = before is None and not filters["frame"] and kind is None and attempt is None
    # the live stream follows from the journal's last entry: the page's first one, unless filtered
    last_seq = max((e["seq"] for e in entries if e["seq"] is not None), default=0) if unfiltered else \
        next((e.seq or 0 for e in (await d.engine.journal_page(record.eid, limit=1, application=application))[0]), 0)
    evidence = [{"fid": e.fid, "attempt": e.attempt, "attachment": e.attachment,
                 "event": json.dumps(redact_value(e.event), default=str)[:VALUE_CHARS] if e.event else ""}
                for e in await d.engine.evidence(record.eid)][-ENTRIES_SHOWN:]
    done = DONE.get(q.get("done") or "")
    oldest = min((e["seq"] for e in entries if e["seq"] is not None), default=None)
    return d.page(request, "run.html", user, application=application, entries=entries, more=more, matched=matched,
                  filters=filters, kinds=KINDS, evidence=evidence, older=oldest if more else None,
                  context=_context(record, s["view"], s["python"]), rerun_warning=RERUN_WARNING, done=done,
                  last_seq=last_seq, **s)


def number(text: str, field: str) -> int | None:
    """A query's number (a seq, an attempt): None when not given; Refused 400 naming ``field``
    when it is not one from 0 to MAX_NUMBER."""
    if not text:
        return None
    if not (text.isascii() and text.isdigit()) or int(text) > MAX_NUMBER:
        raise Refused(400, f"{field} must be a number from 0 to {MAX_NUMBER}, not {text!r}")
    return int(text)


def _context(record: ExecutionRecord, view: dict[str, Any] | None, python: dict[str, Any] | None) -> dict[str, Any]:
    if view is not None:
        return {"items": view["pipelineContextItems"], "keywords": view["pipelineKeywords"], "args": None}
    if python is not None:  # its inputs by name, in a section of their own
        return {"items": [], "keywords": [], "args": None}
    return {"items": [], "keywords": [], "args": json.dumps(redact_value(record.args), default=str)[:4 * VALUE_CHARS]}


async def _refused_results(d: Dashboard, application: str, eid: str, journaled: bool) -> list[dict[str, Any]]:
    """The refused late results of a pipeline: the ones its journal announces (with
    ``journaled``), and the records that older code kept beside it."""
    out = []
    if journaled:
        announced, _ = await d.engine.journal_page(eid, kind=EntryKind.ANNOUNCED.value, limit=ENTRIES_SHOWN,
                                                   application=application)
        out += [x for x in map(row, announced) if x["kind"] == REFUSED]
    for r in await d.engine.items.list("refused", application, prefix=f"{eid}/"):
        b = r.body
        out.append({"seq": None, "kind": REFUSED, "fid": "", "attempt": b.get("attempt"),
                    "value": _short(redact_value(b)), "error_type": None, "error_code": b.get("errorCode"),
                    "error_message": b.get("reason"), "actor": str(b.get("actor") or ""), "site": "", "at": r.at})
    return out


def _short(value: Any) -> str:
    text = "" if value is None else json.dumps(value, default=str)
    return text if len(text) <= VALUE_CHARS else text[:VALUE_CHARS] + "…"


def row(entry: Any) -> dict[str, Any]:
    """A journal entry as the timeline shows it (the template escapes every field)."""
    error = entry.error or {}
    prov = entry.provenance
    kind, value = entry.kind.value, entry.value
    if entry.kind is EntryKind.EVENT and isinstance(value, dict):  # a decider's event, in its own words
        kind, value = str(value.get("event")), value.get("data")
    elif entry.kind is EntryKind.ANNOUNCED and isinstance(value, dict) and value.get("kind") == REFUSED \
            and isinstance(value.get("data"), dict):  # a late result the pipeline refused
        b = value["data"]
        return {"seq": entry.seq, "kind": REFUSED, "fid": "", "attempt": b.get("attempt"),
                "value": _short(redact_value(b)), "error_type": None, "error_code": b.get("errorCode"),
                "error_message": b.get("reason"), "actor": str(b.get("actor") or ""), "site": "",
                "at": prov.at if prov else None}
    return {"seq": entry.seq, "kind": kind, "fid": entry.fid or "", "attempt": entry.attempt,
            "value": _short(redact_value(value)), "error_type": error.get("type"), "error_code": error.get("code"),
            "error_message": error.get("message"), "actor": str(prov.actor) if prov else "",
            "site": (prov.site.worker or prov.site.host) if prov and prov.site else "", "at": prov.at if prov else None}


async def _act(d: Dashboard, access: Access, record: ExecutionRecord, action: str, form: Any) -> None:
    by, app = access.principal, access.application
    pid = _pipeline_id(record)
    stage = form.get("stage")
    if action == "cancel":
        if pid is not None:
            await d.pipelines.cancel(access, pid)
        else:
            await d.engine.cancel(record.eid, by=by, application=app)
    elif action in ("pause", "resume") and pid is not None:
        await (d.pipelines.pause if action == "pause" else d.pipelines.resume)(access, pid)
    elif action == "rerun" and pid is not None:
        if form.get("confirm") != "yes":
            raise Refused(400, "A rerun replays side effects: tick \"I understand\" to confirm it.")
        await d.pipelines.rerun(access, stage, False)
    elif action == "skip" and pid is not None:
        await d.pipelines.skip(access, stage)
    elif action in ("approve", "reject") and pid is not None:
        reason = str(form.get("reason") or "").strip() or None
        await d.pipelines.decide(access, stage, action == "approve", reason)
    elif action == "retry" and pid is None:
        await d.catalog.retry(record.eid, by=by, application=app)
    elif action in ("remediated", "denied") and pid is None:
        await d.catalog.resolve(record.eid, action, by=by, application=app)
    elif action == "migrate" and pid is None:
        version = str(form.get("version") or "").strip()
        if not version:
            raise Refused(400, "Choose the version to migrate the run to.")
        await d.engine.migrate(record.eid, version, by=by, application=app)
    elif action == "signal" and pid is None:
        text = str(form.get("payload") or "").strip() or "null"
        try:
            payload = json.loads(text)
        except ValueError as exc:
            raise Refused(400, f"The message must be JSON (null, a number, a string in quotes, an object...): {exc}") \
                from None
        await d.catalog.signal(record.eid, str(form.get("channel") or ""), payload, by=by, application=app)
    else:
        raise Refused(400, f"There is no action {action!r} for this run.")
