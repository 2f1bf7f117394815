"""``Catalog(engine)``: the catalog of workflow types, the three-state view of runs, compositions
and the operations on runs, over the Engine (behind the MCP tools, the ``/catalog`` routes and
the CLI). Every method takes ``by`` (a Principal carries the tenant and the roles); reads need
``runs:read``, and every change is a transition that the RBAC middleware checks."""

from __future__ import annotations

import builtins
import json
import math
import weakref
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from flowli.domain import ExecutionRecord, Principal, Status, StepFailed, UnknownWorkflowError, checked_eid
from flowli.engine import Engine, Registry, problems, validation_error

from . import _rbac as rbac
from . import _runs as runs
from ._compose import VIRTUAL, Validation, compile_definition, content_hash, input_fields, validate
from ._dag import COMPOSITION, DAG, RESOLUTION, SAVE, conflict, install
from ._errors import (
    CatalogError,
    CompositionConflict,
    CompositionInvalid,
    InputsInvalid,
    RunStateError,
    UnknownType,
    suggest,
)
from ._types import CatalogType, lookup, namespace_of, types_of

if TYPE_CHECKING:
    from pydantic import BaseModel

By = str | Principal | None
_CATALOGS: weakref.WeakKeyDictionary[Registry, Catalog] = weakref.WeakKeyDictionary()
AUDIT = "audit.workflow-run.query"
MAX_IDLE_SECONDS = 3_153_600_000
"""The largest ``older_than_seconds`` and ``min_idle_seconds``: 100 years (365-day ones)."""


def seconds(value: Any, field: str) -> timedelta:
    """A number of seconds an operation takes (``older_than_seconds``, ``min_idle_seconds``):
    finite, from 0 to MAX_IDLE_SECONDS; CatalogError naming ``field`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise CatalogError(f"{field} must be a number of seconds >= 0, got {value!r}")
    if not math.isfinite(value) or value > MAX_IDLE_SECONDS:
        raise CatalogError(f"{field} must be a number of seconds up to {MAX_IDLE_SECONDS} (100 years), got {value!r}")
    return timedelta(seconds=value)
_ENGINE_STATUS = {runs.COMPLETED: ("completed",), runs.FAILED: ("failed", "cancelled"),
                  runs.PENDING: ("pending", "running", "suspended"), runs.PARKED: ("suspended",)}


def _scope(by: By, application: str | None) -> str | None:
    if isinstance(by, Principal) and by.application is not None:
        return by.application
    return application


STUCK_MAX = 500
"""Stuck runs listed at most (the oldest first)."""


class Catalog:
    def __init__(self, engine: Engine):
        self.engine = engine
        self.registry = engine.registry
        install(self.registry)
        _install_audit(self.registry)
        self.roles = rbac.roles_of(engine)  # refused for an engine built without RBAC
        self._validated: dict[str, tuple[Validation, type[BaseModel]]] = {}
        _CATALOGS[self.registry] = self

    def _read(self, by: By, what: str) -> None:
        self.roles.require(by, rbac.READ, what)

    # ---- types ----------------------------------------------------------------------------

    async def namespaces(self, *, by: By = None) -> list[dict[str, Any]]:
        """Each namespace with how many types it holds (saved compositions are not listed)."""
        self._read(by, "list the workflow namespaces")
        counts: dict[str, int] = {}
        for t in types_of(self.registry).values():
            counts[namespace_of(t.name)] = counts.get(namespace_of(t.name), 0) + 1
        return [{"namespace": ns, "types": n} for ns, n in sorted(counts.items())]

    async def types(self, prefix: str | None = None, q: str | None = None, *, by: By = None) -> list[dict[str, Any]]:
        """The types whose name starts with ``prefix`` and whose name or description holds ``q``
        (case-insensitive), by name."""
        self._read(by, "list the workflow types")
        out = []
        for t in types_of(self.registry).values():
            if prefix and not t.name.startswith(prefix):
                continue
            if q and q.lower() not in f"{t.name} {t.wf.meta.description}".lower():
                continue
            out.append(t.summary())
        return out

    async def _composition(self, name: str, app: str | None) -> dict[str, Any]:
        item = await self.engine.items.find(COMPOSITION, name[len(VIRTUAL):], app or "")
        if item is None:
            known = [i.body["workflow_type"] for i in await self.engine.items.list(COMPOSITION, app or "")]
            raise UnknownType(name, known)
        return dict(item.body)

    def _type(self, name: Any) -> CatalogType:
        return lookup(self.registry, name)

    async def schema(self, name: str, *, by: By = None, application: str | None = None) -> dict[str, Any]:
        """``input_schema``, ``output_schema``, ``fields``, ``read_only``, ``has_prerequisites``,
        ``workflow_kind`` of a type (a saved composition's too)."""
        self._read(by, f"read the schema of {name}")
        if isinstance(name, str) and name.startswith(VIRTUAL):
            saved = await self._composition(name, _scope(by, application))
            _, model = self._checked(name, saved)
            schema = model.model_json_schema()
            schema.pop("title", None)
            fields = [{"name": f, "type": schema.get("properties", {}).get(f, {}).get("type", "any"),
                       "required": f in schema.get("required", [])} for f in model.model_fields]
            return {"workflow_type": name, "version": saved["version"], "input_schema": schema,
                    "output_schema": {"type": "object"}, "fields": fields, "read_only": False,
                    "has_prerequisites": False, "workflow_kind": "dag"}
        return self._type(name).schema()

    async def prerequisites(self, name: str, variant: str | None = None, *, by: By = None) -> list[dict[str, Any]]:
        """What must exist before ``name`` runs (of ``variant`` only, when given)."""
        self._read(by, f"read the prerequisites of {name}")
        if isinstance(name, str) and name.startswith(VIRTUAL):
            await self._composition(name, _scope(by, None))
            return []
        found = self._type(name).wf.meta.prerequisites
        variants = sorted({p.variant for p in found})
        if variant is not None and variant not in variants:
            if not found:
                return []
            raise CatalogError(f"variant {variant!r} is not a prerequisite variant of {name!r}; it has"
                               f" {', '.join(variants)}")
        return [p.as_json() for p in found if variant is None or p.variant == variant]

    async def definition(self, name: str, *, by: By = None, application: str | None = None) -> dict[str, Any]:
        """What a type is: its metadata and schemas, the code that runs it; a saved composition's
        definition and compiled form."""
        self._read(by, f"read the definition of {name}")
        if isinstance(name, str) and name.startswith(VIRTUAL):
            saved = await self._composition(name, _scope(by, application))
            return {"workflow_type": name, "workflow_kind": "dag", "definition": saved["definition"],
                    "compiled": saved["compiled"], "content_hash": saved["content_hash"]}
        t = self._type(name)
        m = t.wf.meta
        return {**t.summary(), "workflow_type": t.name, "versions": self.registry.versions(t.name),
                "read_only": m.read_only, "permissions": list(m.permissions),
                "prerequisites": [p.as_json() for p in m.prerequisites], "compensate": m.compensate,
                "input_schema": t.input_schema, "output_schema": t.output_schema, "code": t.wf.ref}

    async def dag(self, name: str, *, by: By = None, application: str | None = None) -> dict[str, Any]:
        """The layers and steps of a dag type; a type of another kind is one layer of one step."""
        self._read(by, f"read the dag of {name}")
        if isinstance(name, str) and name.startswith(VIRTUAL):
            saved = await self._composition(name, _scope(by, application))
            return {"workflow_type": name, "layers": [
                {"name": layer["name"], "steps": [{"name": s["name"], "workflow_type": s["workflow_type"]}
                                                  for s in layer["steps"]]}
                for layer in saved["definition"]["layers"]]}
        t = self._type(name)
        return {"workflow_type": t.name, "layers": [{"name": "main", "steps": [{"name": t.name, "workflow_type": t.name}]}]}

    # ---- runs -----------------------------------------------------------------------------

    def _inputs_model(self, name: str, v: Validation) -> type[BaseModel]:
        from pydantic import ConfigDict, create_model  # on first use, as flowli.engine._typing does

        fields = {f: (ann, ... if required else None) for f, (ann, required) in input_fields(v).items()}
        model: type[BaseModel] = create_model(f"{name}.input", __config__=ConfigDict(extra="forbid"),  # type: ignore[call-overload]
                                              **fields)
        return model

    def _checked(self, name: str, saved: dict[str, Any]) -> tuple[Validation, type[BaseModel]]:
        """A saved composition validated against this process's catalog, and the model of its
        inputs: built once per content hash (a saved version never changes)."""
        found = self._validated.get(saved["content_hash"])
        if found is None:
            v = validate(self.registry, saved["definition"], saved=True)
            if v.errors:
                raise CompositionInvalid(v.errors)  # the catalog changed since it was saved
            found = self._validated[saved["content_hash"]] = (v, self._inputs_model(name, v))
        return found

    def require(self, by: By, capability: str, action: str) -> None:
        """Refuse now (PermissionDenied, naming ``capability``) a principal with roles that lack it."""
        self.roles.require(by, capability, action)

    async def check_start(self, workflow_type: str, *, by: By = None, application: str | None = None) -> bool:
        """Refuse now what a start of ``workflow_type`` would refuse for the type (unknown, with a
        did-you-mean) or for the caller's capabilities; whether the start is a read (a data type)."""
        self.roles.require_all(by, rbac.start_needs(self.registry, workflow_type, []))
        if isinstance(workflow_type, str) and workflow_type.startswith(VIRTUAL):  # and its steps' permissions
            compiled = (await self._composition(workflow_type, _scope(by, application)))["compiled"]
            self.roles.require_all(by, rbac.start_needs(self.registry, DAG, [workflow_type, compiled]))
        return bool((await self.schema(workflow_type, by=by, application=application))["read_only"])

    async def start(self, workflow_type: str, inputs: Any, *, by: By = None, key: str | None = None,
                    application: str | None = None) -> dict[str, Any]:
        """Start a run from one JSON object of inputs by name, validated first (InputsInvalid
        names each bad field; nothing is stored)."""
        # the middleware checks the start again: these refuse before anything is looked up
        self.roles.require_all(by, rbac.start_needs(self.registry, workflow_type, []))
        app = _scope(by, application)
        if isinstance(workflow_type, str) and workflow_type.startswith(VIRTUAL):
            saved = await self._composition(workflow_type, app)
            compiled = saved["compiled"]
            self.roles.require_all(by, rbac.start_needs(self.registry, DAG, [workflow_type, compiled]))
            _, model = self._checked(workflow_type, saved)
            if not isinstance(inputs, dict):
                raise InputsInvalid(workflow_type, [f"inputs must be a JSON object, got {type(inputs).__name__}"])
            try:
                checked = model.model_validate(inputs).model_dump(mode="json")
            except validation_error() as exc:
                raise InputsInvalid(workflow_type, problems(exc)) from None
            given = {k: val for k, val in checked.items() if val is not None or k in inputs}
            eid = await self.engine.start(DAG, [workflow_type, compiled, given], by=by, key=key, application=application)
        else:
            t = self._type(workflow_type)
            args = t.arguments(inputs)
            eid = await self.engine.start(t.name, *args, by=by, key=key, application=application)
        return {"workflow_id": eid, "status": runs.PENDING}

    async def _run(self, workflow_id: str, by: By, application: str | None) -> tuple[ExecutionRecord, list[Any]]:
        """A run's record and journal (a dag run of the decider: no journal, its state tells)."""
        app = _scope(by, application)
        record = await self.engine.status(checked_eid(workflow_id), application=app)
        if runs.decided(record):
            return record, []
        return record, await self.engine.journal(workflow_id, application=app)

    async def _answered(self, record: ExecutionRecord, journal: list[Any]) -> bool:
        """Whether a parked dag of the version 1 workflow has a resolution on its way (sent, not
        read yet): it is PENDING from the moment ``resolve`` returns. (The decider takes a
        resolution in the write that sends it.)"""
        if runs.decided(record) or runs.state_of(record, journal) != runs.PARKED:
            return False
        sent = await self.engine.messages(record.eid, RESOLUTION)
        return len(sent) > runs.resolutions_read(journal)

    async def _dstate(self, record: ExecutionRecord) -> Any:
        """The stored state of a dag run of the decider (None for any other run)."""
        if not runs.decided(record):
            return None
        return (await self.engine.decider_state(record.eid, application=record.application))[1]

    def _machinery(self, record: ExecutionRecord) -> bool:
        """Whether a run is flowli's own machinery (a schedule's firing, a composition's save),
        not a run a person looks at: a listed decider's (a pipeline, a dag) is one they do."""
        if not record.workflow.startswith("flowli."):
            return False
        decider = self.registry.decider_of(record.workflow, record.version)
        return decider is None or decider.index is None

    async def _state(self, record: ExecutionRecord, journal: list[Any], dstate: Any = None) -> str:
        if runs.decided(record):
            if record.terminal:  # its status says it
                return runs.state_of(record, journal)
            return runs.state_of(record, journal, False, dstate if dstate is not None else await self._dstate(record))
        return runs.state_of(record, journal, await self._answered(record, journal))

    def _fn(self, record: ExecutionRecord) -> Any:
        try:
            return self.registry.get(record.workflow, record.version).fn
        except UnknownWorkflowError:
            return None

    async def status(self, workflow_id: str, *, by: By = None, application: str | None = None) -> dict[str, Any]:
        """``get_workflow_status``: the three-state view of a run."""
        self._read(by, f"read run {workflow_id}")
        app = _scope(by, application)
        record = await self.engine.status(checked_eid(workflow_id), application=app)
        if runs.decided(record):  # its stored state holds the view: no journal read
            return runs.view(record, [], False, await self._dstate(record))
        journal = await self.engine.journal(workflow_id, application=app)
        return runs.view(record, journal, await self._answered(record, journal))

    async def history(self, workflow_id: str, include_state_data: bool = False, *, by: By = None,
                      application: str | None = None) -> list[dict[str, Any]]:
        """``get_workflow_history``: the append-only transitions, oldest first."""
        self._read(by, f"read the history of run {workflow_id}")
        app = _scope(by, application)
        record = await self.engine.status(checked_eid(workflow_id), application=app)
        journal = await self.engine.journal(workflow_id, application=app)  # a history is its journal
        return runs.history(record, journal, include_state_data, self._fn(record))

    async def list(self, workflow_type: str | None = None, status: str | None = None, limit: int = 50,
                   cursor: str | None = None, *, by: By = None, application: str | None = None) -> dict[str, Any]:
        """Runs, newest first, a page at a time: ``{"runs": [...], "next": cursor or None}``."""
        self._read(by, "list runs")
        app = _scope(by, application)
        if status is not None and status not in runs.STATES:
            raise CatalogError(f"status must be one of {', '.join(runs.STATES)}, got {status!r}")
        if not isinstance(limit, int) or not 1 <= limit <= 500:
            raise CatalogError(f"limit must be an integer from 1 to 500, got {limit!r}")
        virtual = isinstance(workflow_type, str) and workflow_type.startswith(VIRTUAL)
        engine_wf = DAG if virtual else workflow_type
        wanted = set(_ENGINE_STATUS[status]) if status else None
        out: builtins.list[dict[str, Any]] = []
        page_cursor = cursor
        while len(out) < limit:
            try:
                page = await self.engine.list(status=next(iter(wanted)) if wanted and len(wanted) == 1 else None,
                                              workflow=engine_wf, limit=limit, cursor=page_cursor, application=app)
            except ValueError as exc:
                raise CatalogError(str(exc).replace("engine.list", "list_workflows")) from None
            records = {r.eid: r for r in await self.engine.statuses([s.eid for s in page], application=app)}
            # the dag runs of the decider that still run show their stored states: one read for the page
            # (the records were read as ``app`` sees them: their states are its to see)
            dstates = await self.engine.decider_states(
                [r.eid for r in records.values() if runs.decided(r) and not r.terminal])
            for s in page:
                page_cursor = s.cursor
                record = records.get(s.eid)
                if record is None:
                    continue
                if wanted is not None and record.status.value not in wanted:
                    continue
                if virtual and runs.workflow_type(record) != workflow_type:
                    continue
                if record.workflow.startswith("flowli.") and record.workflow != DAG:
                    continue
                journal = await self.engine.journal(record.eid, application=app) \
                    if record.workflow == DAG and not record.terminal and not runs.decided(record) else []
                if runs.decided(record):
                    state = runs.state_of(record, [], False, (dstates.get(record.eid) or (0, None))[1])
                else:
                    state = await self._state(record, journal)
                if status is not None and state != status:
                    continue
                out.append({"workflow_id": record.eid, "workflow_type": runs.workflow_type(record), "status": state,
                            "created_at": record.created_at.isoformat(), "updated_at": record.updated_at.isoformat(),
                            **({"parent_workflow_id": record.parent_eid} if record.parent_eid else {})})
                if len(out) == limit:
                    break
            if page.next is None:
                page_cursor = None
                break
        more = page_cursor is not None and len(out) == limit
        return {"runs": out, "next": page_cursor if more else None}

    # ---- operations -----------------------------------------------------------------------

    async def retry(self, workflow_id: str, *, by: By = None, application: str | None = None) -> dict[str, Any]:
        """Re-advance a FAILED run from its last good point (memoized steps are not run again)."""
        self.roles.require(by, rbac.OPERATE, f"retry run {workflow_id}")
        record, journal = await self._run(workflow_id, by, application)
        if record.status is not Status.FAILED:
            state = await self._state(record, journal)
            why = "it was cancelled" if record.status is Status.CANCELLED else f"it is {state}"
            raise RunStateError(f"run {workflow_id} cannot be retried: {why}; only a FAILED run can be retried")
        dstate = await self._dstate(record)
        fid = await self.engine.retry(workflow_id, by=by, application=application)
        out: dict[str, Any] = {"workflow_id": workflow_id, "status": runs.PENDING}
        if isinstance(dstate, dict) and (dstate.get("failure") or {}).get("step"):
            out["step"] = dstate["failure"]["step"]
            return out
        failed = next((e for e in reversed(journal) if e.fid == fid), None) if fid else None
        if failed is not None and (step := runs.step_name(record, failed)) is not None:
            out["step"] = step
        return out

    async def resolve(self, workflow_id: str, resolution: str, *, by: By = None,
                      application: str | None = None) -> dict[str, Any]:
        """Answer a remediation gate: ``remediated`` re-runs only the parked step, ``denied``
        compensates the completed steps in reverse and fails the run."""
        self.roles.require(by, rbac.DECIDE, f"resolve run {workflow_id}")
        if resolution not in ("remediated", "denied"):
            raise CatalogError(f"resolution must be 'remediated' or 'denied', got {resolution!r}")
        record, journal = await self._run(workflow_id, by, application)
        dstate = await self._dstate(record)
        state = await self._state(record, journal, dstate)
        parked = runs.remediation(record, journal, dstate) if state == runs.PARKED else None
        if parked is None:
            if await self._answered(record, journal):
                raise RunStateError(f"run {workflow_id} is resolved already: its resolution is on its way to it")
            raise RunStateError(f"run {workflow_id} is {state}, not remediation_pending:"
                                " there is no remediation gate to resolve")
        await self.engine.signal(workflow_id, RESOLUTION, {"resolution": resolution, "fid": parked["fid"]}, by=by,
                                 application=application, decision=True)
        return {"workflow_id": workflow_id, "status": runs.PENDING, "resolution": resolution, "step": parked["step"]}

    async def signal(self, workflow_id: str, channel: str, payload: Any = None, *, by: By = None,
                     application: str | None = None) -> dict[str, Any]:
        """Send one message to a run's ``channel`` (what its ``ctx.receive(channel)`` waits for)
        and resume it, as ``engine.signal``. The engine's own runs (a pipeline, an approval) move
        on through their own operations only."""
        self.roles.require(by, rbac.OPERATE, f"send a signal to run {workflow_id}")
        if not isinstance(channel, str) or not channel.strip():
            raise CatalogError("channel must name the run's channel (a nonempty string)")
        record = await self.engine.status(checked_eid(workflow_id), application=_scope(by, application))
        _own_operations(record, "send a signal to")
        seq = await self.engine.signal(workflow_id, channel, payload, by=by, application=application)
        return {"workflow_id": workflow_id, "channel": channel, "seq": seq}

    async def cancel(self, workflow_id: str, reason: str, *, by: By = None,
                     application: str | None = None) -> dict[str, Any]:
        """Request a run's cancellation (recorded with ``reason``): the run stops at its next step
        and runs its cleanups; a run that finished already is refused."""
        self.roles.require(by, rbac.OPERATE, f"cancel run {workflow_id}")
        if not isinstance(reason, str) or not reason.strip():
            raise CatalogError("reason must say why the run is cancelled: it is recorded with the request")
        record = await self.engine.status(checked_eid(workflow_id), application=_scope(by, application))
        if record.workflow != DAG:
            _own_operations(record, "cancel")
        await self.engine.cancel(workflow_id, by=by, application=application, reason=reason)
        return {"workflow_id": workflow_id, "status": runs.PENDING, "cancel_requested": True}

    async def stuck(self, older_than_seconds: float = 3600, *, by: By = None,
                    application: str | None = None) -> builtins.list[dict[str, Any]]:
        """Runs not terminal, with no journal progress for ``older_than_seconds``, that do not wait
        on a future timer; each with ``waiting_on`` (what ``engine.explain`` finds)."""
        self._read(by, "list stuck runs")
        older = seconds(older_than_seconds, "older_than_seconds")
        app = _scope(by, application)
        now = self.engine.clock.now()
        horizon = now - older
        out = []
        # the candidates: records unchanged since the horizon, no future timer (an index read);
        # each one's journal then says whether it made progress since (a running step appends
        # without changing its record)
        for record in await self.engine.idle(older, application=app, limit=STUCK_MAX):
            if self._machinery(record):
                continue
            try:
                why = await self.engine.explain(record.eid, application=app)
            except Exception:  # noqa: BLE001 - archived or gone meanwhile
                continue
            if why.last_at is None or why.last_at > horizon:
                continue
            if any(w["kind"] == "timer" and w.get("at") and w["at"] > now.isoformat() for w in why.waits):
                continue
            out.append({"workflow_id": record.eid, "workflow_type": runs.workflow_type(record),
                        "status": await self._state(record, [] if runs.decided(record) else
                                                    await self.engine.journal(record.eid, application=app)),
                        "idle_seconds": round((now - why.last_at).total_seconds(), 1),
                        "last_seq": why.last_seq,
                        "waiting_on": {"summary": why.summary, "waits": [dict(w) for w in why.waits]}})
        return out

    async def terminate(self, workflow_id: str, reason: str, min_idle_seconds: float = 600,
                        expected_last_seq: int | None = None, *, by: By = None,
                        application: str | None = None) -> dict[str, Any]:
        """Append a failed terminal state to a confirmed-stale run (its guards: idle for
        ``min_idle_seconds``, no live lease, the journal at ``expected_last_seq`` when given)."""
        checked_eid(workflow_id)
        self.roles.require(by, rbac.OPERATE, f"terminate run {workflow_id}")
        if not isinstance(reason, str) or not reason.strip():
            raise CatalogError("reason must say why the run is terminated: it is recorded with the terminal state")
        min_idle = seconds(min_idle_seconds, "min_idle_seconds")
        if expected_last_seq is not None and (not isinstance(expected_last_seq, int) or expected_last_seq < 0):
            raise CatalogError(f"expected_last_seq must be a journal seq (an integer), got {expected_last_seq!r}")
        await self.engine.terminate(workflow_id, reason, by=by, min_idle=min_idle,
                                    expected_last_seq=expected_last_seq, application=application)
        return {"workflow_id": workflow_id, "status": runs.FAILED}

    # ---- compositions ---------------------------------------------------------------------

    def _definition(self, definition: Any) -> Any:
        if isinstance(definition, (str, bytes)):
            try:
                return json.loads(definition)
            except ValueError as exc:
                raise CompositionInvalid([f"composition: the definition is not JSON: {exc}"]) from None
        return definition

    async def validate_composition(self, definition: Any, *, by: By = None) -> dict[str, builtins.list[str]]:
        """``{"errors": [...], "warnings": [...]}`` of the three phases against the live catalog."""
        self._read(by, "validate a composition")
        try:
            d = self._definition(definition)
        except CompositionInvalid as exc:
            return {"errors": exc.errors, "warnings": []}
        v = validate(self.registry, d)
        return {"errors": v.errors, "warnings": v.warnings}

    def compile(self, definition: Any) -> dict[str, Any]:
        """The compiled form of a valid definition (CompositionInvalid else)."""
        d = self._definition(definition)
        v = validate(self.registry, d)
        if v.errors:
            raise CompositionInvalid(v.errors)
        return compile_definition(d)

    async def save_composition(self, definition: Any, *, by: By = None, application: str | None = None,
                               timeout: float = 30.0) -> dict[str, Any]:
        """Run ``composition.save``: validate, compile, stamp and store the composition for the
        caller's application; it becomes runnable as ``virtual.<name>@<version>``. Saving the same
        definition again is the same save; a changed one under a saved version is refused."""
        self.roles.require(by, rbac.WRITE, "save a composition")
        d = self._definition(definition)
        v = validate(self.registry, d)
        if v.errors:
            raise CompositionInvalid(v.errors)
        app = _scope(by, application)
        existing = await self.engine.items.find(COMPOSITION, f"{d['name']}@{d['version']}", app or "")
        if existing is not None and existing.body["content_hash"] == content_hash(d):
            return {"workflow_type": existing.body["workflow_type"], "content_hash": existing.body["content_hash"],
                    "created": False, "warnings": v.warnings, "workflow_id": existing.body["saved_by"]}
        if existing is not None:  # refused before anything runs: no failed save is left behind
            raise conflict(d["name"], d["version"], existing.body["content_hash"])
        eid = await self.engine.start(SAVE, d, by=by, key=content_hash(d), application=application)
        try:
            result = await self.engine.result(eid, timeout=timeout, application=_scope(by, application))
        except StepFailed as exc:
            if exc.error_type == "CompositionConflict":
                raise CompositionConflict(exc.message) from None
            if exc.error_type == "CompositionInvalid":  # the catalog changed between the check and the save
                raise CompositionInvalid([exc.message]) from None
            raise
        return {**result, "workflow_id": eid}

    async def compositions(self, *, by: By = None, application: str | None = None) -> builtins.list[dict[str, Any]]:
        """The saved compositions of the caller's application."""
        self._read(by, "list compositions")
        items = await self.engine.items.list(COMPOSITION, _scope(by, application) or "")
        return [{"workflow_type": i.body["workflow_type"], "name": i.body["name"], "version": i.body["version"],
                 "content_hash": i.body["content_hash"], "saved_at": i.body["saved_at"]} for i in items]

    def suggest(self, name: str) -> str | None:
        return suggest(name, list(types_of(self.registry)))


def catalog_of(registry: Registry) -> Catalog | None:
    """The Catalog built on an engine of ``registry`` in this process (a step that acts through
    the catalog finds it here), or None."""
    return _CATALOGS.get(registry)


def _install_audit(registry: Registry) -> None:
    if AUDIT in registry.names():
        return

    async def audit_workflow_run_query(ctx: Any, workflow_type: str | None = None, status: str | None = None,
                                       limit: int = 50) -> dict[str, Any]:
        app = ctx.application

        async def query(workflow_type: str | None, status: str | None, limit: int) -> dict[str, Any]:
            catalog = _CATALOGS.get(registry)
            if catalog is None:
                raise CatalogError("the catalog is not set up in this process (flowli.catalog.Catalog(engine))")
            return await catalog.list(workflow_type, status, limit, application=app)

        found: dict[str, Any] = await ctx.step(query, workflow_type, status, limit)
        return found

    registry.add(audit_workflow_run_query, AUDIT, kind="data", featured=True, scope="organization",
                 description="List what ran: runs of every type, saved compositions included, newest first.")


def _own_operations(record: ExecutionRecord, what: str) -> None:
    """Refuses ``what`` on a run of one of the engine's own workflows (``flowli.*``): a pipeline
    or an approval moves on through its own operations, which keep its records."""
    if record.workflow.startswith("flowli."):
        raise RunStateError(f"cannot {what} run {record.eid}: it is a {record.workflow} run, moved on by its own"
                            " operations (a pipeline's routes, an approval's answer)")
