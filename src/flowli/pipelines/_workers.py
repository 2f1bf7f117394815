"""The worker protocol: bootstrap, long-poll pull, acquire, renew, result, ack, heartbeat,
shutdown. A job is one attempt of a stage: a DELEGATE task of the pipeline's execution, whose id
is the job's ``executionId`` and token. Its lease, its renewals, its expiry and the refusal of a
stale result are the engine's (``engine.consumer``)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

from flowli.access import SESSION, Access, Applications, Conflict, NotFound, Unauthorized, Unavailable, digest
from flowli.domain import (
    OPERATE_RUNS,
    DatabaseUnavailable,
    ExecutionTerminalError,
    Principal,
    StaleAnswer,
    Status,
    Task,
    UnknownExecutionError,
)
from flowli.engine import Consumer, Engine, task_traceparent
from flowli.store import NewItem

from ._decider import queue_of
from ._inputs import (
    AckIn,
    BootstrapIn,
    HeartbeatIn,
    LeaseIn,
    PipelineInputError,
    PullBatchIn,
    PullIn,
    ResultIn,
    StageIn,
    read,
)
from ._service import REFUSED_RESULT, SECRET, Pipelines, declared_specs
from ._spec import labels, stage_list
from ._timings import StageTimings
from ._view import REDACTED, iso, spec_attempt

WORKER = "worker"
SESSION_CACHE_SECONDS = 2.0
"""How long this process trusts a worker session it read (a shutdown through another process
takes effect within it; through this one at once). Its key is checked on every request."""
HEARTBEAT_SECONDS = 10
SESSION_TTL_SECONDS = 6 * HEARTBEAT_SECONDS
"""A worker session expires when its worker has sent nothing (a heartbeat, a poll, a lease call, a
result) for this long: six heartbeat intervals, which outlast the longest long poll (30 s) with a
heartbeat interval to spare."""
"""The heartbeat interval a worker is given (shorter with a lease shorter than three of them)."""
OFFLINE_AFTER = 3
"""Heartbeat intervals without a word after which a worker is shown ``offline``."""
MAX_EXECUTION_ID = 200
"""The longest executionId a worker may send (a job's is far shorter)."""


def fingerprint(body: dict[str, Any]) -> str:
    """The digest of a result as sent, by which a repeat of it is known: every field, but the
    values of sensitive context items (never journaled, so not compared either)."""
    shown = dict(body)
    if isinstance(body.get("contextItems"), list):
        shown["contextItems"] = [{**i, "value": REDACTED} if isinstance(i, dict) and i.get("isSensitive") else i
                                 for i in body["contextItems"]]
    text = json.dumps(shown, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _handler_names(handlers: list[str] | None, field: str) -> list[str]:
    """``handlers`` (none given: an empty list), each a nonempty name."""
    if handlers and not all(handlers):
        raise PipelineInputError(f"{field} must be a list of handler names")
    return handlers or []


class Session:
    def __init__(self, access: Access, worker_id: str, item_id: int, body: dict[str, Any], token_digest: str = "",
                 key_id: int | None = None):
        self.token_digest = token_digest
        self.key_id = key_id
        """The key the session was bootstrapped with (None: a session older than this field, refused)."""
        self.access = access
        self.worker_id = worker_id
        self.item_id = item_id
        self.body = body


class Workers:
    def __init__(self, engine: Engine, pipelines: Pipelines, lease_ttl: float = 30.0,
                 apps: Applications | None = None):
        self.engine = engine
        self.pipelines = pipelines
        self.apps = apps if apps is not None else Applications(engine)
        self.lease = timedelta(seconds=lease_ttl)
        self.interval: float = HEARTBEAT_SECONDS if lease_ttl >= 3 * HEARTBEAT_SECONDS else lease_ttl / 3
        """Seconds between a worker's heartbeats: a worker silent for OFFLINE_AFTER of them (a
        lease TTL, by default) is offline."""
        self.closing = asyncio.Event()
        """Set when the service stops: long polls end at once (``flowli serve``)."""
        self._sessions: dict[str, tuple[Session, float]] = {}
        """Sessions read in the last SESSION_CACHE_SECONDS: a worker's every call needs its own."""
        self.timings = StageTimings()
        """The stage metrics of this process (``flowli serve`` serves them at ``/metrics``)."""

    @property
    def items(self) -> Any:
        return self.engine.items

    def _consumer(self, session: Session, handlers: list[str]) -> Consumer:
        app = session.access.application
        return self.engine.consumer([queue_of(app, h) for h in handlers], session.worker_id, self.lease,
                                    application=app)

    async def bootstrap(self, access: Access, body: BootstrapIn | Any) -> dict[str, Any]:
        access.require(OPERATE_RUNS)
        body = read(BootstrapIn, body)
        name, handlers = body.workerName, body.supportedHandlers
        if not name.strip():
            raise PipelineInputError("workerName is required (a nonempty string)")
        _handler_names(handlers, "supportedHandlers")
        worker_id = str(uuid.uuid4())
        token = f"fws_{secrets.token_urlsafe(32)}"
        now = self.engine.clock.now()
        record = {"workerId": worker_id, "workerName": name, "supportedHandlers": handlers, "state": "ready",
                  "inFlight": 0, "instanceId": body.instanceId, "hostName": body.hostName,
                  "pid": body.pid, "sdkVersion": body.sdkVersion, "startedAt": iso(now),
                  "lastHeartbeat": iso(now), "applicationId": access.application_id, "key": access.actor}
        await self.items.put(WORKER, access.application, worker_id, record, now)
        await self.items.put(SESSION, access.application, digest(token), {"workerId": worker_id, "keyId": access.key_id},
                             now)
        await self._present(access.application, worker_id, handlers)
        return {"workerId": worker_id, "workerSessionToken": token,
                "application": {"id": access.application_id, "name": access.application},
                "heartbeat": {"intervalSeconds": self.interval}, "lease": {"ttlSeconds": self.lease.total_seconds()}}

    async def _present(self, application: str, worker_id: str, handlers: list[str]) -> None:
        """The worker is alive now: the engine's row of it says so, with its handlers' queues
        (``flowli explain`` tells a queue that no live worker serves)."""
        if handlers:
            await self.engine.consumer([queue_of(application, h) for h in handlers], worker_id, self.lease,
                                       application=application).present()

    def shown(self, body: dict[str, Any], now: Any) -> dict[str, Any]:
        """A worker as ``GET /workers`` shows it: ``offline`` once silent for OFFLINE_AFTER heartbeat
        intervals (a dead worker does not stay ready)."""
        shown = {k: v for k, v in body.items() if k != "key"}
        last = body.get("lastHeartbeat")
        if shown.get("state") in ("ready", "draining") and isinstance(last, str) and \
                (now - datetime.fromisoformat(last)).total_seconds() > OFFLINE_AFTER * self.interval:
            shown["state"] = "offline"
        return shown

    async def session(self, token: str | None) -> Session:
        """The live session of ``token``. Every request checks that the key it was bootstrapped
        with is still enabled (401 once it is not) and acts with that key's role as it is now (a
        worker's calls need an operator's); a session whose worker sent nothing for
        SESSION_TTL_SECONDS has expired (401: bootstrap again)."""
        if not token:
            raise Unauthorized("no worker session: send X-Worker-Session (from POST /workers/bootstrap)")
        await self.pipelines.upgrade()  # the pipelines of an older release are the decider's before a job is served
        hashed = digest(token)
        cached = self._sessions.get(hashed)
        if cached is not None and cached[1] > time.monotonic():
            session = cached[0]
        else:
            session = await self._read_session(hashed)
            if len(self._sessions) > 10_000:
                self._sessions.clear()
            self._sessions[hashed] = (session, time.monotonic() + SESSION_CACHE_SECONDS)
        if session.key_id is None:
            raise Unauthorized("the worker session was bootstrapped before sessions were bound to their key:"
                               " bootstrap again")
        try:
            key = await self.apps.key_access(session.key_id)
        except Unauthorized:
            self._sessions.pop(hashed, None)
            raise Unauthorized("the worker session ended: the API key it was bootstrapped with is disabled") from None
        now = self.engine.clock.now()
        seen = (now - datetime.fromisoformat(session.body["lastHeartbeat"])).total_seconds()
        if seen > SESSION_TTL_SECONDS:
            self._sessions.pop(hashed, None)
            raise Unauthorized(f"the worker session expired: its worker sent nothing for {SESSION_TTL_SECONDS} s"
                               " (bootstrap again)")
        session.access = Access(key.application, key.application_id, key.role, session.body["workerName"], key.key_id,
                                assistant=key.assistant, roles=key.roles)
        session.access.require(OPERATE_RUNS)  # a worker pulls, leases and answers: what an operator does
        if seen > HEARTBEAT_SECONDS:  # a sign of life between heartbeats keeps the session, at most one write an interval
            session.body = {**session.body, "lastHeartbeat": iso(now)}
            await self.items.update(WORKER, session.item_id, session.body, now)
        return session

    async def _read_session(self, hashed: str) -> Session:
        item = await self.items.find(SESSION, hashed)
        if item is None:
            raise Unauthorized("the worker session is unknown")
        worker = await self.items.find(WORKER, item.body["workerId"], item.application)
        if worker is None or worker.body.get("state") == "stopped":
            raise Unauthorized("the worker session ended (the worker shut down)")
        access = Access(item.application, worker.body["applicationId"], "operator", worker.body["workerName"])
        return Session(access, worker.key, worker.id, worker.body, hashed, item.body.get("keyId"))

    async def pull(self, session: Session, body: PullIn | Any,
                   gone: Callable[[], Awaitable[Any]] | None = None) -> dict[str, Any] | None:
        """One job, or None when none came within ``waitSeconds``. ``gone()`` ends when the client
        has gone away (its connection closed): a job is handed only to a poll whose client is still
        there, and one taken meanwhile goes back to its queue at once (the same attempt: no expiry)."""
        jobs = await self._poll(session, read(PullIn, body), 1, gone)
        return jobs[0] if jobs else None

    async def pull_batch(self, session: Session, body: PullBatchIn | Any,
                         gone: Callable[[], Awaitable[Any]] | None = None) -> list[dict[str, Any]]:
        """Up to ``body.max`` jobs in one long poll (as ``pull``: none when none came within
        ``waitSeconds``), each leased to this worker already: it carries ``leaseExpiresAt``, and
        no acquire is needed (an acquire would find the lease held, as after a pull)."""
        body = read(PullBatchIn, body)
        return [{**job, "leaseExpiresAt": iso(task.visible_at)}
                for job, task in await self._poll(session, body, body.max, gone, with_tasks=True)]

    async def _poll(self, session: Session, body: PullIn, limit: int, gone: Callable[[], Awaitable[Any]] | None,
                    with_tasks: bool = False) -> list[Any]:
        handlers = _handler_names(body.handlers, "handlers") or session.body["supportedHandlers"]
        wait = body.waitSeconds
        if not 0 <= wait <= 30:
            raise PipelineInputError(f"waitSeconds must be a number from 0 to 30, got {wait!r}")
        if not handlers:
            return []
        consumer = self._consumer(session, handlers)
        polling = asyncio.ensure_future(consumer.dequeue(limit, wait=float(wait)))
        ends = [asyncio.ensure_future(self.closing.wait())]
        if gone is not None:
            ends.append(asyncio.ensure_future(gone()))
        try:
            await asyncio.wait([polling, *ends], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for end in ends:
                end.cancel()
        left = gone is not None and ends[-1].done() and not ends[-1].cancelled()
        if not polling.done():  # the service stops (204: the worker polls again elsewhere), or the client went
            polling.cancel()
        try:
            tasks = await polling
        except asyncio.CancelledError:
            if not polling.cancelled():
                raise  # this request itself is cancelled
            return []
        if left:
            for task in tasks:  # taken as the client went: back to the queue at once
                await consumer.nack(task)
            return []
        jobs: list[Any] = []
        now = self.engine.clock.now()
        for task in tasks:
            self.timings.taken(task, (now - task.provenance.at).total_seconds())
            if not (task.frame or {}).get("decider"):
                # an attempt of a pipeline of an older release that the upgrade had not converted
                # yet: converted now (this attempt withdrawn, dispatched again as the decider's next one)
                await self.pipelines.convert(task.eid or "")
                continue
            job = await self.job(session, task)
            jobs.append((job, task) if with_tasks else job)
        return jobs

    async def job(self, session: Session, task: Task) -> dict[str, Any]:
        seed = dict(task.payload or {})
        attempt = spec_attempt(task)
        context = []
        for item in seed.get("contextItems") or []:
            if item.get("isSensitive"):
                secret = await self.items.find(SECRET, f"{task.eid}/{item['key']}", session.access.application)
                item = {**item, "value": secret.body["value"] if secret else None}
            context.append(item)
        return {"token": task.id, "pipelineId": seed["pipelineId"], "stageId": seed["stageId"],
                "stageName": seed["stageName"], "stageHandlerName": seed["stageHandlerName"], "executionId": task.id,
                "attempt": attempt, "idempotencyKey": f"{seed['pipelineId']}:{seed['stageId']}:{attempt}",
                "input": seed.get("input"), "prevStageOutput": seed.get("prevStageOutput"), "contextItems": context,
                "pipelineKeywords": seed.get("pipelineKeywords") or [], "timeoutSeconds": seed.get("timeoutSeconds"),
                "traceparent": task_traceparent(task)}

    async def _find(self, session: Session, stage_id: Any, execution_id: Any) -> tuple[Any, Task | None]:
        """The stage item, and the job (a DELEGATE task) ``execution_id`` of that stage, or None
        when the stage never had it."""
        if not isinstance(execution_id, str) or not execution_id:
            raise PipelineInputError("executionId is required (the job's executionId)")
        if len(execution_id) > MAX_EXECUTION_ID:
            raise PipelineInputError(f"executionId is longer than {MAX_EXECUTION_ID} characters: not a job's executionId")
        stage = await self.pipelines.stage_item(session.access, stage_id)
        task = await self.engine.task(execution_id, application=session.access.application)
        if task is None or (task.payload or {}).get("stageId") != stage.id:
            return stage, None
        return stage, task

    async def _task(self, session: Session, stage_id: Any, execution_id: Any) -> Task:
        stage, task = await self._find(session, stage_id, execution_id)
        if task is None:
            raise NotFound(f"no execution {execution_id!r} of stage {stage.id}")
        return task

    async def acquire(self, session: Session, stage_id: Any, body: LeaseIn | Any, *,
                      renew: bool = False) -> dict[str, Any]:
        body = read(LeaseIn, body)
        if body.workerId is not None and body.workerId != session.worker_id:
            raise PipelineInputError("workerId is not the worker of this session")
        task = await self._task(session, stage_id, body.executionId)
        answer = await self._lease(session, task, renew)
        if renew:  # a cancel of the pipeline tells the worker to stop, whatever became of its lease
            record = await self.engine.status(task.eid or "", application=session.access.application)
            answer["cancelRequested"] = record.cancel_requested is not None or record.status is Status.CANCELLED
        return answer

    async def _lease(self, session: Session, task: Task, renew: bool) -> dict[str, Any]:
        consumer = self.engine.consumer(task.queue, session.worker_id, self.lease, application=session.access.application)
        now = self.engine.clock.now()
        if task.state != "ready":
            record = await self.engine.status(task.eid or "", application=session.access.application)
            reason = "cancelled" if record.status.value == "cancelled" else "superseded"
            return {"acquired": False, "reason": reason}
        if task.lease_owner is not None and task.lease_owner != session.worker_id and task.visible_at > now:
            return {"acquired": False, "reason": "held by another worker"}
        if not renew and task.lease_owner == session.worker_id and task.visible_at - now > self.lease / 2:
            # the lease that the pull just granted has most of its time left: held as it is
            return {"acquired": True, "attempt": spec_attempt(task), "leaseExpiresAt": iso(task.visible_at)}
        try:
            renewed = await consumer.renew(task)
        except StaleAnswer:
            return {"acquired": False, "reason": "lease lost (it expired and the job is delivered again)"}
        return {"acquired": True, "attempt": spec_attempt(renewed), "leaseExpiresAt": iso(renewed.visible_at)}

    async def result(self, session: Session, stage_id: Any, body: ResultIn | Any) -> tuple[int, dict[str, Any]]:
        body = read(ResultIn, body)
        attempt, ok = body.attempt, body.isSuccess
        stage, task = await self._find(session, stage_id, body.executionId)
        if task is None:  # a result of an execution that this stage never had: stale, as a late one
            return await self._refuse(session, stage.body["eid"], body, stage.id,
                                      f"execution {body.executionId!r} is not an execution of stage {stage.id}"
                                      " (unknown, or of another stage)")
        context = labels(body.contextItems, "contextItems")
        if attempt != spec_attempt(task):
            return await self._refuse(session, task.eid or "", body, stage.id,
                                      f"attempt {attempt} is not the current attempt {spec_attempt(task)} of this execution")
        sent = fingerprint(body.model_dump(exclude_unset=True))
        # an attempt answered already: an identical repeat of its accepted result is accepted again,
        # whatever it carries and however far the pipeline went on; nothing of another is kept
        # (no secret stored, no stage numbered): the store refuses it below
        answered = task.state != "ready"
        if answered and await self._accepted(task, sent):
            return 202, {"accepted": True}
        value: dict[str, Any] = {"ok": ok, "output": body.output, "attempt": attempt, "fingerprint": sent,
                                 "worker": session.worker_id}
        if not ok:
            value.update(errorCode=body.errorCode, errorMessage=body.errorMessage, retryable=body.retryable is not False)
        if body.isWaitingForApproval:
            value["waiting"] = True
        rows: list[NewItem] = []  # written in the write of the answer, so none of a stale one is kept
        if context and not answered:
            value["context"], sealed = await self.pipelines._keep_secrets(session.access, task.eid or "", context)
            rows += sealed
        if body.appendStages and not answered:
            value["append"], numbered = await self._appended(session, task, body.appendStages)
            rows += numbered
        if body.logs:
            value["logs"] = [log.model_dump(include={"message", "logLevel", "created"}) for log in body.logs]
        consumer = self.engine.consumer(task.queue, session.worker_id, self.lease, application=session.access.application)
        by = Principal(session.access.actor, "worker", (session.access.role,), session.access.application)
        try:
            if ok or not (task.frame or {}).get("decider"):
                await consumer.answer(task, value, by=by, items=rows)
            else:  # a failed attempt: the engine's failure path, what the result said beside its error in details
                details = {k: v for k, v in value.items() if k in ("fingerprint", "context", "append", "logs", "worker")}
                await consumer.fail(task, body.errorCode or "FAILED", body.errorMessage or "",
                                    retryable=body.retryable is not False, by=by, details=details,
                                    items=rows)
        except StaleAnswer as exc:
            if await self._accepted(task, sent):
                return 202, {"accepted": True}
            return await self._refuse(session, task.eid or "", body, stage.id, str(exc))
        except ExecutionTerminalError as exc:
            return await self._refuse(session, task.eid or "", body, stage.id, f"the pipeline is {exc.status}")
        except DatabaseUnavailable as exc:
            raise Unavailable(f"the result was not confirmed ({exc}): send it again") from None
        self.timings.answered(task, "succeeded" if ok else "failed")
        return 202, {"accepted": True}

    async def _appended(self, session: Session, task: Task,
                        stages: list[StageIn]) -> tuple[list[dict[str, Any]], list[NewItem]]:
        _, p = await self.pipelines.state(session.access, task.eid or "")
        specs = stage_list(stages, declared_specs(p))
        return await self.pipelines._stage_ids(session.access, task.eid or "", specs, p["spec"]["name"],
                                               p["spec"].get("keywords") or [])

    async def _accepted(self, task: Task, sent: str) -> bool:
        """Whether the pipeline took this very result as the attempt's outcome (a repeat): its
        decider's state keeps the fingerprint of each attempt's result (by the stage's attempt
        number: a task of a pipeline of version 1 numbers its attempts from its frame's base)."""
        _, state = await self.engine.decider_state(task.eid or "")
        name = (state or {}).get("ids", {}).get(str((task.payload or {}).get("stageId")))
        stage = state["stages"].get(name) if name else None
        return stage is not None and stage["fingerprints"].get(str(spec_attempt(task))) == sent

    async def _refuse(self, session: Session, eid: str, body: ResultIn, stage_id: int,
                      reason: str) -> tuple[int, dict[str, Any]]:
        """409: a stale result changes nothing but the pipeline's history, which records it: the
        refusal is one write of its own, an entry announced in the pipeline's journal (no
        command: its state does not change). A pipeline no longer live (archived) records none."""
        record = {"executionId": body.executionId, "attempt": body.attempt, "reason": reason,
                  "isSuccess": body.isSuccess, "errorCode": body.errorCode, "actor": session.access.actor,
                  "stageId": stage_id}
        by = Principal(session.access.actor, "worker", (session.access.role,), session.access.application)
        with contextlib.suppress(UnknownExecutionError):
            await self.engine.announce(eid, REFUSED_RESULT, record, by=by, application=session.access.application)
        return 409, {"accepted": False, "reason": reason}

    async def ack(self, session: Session, body: AckIn | Any) -> dict[str, Any]:
        body = read(AckIn, body)
        token, requeue = body.token, body.requeue
        if not token:
            raise PipelineInputError("token is required (the job's token)")
        task = await self.engine.task(token, application=session.access.application)
        if task is None:
            raise NotFound(f"no job with token {token!r}")
        if task.state == "ready" and requeue:
            await self.engine.consumer(task.queue, session.worker_id, self.lease,
                                       application=session.access.application).nack(task)
        return {"acknowledged": True}

    async def heartbeat(self, session: Session, body: HeartbeatIn | Any) -> dict[str, Any]:
        """The worker's state and jobs in flight (each, when not sent, as it last said)."""
        body = read(HeartbeatIn, body)
        state = body.state or session.body.get("state", "ready")
        in_flight = body.inFlight if body.inFlight is not None else session.body.get("inFlight", 0)
        if in_flight < 0:
            raise PipelineInputError(f"inFlight must be a non-negative number, got {in_flight!r}")
        now = self.engine.clock.now()
        session.body = {**session.body, "state": state, "inFlight": in_flight, "lastHeartbeat": iso(now)}
        await self.items.update(WORKER, session.item_id, session.body, now)
        await self._present(session.access.application, session.worker_id, session.body["supportedHandlers"])
        return {"ok": True}

    async def shutdown(self, session: Session) -> dict[str, Any]:
        self._sessions.pop(session.token_digest, None)
        now = self.engine.clock.now()
        await self.items.update(WORKER, session.item_id, {**session.body, "state": "stopped", "lastHeartbeat": iso(now)}, now)
        return {"ok": True}

    async def list(self, access: Access) -> list[dict[str, Any]]:
        now = self.engine.clock.now()
        return [self.shown(i.body, now) for i in await self.items.list(WORKER, access.application)]


__all__ = ["REDACTED", "Conflict", "Workers"]
