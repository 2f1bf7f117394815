"""Pipelines over the Engine: create (legacy and idempotent), read, list, append, and the
operator actions. Every change reaches the pipeline's execution through the engine (a start, a
signal on its ``pipeline`` channel, a cancel, a retry), so it is in its journal with its actor.
Numeric pipeline and stage ids are store items; sensitive context values are items too, never
in the journal. Each is written in the write of the change it belongs to (the start, the append's
signal, the result's answer), its id reserved before: a change refused, or lost to a crash,
leaves none of them."""

from __future__ import annotations

import asyncio
import builtins
import uuid
from collections.abc import Sequence
from typing import Any

from flowli.access import Access, Conflict, NotFound, item_id, owned
from flowli.domain import (
    DECIDE_RUNS,
    OPERATE_RUNS,
    REDACTED,
    START_RUNS,
    EntryKind,
    ExecutionRecord,
    ExecutionStateError,
    ExecutionTerminalError,
    Status,
    UnknownExecutionError,
    keyed_eid,
    mask,
    redact,
)
from flowli.engine import Engine, StateQuery, StoredState
from flowli.store import NewItem

from . import _retry
from ._decider import CHANNEL, VERSION, WORKFLOW, install
from ._inputs import IdempotentPipelineIn, PipelineIn, PipelineInputError, StagesIn, read
from ._spec import declaration, intent_digest, short, stage_list
from ._statuses import PIPELINE_STATUSES, TERMINAL
from ._upgrade import convert, executions_of_version_1, fold
from ._view import build, declared, iso, open_attempts, pipeline_status

PIPELINE, STAGE, IDEMPOTENCY, SECRET, POLICY, REFUSED = "pipeline", "stage", "idempotency", "secret", "policy", "refused"
REFUSED_RESULT = "result.refused"
"""What the journal of a pipeline announces of a result it refused (see Workers._refuse)."""
UPGRADE, CONVERTED = "upgrade", "pipelines-of-version-1-converted"
"""The marker item written once every pipeline of version 1 (a workflow of an older release) is
the decider's (see ``_upgrade``): a process that finds it has nothing to convert."""
UPGRADE_AGAIN = 5.0
"""Seconds before an upgrade that left a pipeline unconverted (a worker held it) is tried again."""
STAGES_KEPT = 10_000
"""Stage items a process keeps (see Pipelines.stage_item)."""


class Pipelines:
    def __init__(self, engine: Engine):
        self.engine = engine
        self._stages: dict[int, Any] = {}
        self._upgraded = False
        self._upgrading: asyncio.Lock | None = None
        self._upgrade_after = 0.0
        install(engine.registry)

    @property
    def items(self) -> Any:
        return self.engine.items

    async def convert(self, eid: str) -> bool:
        """Convert one pipeline of version 1 now (one that the upgrade's list did not hold yet:
        its start was announced late); True once it is the decider's."""
        return await convert(self.engine, eid)

    async def upgrade(self) -> None:
        """Convert the pipelines of version 1 into the decider's, once per store (see
        ``_upgrade``): the first use of the service in a process does it, or finds it done. One
        that cannot be converted now (a worker of the older release holds it) is tried again a
        few seconds later; the marker that says it is all done is written after the last one."""
        if self._upgraded:
            return
        loop = asyncio.get_running_loop()
        if loop.time() < self._upgrade_after:
            return
        if self._upgrading is None:
            self._upgrading = asyncio.Lock()
        async with self._upgrading:
            if self._upgraded or loop.time() < self._upgrade_after:
                return
            if await self.items.find(UPGRADE, CONVERTED, "") is None:
                eids = await executions_of_version_1(self.engine)
                left = [eid for eid in eids if not await convert(self.engine, eid)]
                if left:
                    self._upgrade_after = loop.time() + UPGRADE_AGAIN
                    return
                await self.items.put(UPGRADE, "", CONVERTED, {"converted": len(eids)}, self.engine.clock.now())
            self._upgraded = True

    # ---- create ---------------------------------------------------------------------------

    async def create(self, access: Access, body: PipelineIn | Any, *, idempotent: bool,
                     traceparent: str | None = None, items: Sequence[NewItem] = ()) -> tuple[dict[str, Any], bool]:
        """The pipeline and whether this call created it: ``body`` an ``IdempotentPipelineIn``
        when ``idempotent``, else a ``PipelineIn`` (a mapping is read into it). Its spans go to
        the trace of the request's W3C ``traceparent`` (the caller's span is their parent), else
        of its ``traceId`` when that is a W3C trace id. ``items`` are written in the write that
        creates it (a schedule's firing advances its schedule there)."""
        access.require(START_RUNS)
        body = read(IdempotentPipelineIn, body) if idempotent else read(PipelineIn, body)
        await self.upgrade()
        key = getattr(body, "idempotencyKey", None)
        if key is not None:
            if not key.strip():
                raise PipelineInputError("idempotencyKey is required (a nonempty string)")
            short(key, "idempotencyKey")
        decl = declaration(body)
        digest = intent_digest(decl)
        if idempotent:
            # the execution's key is the idempotency key: its start is idempotent, and its stored
            # input keeps the intent a repeat is compared with. A claim item is older code's record
            # of a key (its pipeline's execution has the key the claim names).
            claim = await self.items.find(IDEMPOTENCY, key, access.application)
            start_key = claim.body["eid"] if claim else f"{IDEMPOTENCY}:{key}"
            eid = keyed_eid(WORKFLOW, f"{access.application}/{start_key}")
            known = await self._declared(access, eid)
            if known is not None:
                return await self._repeated(access, key, eid, known, digest, claim), False
            if claim is not None and claim.body["intent"] != digest:
                raise Conflict(f"idempotencyKey {key!r} was used for a different creation intent", pipelineId=None)
        else:
            key, start_key = None, str(uuid.uuid4())
            eid = keyed_eid(WORKFLOW, f"{access.application}/{start_key}")  # what engine.start gives it
        # the pipeline's id and its stages' ids are reserved, and their items written in the
        # write that creates the execution, with the sealed values of its sensitive context
        pid, stages, rows = await self._number(access, eid, decl["stages"], decl["name"], decl["keywords"],
                                               {"name": decl["name"], "idempotencyKey": key})
        context, sealed = await self._keep_secrets(access, eid, decl["context"], new=True)
        spec = {"pipelineId": pid, "name": decl["name"], "idempotencyKey": key, "traceId": decl["traceId"],
                "application": access.application, "stages": stages, "keywords": decl["keywords"], "context": context,
                "intent": digest}
        record, created = await self.engine.started(
            WORKFLOW, spec, by=access.principal, key=start_key, queue="pipelines", version=VERSION,
            traceparent=traceparent or decl["traceId"], items=[*rows, *sealed, *items])  # as stored: its createdAt
        known = _spec_of(record)
        if not created and idempotent and known is not None:  # a concurrent create of the key was first
            return await self._repeated(access, key, eid, known, digest, None), False
        return declared(spec, access.application_id, record.created_at), True

    async def _declared(self, access: Access, eid: str) -> dict[str, Any] | None:
        """The input of the pipeline of execution ``eid`` (its declaration), or None when there is none."""
        try:
            return _spec_of(await self.engine.status(eid, application=access.application))
        except UnknownExecutionError:
            return None

    async def _repeated(self, access: Access, key: Any, eid: str, spec: dict[str, Any], digest: str,
                        claim: Any) -> dict[str, Any]:
        """A create repeated with the idempotency key of pipeline ``spec``: its view when the
        intent is the same; else 409 naming it (the intent is in its input, or, for a pipeline of
        older code, in its claim)."""
        intent = spec.get("intent") or (claim.body["intent"] if claim is not None else None)
        if intent != digest:
            raise Conflict(f"idempotencyKey {key!r} was used for a different creation intent",
                           pipelineId=spec.get("pipelineId"))
        return await self._view(access, spec["pipelineId"], eid)

    async def _number(self, access: Access, eid: str, stages: builtins.list[dict[str, Any]], name: str,
                      keywords: builtins.list[dict[str, Any]], pipeline: dict[str, Any] | None = None,
                      ) -> tuple[int | None, builtins.list[dict[str, Any]], builtins.list[NewItem]]:
        """The ids of the stages (and of the pipeline, given its body), reserved, with each stage's
        retry plan (the policies enabled now, else its options), and their items, which the write
        of the change that adds them inserts (a reservation that no write uses is only a gap)."""
        policies = await self.policies_of(access.application)
        specs = [{**s, "plan": _retry.plan(s, name, keywords, policies)} for s in stages]
        ids = await self.items.reserve(len(specs) + (pipeline is not None))
        rows, pid = [], None
        if pipeline is not None:
            pid, ids = ids[0], ids[1:]
            rows.append(NewItem(PIPELINE, access.application, eid, pipeline, id=pid))
        rows += [NewItem(STAGE, access.application, f"{eid}/{s['stageName']}",
                         {"eid": eid, "name": s["stageName"], "spec": s}, id=i) for s, i in zip(specs, ids)]
        return pid, [{**s, "id": i} for s, i in zip(specs, ids)], rows

    async def _stage_ids(self, access: Access, eid: str, stages: builtins.list[dict[str, Any]], name: str,
                         keywords: builtins.list[dict[str, Any]],
                         ) -> tuple[builtins.list[dict[str, Any]], builtins.list[NewItem]]:
        _, specs, rows = await self._number(access, eid, stages, name, keywords)
        return specs, rows

    async def _keep_secrets(self, access: Access, eid: str, items: builtins.list[dict[str, Any]], *,
                            new: bool = False) -> tuple[builtins.list[dict[str, Any]], builtins.list[NewItem]]:
        """Context items as the journal gets them, and the items that seal their sensitive values
        (for the write of the command that carries them: workers read them there). The journal
        gets "***". Redaction follows the key: an item of a key that was ever sensitive in the
        pipeline (it has a store item) is sensitive, whether or not it says so. A deletion marker
        carries no value. ``new``: the pipeline has no items yet."""
        known = set() if new else await self.sensitive_keys(access, eid)
        known |= {i["key"] for i in items if i.get("isSensitive")}  # an item before its flagged twin too
        out, sealed = [], []
        for i in items:
            deleted = bool(i.get("isDeleted"))
            if i["key"] in known:
                value = None if deleted else i.get("value")
                sealed.append(NewItem(SECRET, access.application, f"{eid}/{i['key']}", {"value": value}, replace=True))
                i = {**i, "isSensitive": True, "value": None if deleted else REDACTED}
            elif deleted:
                i = {**i, "value": None}
            out.append(i)
        return out, sealed

    async def sensitive_keys(self, access: Access, eid: str) -> set[str]:
        """The context keys of a pipeline that were ever sensitive (each has a store item)."""
        return {i.key.removeprefix(f"{eid}/") for i in await self.items.list(SECRET, access.application, prefix=f"{eid}/")}

    async def policies_of(self, application: str) -> builtins.list[tuple[int, dict[str, Any]]]:
        return [(i.id, i.body) for i in await self.items.list(POLICY, application)]

    # ---- read -----------------------------------------------------------------------------

    async def _item(self, access: Access, pid: Any) -> Any:
        await self.upgrade()
        return await owned(self.engine, access, PIPELINE, pid, "pipeline")

    async def state(self, access: Access, eid: str) -> tuple[Any, dict[str, Any]]:
        """The execution's record and the pipeline's state: its decider's stored state (a pipeline
        of version 1 is converted first, see ``_upgrade``)."""
        await self.upgrade()
        try:
            record = await self.engine.status(eid, application=access.application)
            if record.version != VERSION and await self.convert(eid):
                record = await self.engine.status(eid, application=access.application)
            if record.version != VERSION:
                # archived before the upgrade (nothing left to convert), or not convertible at
                # this instant: its journal, folded as the conversion folds it, for this read
                return record, fold(await self.engine.journal(eid, application=access.application))
            _, state = await self.engine.decider_state(eid, application=access.application)
        except UnknownExecutionError:
            raise NotFound(f"no pipeline of execution {eid}") from None
        if state is None or state.get("spec") is None:  # its start is not decided yet
            raise Starting(eid)
        return record, state

    async def _view(self, access: Access, pid: int, eid: str) -> dict[str, Any]:
        try:
            record, p = await self.state(access, eid)
        except Starting:
            return await self._starting(access, pid, eid)
        tasks = await self.engine.tasks(eid=eid, application=access.application)
        return build(record, p, open_attempts(tasks), access.application_id, self.engine.clock.now())

    async def _starting(self, access: Access, pid: int, eid: str) -> dict[str, Any]:
        """The view of a pipeline whose start is not decided yet: its declaration (its input)."""
        record = await self.engine.status(eid, application=access.application)
        args = record.args
        spec = args[0] if args else None
        if not isinstance(spec, dict):
            raise NotFound(f"no pipeline of execution {eid}")
        view = declared(spec, access.application_id, record.created_at)
        if record.terminal:
            view["status"] = {"completed": "Completed", "failed": "Failed"}.get(record.status.value, "Cancelled")
        return view

    async def get(self, access: Access, pid: Any, *, journal: builtins.list[Any] | None = None) -> dict[str, Any]:
        """The public view of a pipeline (``journal`` is no longer needed: the view is the
        pipeline's stored state)."""
        item = await self._item(access, pid)
        return await self._view(access, item.id, item.key)

    async def by_idempotency_key(self, access: Access, key: Any) -> dict[str, Any]:
        if not isinstance(key, str) or not key:
            raise PipelineInputError("idempotencyKey is required (a nonempty string)")
        await self.upgrade()
        claim = await self.items.find(IDEMPOTENCY, key, access.application)  # older code's record of the key
        start_key = claim.body["eid"] if claim else f"{IDEMPOTENCY}:{key}"
        item = await self.items.find(PIPELINE, keyed_eid(WORKFLOW, f"{access.application}/{start_key}"),
                                     access.application)
        if item is None:
            raise NotFound(f"no pipeline with idempotencyKey {key!r}")
        return await self._view(access, item.id, item.key)

    async def list(self, access: Access, *, page: int = 1, size: int = 20, search: str | None = None,
                   statuses: builtins.list[str] | None = None, keywords: builtins.list[str] | None = None,
                   name: str | None = None) -> dict[str, Any]:
        if page < 1 or size < 1 or size > 500:
            raise PipelineInputError("pageNumber must be at least 1 and pageSize between 1 and 500")
        for s in statuses or []:
            if s not in PIPELINE_STATUSES:
                raise PipelineInputError(f"statuses: {s!r} is not a pipeline status ({', '.join(PIPELINE_STATUSES)})")
        wanted_keywords = []
        for k in keywords or []:
            if ":" not in k:
                raise PipelineInputError(f"keywords: {k!r} must be key:value")
            wanted_keywords.append(tuple(k.split(":", 1)))
        await self.upgrade()
        query = StateQuery(WORKFLOW, access.application, labels=tuple(statuses or ()), name=name or None,
                           tags=tuple(f"{k}:{v}" for k, v in wanted_keywords), text=search or None,
                           offset=(page - 1) * size, limit=size, attempts=True)
        rows, total = await self.engine.decided(query)
        return {"items": [v for _, v in await self.views(access, rows)], "totalCount": total, "pageNumber": page, "pageSize": size}

    async def views(self, access: Access, rows: builtins.list[StoredState]) -> builtins.list[tuple[str, dict[str, Any]]]:
        """The public views of a page of pipelines, each with its execution id: their states and
        their open attempts, as ``engine.decided`` read them (a ``StateQuery`` with ``attempts``)."""
        now = self.engine.clock.now()
        out = []
        for r in rows:
            if r.state is None:  # its start is not decided yet: its declaration
                spec = r.record.args[0] if r.record.args else None
                if isinstance(spec, dict):
                    out.append((r.record.eid, declared(spec, access.application_id, r.record.created_at)))
                continue
            out.append((r.record.eid, build(r.record, r.state, r.attempts, access.application_id, now)))
        return out

    async def waiting(self, access: Access, limit: int = 100) -> builtins.list[tuple[str, dict[str, Any]]]:
        """The pipelines of the caller's application with a stage waiting for an approval (the
        inbox), newest first, each with its execution id: one page of the index, whatever the
        number of pipelines."""
        await self.upgrade()
        rows, _ = await self.engine.decided(StateQuery(WORKFLOW, access.application, waiting=True, limit=limit,
                                                       attempts=True))
        return await self.views(access, rows)

    async def history(self, access: Access, pid: Any) -> builtins.list[dict[str, Any]]:
        item = await self._item(access, pid)
        journal = await self.engine.journal(item.key, application=access.application)
        keys = await self.sensitive_keys(access, item.key)
        out = []
        machinery = waited_out(journal)
        for e in journal:
            if e.fid in machinery or e.kind is EntryKind.EXECUTION_SUSPENDED:
                continue
            value, error = e.value, e.error
            if e.kind is EntryKind.ANNOUNCED and isinstance(value, dict) and value.get("kind") == REFUSED_RESULT:
                refused: dict[str, Any] = value["data"] if isinstance(value.get("data"), dict) else {}
                out.append({"seq": e.seq, "kind": REFUSED_RESULT, "frame": None, "attempt": refused.get("attempt"),
                            "at": e.at.isoformat(), "actor": refused.get("actor") or str(e.provenance.actor),
                            "value": redact(refused, keys), "error": None})
                continue
            if e.kind is EntryKind.EVENT and isinstance(value, dict):  # the decider's: the pipeline's words
                data: dict[str, Any] = value["data"] if isinstance(value.get("data"), dict) else {}
                if value.get("event") in ("stage.failed", "pipeline.failed"):
                    error = {"errorCode": data.get("errorCode"), "errorMessage": data.get("errorMessage")}
                out.append({"seq": e.seq, "kind": value.get("event"), "frame": None, "attempt": data.get("attempt"),
                            "at": e.at.isoformat(), "actor": str(e.provenance.actor), "value": redact(data, keys),
                            "error": redact(error, keys)})
                continue
            if e.kind is EntryKind.EXECUTION_MIGRATED and isinstance(value, dict):
                value = {k: v for k, v in value.items() if k != "state"}  # the conversion; its state is the view's
            elif e.kind is EntryKind.EXECUTION_FAILED:
                error = stage_error(error)
            elif e.kind is EntryKind.EXECUTION_RETRIED and isinstance(value, dict):
                value = {k: v for k, v in value.items() if k != "fid"} | {"error": stage_error(value.get("error"))}
            out.append({"seq": e.seq, "kind": e.kind.value, "frame": e.fid, "attempt": e.attempt,
                        "at": e.at.isoformat(), "actor": str(e.provenance.actor),
                        "value": redact(value, keys), "error": redact(error, keys)})
        for r in await self.items.list(REFUSED, access.application, prefix=f"{item.key}/"):  # older code's records
            out.append({"seq": None, "kind": REFUSED_RESULT, "frame": None, "attempt": r.body.get("attempt"),
                        "at": r.at.isoformat(), "actor": r.body.get("actor"), "value": redact(r.body, keys), "error": None})
        out.sort(key=lambda x: x["at"])
        return out

    # ---- change ---------------------------------------------------------------------------

    async def _signal(self, access: Access, eid: str, message: dict[str, Any], what: str, *,
                      items: builtins.list[NewItem] | None = None, decision: bool = False) -> None:
        try:
            await self.engine.signal(eid, CHANNEL, message, by=access.principal, application=access.application,
                                     items=items or [], decision=decision)
        except ExecutionTerminalError as exc:
            raise Conflict(f"cannot {what}: the pipeline is {exc.status}") from None
        except UnknownExecutionError:
            raise NotFound(f"no pipeline of execution {eid}") from None

    async def _live(self, access: Access, pid: Any, what: str) -> tuple[Any, Any, dict[str, Any]]:
        """A pipeline an operator acts on: another application's is unknown (404) to any role,
        then the role is checked (403), then its state (409)."""
        item = await self._item(access, pid)
        access.require(OPERATE_RUNS)
        record, p = await self._state_now(access, item.key)
        status = pipeline_status(record, p)
        if status in TERMINAL:
            raise Conflict(f"cannot {what} pipeline {item.id}: it is {status}")
        return item, record, p

    async def _state_now(self, access: Access, eid: str) -> tuple[Any, dict[str, Any]]:
        """The state of a pipeline an action needs: once its start is decided (a moment after
        its creation)."""
        deadline = asyncio.get_running_loop().time() + 10
        while True:
            try:
                return await self.state(access, eid)
            except Starting:
                if asyncio.get_running_loop().time() > deadline:
                    raise Conflict(f"pipeline of execution {eid} has not started yet: try again") from None
                await asyncio.sleep(0.01)

    async def append(self, access: Access, pid: Any, body: StagesIn | Any) -> builtins.list[dict[str, Any]]:
        body = read(StagesIn, body)
        item, _, p = await self._live(access, pid, "append stages to")
        specs = stage_list(body.stages, declared_specs(p))
        given, rows = await self._stage_ids(access, item.key, specs, p["spec"]["name"], p["spec"].get("keywords") or [])
        await self._signal(access, item.key, {"op": "append", "stages": given}, f"append stages to pipeline {item.id}",
                           items=rows)
        now = iso(self.engine.clock.now())
        return [stage_json(g["id"], item.id, g, "NotStarted", now) for g in given]

    async def pause(self, access: Access, pid: Any) -> dict[str, Any]:
        item, _, _ = await self._live(access, pid, "pause")
        await self._signal(access, item.key, {"op": "pause"}, f"pause pipeline {item.id}")
        return await self._view(access, item.id, item.key)

    async def resume(self, access: Access, pid: Any) -> dict[str, Any]:
        item, _, _ = await self._live(access, pid, "resume")
        await self._signal(access, item.key, {"op": "resume"}, f"resume pipeline {item.id}")
        return await self._view(access, item.id, item.key)

    async def cancel(self, access: Access, pid: Any) -> dict[str, Any]:
        item, _, _ = await self._live(access, pid, "cancel")
        try:
            await self.engine.cancel(item.key, by=access.principal, application=access.application)
        except (ExecutionTerminalError, ExecutionStateError) as exc:
            raise Conflict(f"cannot cancel pipeline {item.id}: {exc}") from None
        return await self._view(access, item.id, item.key)

    async def stage(self, access: Access, stage_id: Any) -> tuple[Any, Any]:
        """The stage item and its pipeline's item."""
        item = await self.stage_item(access, stage_id)
        pipeline_item = await self.items.find(PIPELINE, item.body["eid"], access.application)
        return item, pipeline_item

    async def stage_item(self, access: Access, stage_id: Any) -> Any:
        """The stage item of a stage id of the caller's application. A stage item never changes
        once written (its id, pipeline and declaration), so this process keeps the ones it read:
        a worker names the stage in each of its calls."""
        if isinstance(stage_id, bool) or not isinstance(stage_id, (int, str)):
            raise PipelineInputError(f"stageId must be a number, got {stage_id!r}")
        number = item_id(stage_id)
        if number is None:
            raise NotFound(f"no stage {stage_id!r}")
        item = self._stages.get(number)
        if item is None:
            item = await self.items.get(STAGE, number)
            if item is not None:
                self._keep(item)
        if item is None or item.application != access.application:
            raise NotFound(f"no stage {number}")
        return item

    def _keep(self, item: Any) -> None:
        if len(self._stages) >= STAGES_KEPT:
            self._stages.clear()
        self._stages[item.id] = item

    async def skip(self, access: Access, stage_id: Any) -> dict[str, Any]:
        """Skip a stage that is not done: its dependents run as if it had completed. A stage that
        failed for good is skipped too ("mark as completed"): its failed pipeline goes on."""
        stage, pitem = await self.stage(access, stage_id)  # another application's: 404, whatever the role
        access.require(OPERATE_RUNS)
        record, p = await self._state_now(access, pitem.key)
        if p["stages"][stage.body["name"]]["status"] in ("Completed", "Skipped"):
            raise Conflict(f"stage {stage.id} ({stage.body['name']}) is {p['stages'][stage.body['name']]['status']}"
                           " already")
        await self._on_stage(access, pitem, record, p, {"op": "skip", "stage": stage.body["name"]},
                             f"skip stage {stage.id}")
        return await self._view(access, pitem.id, pitem.key)

    async def rerun(self, access: Access, stage_id: Any, rerun_next: bool) -> dict[str, Any]:
        stage, pitem = await self.stage(access, stage_id)  # another application's: 404, whatever the role
        access.require(OPERATE_RUNS)
        record, p = await self._state_now(access, pitem.key)
        message = {"op": "rerun", "stage": stage.body["name"], "next": bool(rerun_next)}
        await self._on_stage(access, pitem, record, p, message, f"rerun stage {stage.id}")
        return await self._view(access, pitem.id, pitem.key)

    async def _on_stage(self, access: Access, pitem: Any, record: Any, p: dict[str, Any], message: dict[str, Any],
                        what: str) -> None:
        """Send an operator's action on a stage (``message``) to its pipeline: a failed pipeline
        is reopened with it (``engine.retry``), a running one takes it as a message, another
        ended one refuses it (409)."""
        status = pipeline_status(record, p)
        if status == "Failed" and record.status is not Status.FAILED:
            # the decider has failed the pipeline and its execution is ending: let it end
            deadline = asyncio.get_running_loop().time() + 10
            while record.status is not Status.FAILED and not record.terminal and \
                    asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.02)
                record = await self.engine.status(pitem.key, application=access.application)
        if status == "Failed":
            try:
                await self.engine.retry(pitem.key, by=access.principal, application=access.application,
                                        reason=f"{message['op']} of stage {message['stage']}", signal=(CHANNEL, message))
            except ExecutionStateError as exc:
                raise Conflict(f"cannot {what}: {exc}") from None
        elif status in TERMINAL:
            raise Conflict(f"cannot {what}: pipeline {pitem.id} is {status}")
        else:
            await self._signal(access, pitem.key, message, what)

    async def decide(self, access: Access, stage_id: Any, approved: Any, reason: Any) -> None:
        stage, pitem = await self.stage(access, stage_id)  # another application's stage is unknown to any role
        access.require(DECIDE_RUNS)
        if not isinstance(approved, bool):
            raise PipelineInputError(f"approved must be true or false, got {approved!r}")
        if reason is not None and not isinstance(reason, str):
            raise PipelineInputError("rejectionReason must be a string")
        if not approved and not (reason or "").strip():
            raise PipelineInputError("rejectionReason is required when approved is false")
        if (reason or "").strip():  # free text: a sensitive value of the pipeline in it is never journaled
            secrets = await self.items.list(SECRET, access.application, prefix=f"{pitem.key}/")
            reason = mask(reason or "", [i.body.get("value") for i in secrets])
        else:
            reason = None
        # an approval keeps its reason too (``reason``): the reference's field is a rejection's
        decision = {"approved": approved, "rejectionReason": None if approved else reason,
                    "reason": reason if approved else None}
        record, p = await self._state_now(access, pitem.key)
        s = p["stages"][stage.body["name"]]
        name, run = s["name"], s["run"]
        # the decision is known by what reached the pipeline: the one its decider took (in the
        # write of its signal). A decision whose signal was never written is not known, so its
        # retry sends it
        taken = s["decision"]
        if taken is None and s["status"] != "WaitingForApproval":
            raise Conflict(f"stage {stage.id} ({name}) is {s['status']}, not WaitingForApproval")
        if taken is None:
            await self._signal(access, pitem.key, {"op": "decide", "stage": name, "run": run, **decision},
                               f"decide stage {stage.id}", decision=True)
            taken = (await self.state(access, pitem.key))[1]["stages"][name]["decision"]
        if taken is not None and {**taken, "reason": taken.get("reason")} != decision:
            raise Conflict(f"stage {stage.id} ({name}) was decided already with another decision")


class Starting(Exception):
    """A pipeline whose decider has not decided its start yet (it has no state)."""


def declared_specs(p: dict[str, Any]) -> builtins.list[dict[str, Any]]:
    """The stages a pipeline declares, in order (what an append is checked against)."""
    return [p["stages"][n]["spec"] for n in p["order"]]


def waited_out(journal: builtins.list[Any]) -> set[str]:
    """The frames of a pipeline's journal that are its workflow's own machinery, not a stage's or
    an operator's: the short receives that found nothing (they look for a last message before the
    pipeline ends) and ended in a timeout."""
    return {e.fid for e in journal if e.kind is EntryKind.FRAME_FAILED and e.fid is not None
            and "/receive#" in e.fid and isinstance(e.error, dict) and e.error.get("timeout")}


def stage_error(error: Any) -> Any:
    """The error that ended a failed pipeline, in the pipeline's words: the stage, its attempts and
    its own error, not the workflow's frame that carried it."""
    if not isinstance(error, dict) or error.get("type") != "StepFailed":
        return error
    details: dict[str, Any] = error["details"] if isinstance(error.get("details"), dict) else {}
    shown = {"type": "StageFailed", "message": error.get("cause_message") or error.get("message"),
             "errorCode": error.get("cause")}
    if details.get("stage") is not None:
        shown |= {"stage": details["stage"], "stageId": details.get("stageId"), "attempts": details.get("attempts"),
                  "errorCode": details.get("errorCode"), "errorMessage": details.get("errorMessage")}
    return shown


def stage_json(sid: int, pid: int, g: dict[str, Any], status: str, created: str | None) -> dict[str, Any]:
    """A stage declared and not started yet, in its public shape."""
    return {"id": sid, "pipelineId": pid, "name": g["stageName"], "stageHandlerName": g["stageHandlerName"],
            "description": g.get("description"), "isEvent": g.get("isEvent", False), "status": status,
            "input": g.get("input"), "output": None, "attempt": 0, "executionId": None, "errorCode": None,
            "errorMessage": None, "options": g.get("options") or {}, "dependsOn": g["dependsOn"],
            "createdAt": created, "startedAt": None, "finishedAt": None}


__all__ = ["Pipelines", "redact"]


def _spec_of(record: ExecutionRecord) -> dict[str, Any] | None:
    """The declaration a pipeline's execution was started with (its input), if it has one."""
    spec = record.args[0] if record.args else None
    return spec if isinstance(spec, dict) else None
