"""The operators' pages: ``/inbox`` (open reviews and stages waiting for approval, decided with a
reason), ``/stuck`` (``list_stuck_workflows``, force-terminate behind a confirmation naming the
guards), ``/workers``, ``/schedules`` (pause and resume) and ``/catalog`` (types by namespace,
their schemas, compositions drawn as DAGs). Each reads and acts in the user's applications, with
the user as the actor, through the services the HTTP API and the MCP server use."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from flowli.access import Access
from flowli.catalog import PARKED, CatalogError
from flowli.domain import DECIDE_RUNS, OPERATE_RUNS, FlowliError, checked_eid
from flowli.patterns import answer_review, inbox

from . import _graph, _rows
from ._refusals import Refused, refusal

if TYPE_CHECKING:
    from ._app import Dashboard

PIPELINES_SCANNED = 500
GATES_SHOWN = 100
"""The remediation gates the inbox lists at most (the oldest first beyond that wait their turn)."""
"""The inbox looks for stages waiting for approval in this many live pipelines at most."""
STUCK_AFTER = 600
"""The default idle seconds before a run is listed as stuck (the page's ``older_than`` changes it)."""
WORKERS_SEEN = timedelta(minutes=10)


def _stamp(at: Any) -> str:
    """An instant of a worker's row as the page shows it (the rows hold datetimes)."""
    return at.isoformat(timespec="seconds") if isinstance(at, datetime) else str(at or "")


async def _acting(d: Dashboard, request: Request, capability: str = OPERATE_RUNS) -> tuple[Any, Access]:
    """The form of an action on one of these pages (CSRF-checked, refused to a role without
    ``capability``) and the user as the caller in the form's application."""
    user = await d.user(request)
    form = await d.form(request, user, capability)
    application = str(form.get("application") or "") or d.application(request, user)
    if application is None:
        raise Refused(404, "You are not assigned to any application.")
    return form, await d.access(user, application)  # another application than theirs: refused


async def _gates(d: Dashboard, access: Access) -> list[dict[str, Any]]:
    """The compositions parked at a remediation gate, each with its step, the reason and the fix."""
    gates = []
    parked = await d.catalog.list(status=PARKED, limit=GATES_SHOWN, by=access.principal,
                                  application=access.application)
    for run in parked["runs"]:
        shown = await d.catalog.status(run["workflow_id"], by=access.principal, application=access.application)
        gate = (shown.get("state_data") or {}).get("remediation")
        if gate:
            gates.append({"eid": run["workflow_id"], "type": run["workflow_type"], "step": gate.get("step"),
                          "reason": gate.get("reason"), "fix": json.dumps(gate.get("fix"), default=str)[:400]})
    return gates


def routes(d: Dashboard) -> list[Route]:
    async def inbox_page(request: Request) -> Response:
        user = await d.user(request)
        application = d.application(request, user)
        reviews: list[dict[str, Any]] = []
        stages: list[dict[str, Any]] = []
        gates: list[dict[str, Any]] = []
        if application is not None:
            access = await d.access(user, application)
            for r in await inbox(d.engine, application=application):
                reviews.append({"eid": r.eid, "subject": r.subject, "queue": r.queue, "opened_at": r.opened_at,
                                "data": json.dumps(r.data, default=str)[:400]})
            for eid, view in await d.pipelines.waiting(access, PIPELINES_SCANNED):
                stages += [{"pipeline": view, "stage": x, "eid": eid} for x in view["stages"]
                           if x["status"] == "WaitingForApproval"]
            gates = await _gates(d, access)
        return d.page(request, "inbox.html", user, application=application, reviews=reviews, stages=stages,
                      gates=gates, done=request.query_params.get("done") in ("approved", "rejected"))

    async def decide(request: Request) -> Response:
        form, access = await _acting(d, request, DECIDE_RUNS)
        application = access.application
        approved = form.get("decision") == "approve"
        if form.get("decision") not in ("approve", "reject"):
            raise Refused(400, "decision must be approve or reject")
        reason = str(form.get("reason") or "").strip() or None
        if not approved and reason is None and not form.get("gate"):  # a gate's resolution carries no reason
            raise Refused(400, "A rejection needs a reason: say why in the reason field.")
        try:
            if form.get("stage"):
                await d.pipelines.decide(access, form.get("stage"), approved, reason)
            elif form.get("gate"):  # a remediation gate: approved is remediated, rejected denied
                await d.catalog.resolve(checked_eid(form.get("gate")), "remediated" if approved else "denied",
                                        by=access.principal, application=application)
            else:
                await answer_review(d.engine, checked_eid(form.get("eid")), approved, by=access.principal,
                                    reason=reason, application=application)
        except FlowliError as exc:
            raise refusal(exc, "decide") from None
        done = "approved" if approved else "rejected"
        return RedirectResponse(f"/inbox?application={application}&done={done}", status_code=303)

    async def stuck(request: Request) -> Response:
        user = await d.user(request)
        application = d.application(request, user)
        older = request.query_params.get("older_than") or str(STUCK_AFTER)
        if not older.isdigit():
            raise Refused(400, f"older_than must be a number of seconds, not {older!r}")
        runs: list[dict[str, Any]] = []
        if application is not None:
            access = await d.access(user, application)
            try:  # the catalog checks its range
                runs = await d.catalog.stuck(float(older), by=access.principal, application=application)
            except CatalogError as exc:
                if type(exc) is not CatalogError:
                    raise
                raise Refused(400, f"older_than: {exc}") from None
        # each run in its audience's words, as the runs list shows it (a pipeline's status is its own)
        shown: dict[str, dict[str, Any]] = {}
        if application is not None and runs:
            records = await d.engine.statuses([r["workflow_id"] for r in runs], application=application)
            shown = {r["eid"]: r for r in await _rows.rows_of(d, application, records)}
        return d.page(request, "stuck.html", user, application=application, runs=runs, older_than=older,
                      shown=shown, done=request.query_params.get("done") == "terminated")

    async def terminate(request: Request) -> Response:
        form, access = await _acting(d, request)
        application = access.application
        if form.get("confirm") != "yes":
            raise Refused(400, "Force-terminate needs its confirmation: tick the box that names the guards.")
        seq = str(form.get("expected_last_seq") or "")
        try:
            await d.catalog.terminate(str(form.get("eid") or ""), str(form.get("reason") or ""),
                                      float(str(form.get("min_idle") or STUCK_AFTER)),
                                      int(seq) if seq.isdigit() else None, by=access.principal, application=application)
        except ValueError:
            raise Refused(400, "min_idle must be a number of seconds") from None
        except FlowliError as exc:
            if type(exc) is CatalogError:  # bad input (a number out of its range), not a run's state
                raise Refused(400, f"Cannot force-terminate: {exc}") from None
            raise refusal(exc, "force-terminate") from None
        return RedirectResponse(f"/stuck?application={application}&done=terminated", status_code=303)

    async def workers(request: Request) -> Response:
        user = await d.user(request)
        application = d.application(request, user)
        listed = await d.workers.list(await d.access(user, application)) if application else []
        engine_workers = None
        if user.sees_all:  # the engine's rows: its workers and the consumers that said they live
            engine_workers = [{**w, "started_at": _stamp(w.get("started_at")), "seen_at": _stamp(w.get("seen_at"))}
                              for w in await d.engine.workers(seen_within=WORKERS_SEEN)]
        return d.page(request, "workers.html", user, application=application, workers=listed,
                      engine_workers=engine_workers)

    async def schedules(request: Request) -> Response:
        user = await d.user(request)
        application = d.application(request, user)
        listed = await d.schedules.list(await d.access(user, application)) if application else []
        return d.page(request, "schedules.html", user, application=application, schedules=listed,
                      done=request.query_params.get("done"))

    async def schedule_state(request: Request) -> Response:
        form, access = await _acting(d, request)
        application = access.application
        state = {"pause": "paused", "resume": "enabled"}.get(str(form.get("action")))
        if state is None:
            raise Refused(400, "action must be pause or resume")
        try:
            await d.schedules.set_state(access, request.path_params["sid"], state)
        except FlowliError as exc:
            raise refusal(exc, f"{form.get('action')} the schedule") from None
        return RedirectResponse(f"/schedules?application={application}&done={state}", status_code=303)

    async def catalog(request: Request) -> Response:
        user = await d.user(request)
        application = d.application(request, user)
        if application is None:
            return d.page(request, "catalog.html", user, application=None, namespaces=[], chosen=None)
        by = (await d.access(user, application)).principal
        types = await d.catalog.types(by=by)
        spaces: dict[str, list[dict[str, Any]]] = {}
        for t in types:
            spaces.setdefault(t["namespace"] or "(none)", []).append(t)
        compositions = await d.catalog.compositions(by=by, application=application)
        chosen = None
        name = request.query_params.get("type")
        if name:
            try:
                schema = await d.catalog.schema(name, by=by, application=application)
                dag = await d.catalog.dag(name, by=by, application=application)
            except FlowliError as exc:
                raise refusal(exc, f"show {name}") from None
            steps = [(s["name"], layer["name"], "") for layer in dag["layers"] for s in layer["steps"]]
            try:
                drawing = _graph.svg(_graph.layered(steps), f"Layers of {name}")
            except _graph.TooLarge as exc:
                drawing = None
                schema["too_large"] = str(exc)
            chosen = {"name": name, "schema": json.dumps(schema, indent=2, default=str), "graph": drawing}
        return d.page(request, "catalog.html", user, application=application, namespaces=sorted(spaces.items()),
                      compositions=compositions, chosen=chosen)

    return [Route("/inbox", inbox_page), Route("/inbox/decide", decide, methods=["POST"]),
            Route("/stuck", stuck), Route("/stuck/terminate", terminate, methods=["POST"]),
            Route("/workers", workers), Route("/schedules", schedules),
            Route("/schedules/{sid}/state", schedule_state, methods=["POST"]), Route("/catalog", catalog)]
