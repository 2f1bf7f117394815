"""A frozen copy of the workflow ``flowli.pipeline`` of version 1, the form of a pipeline in the
release before the decider (version 2). The project no longer has it: this copy lives in the
tests only, to write a database as that release did (its executions, journals, tasks, timers and
waits), which the upgrade then converts (see ``flowli.pipelines._upgrade``). Its code is that
release's, unchanged but for its imports and for registering itself as version "1"."""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

from flowli.domain import StepFailed
from flowli.engine import Context, Registry
from flowli.pipelines import _retry

WORKFLOW = "flowli.pipeline"
CHANNEL = "pipeline"
REOPEN = "pipeline-reopen"
"""The channel of the message that reopens a failed pipeline (``engine.retry`` sends it)."""
DONE = frozenset({"Completed", "Skipped"})


def queue_of(application: str | None, handler: str) -> str:
    """The queue of an application's handler: its DELEGATE tasks wait there for a worker."""
    return f"pipelines:{application or ''}:{handler}"


class Stage:
    """One stage as the workflow knows it."""

    def __init__(self, spec: dict[str, Any]):
        self.spec = spec
        self.id: int = spec["id"]
        self.name: str = spec["stageName"]
        self.status = "NotStarted"
        self.attempts = 0
        """The number of the stage's last attempt (each delegate frame's first; a lease that
        expired inside a frame made another one, which its result or failure tells)."""
        self.frames = 0
        """Delegate frames created for the stage (its frame keys count them)."""
        self.output: str | None = None
        self.error_code: str | None = None
        self.error_message: str | None = None
        self.run = 0
        """Bumped by a rerun or a skip: a late outcome of an earlier run changes nothing."""
        self.retries = 0
        self.frame: str | None = None
        """The fid of the current attempt's delegate frame."""
        self.started: str | None = None
        """The fid whose frame.started is the stage's start (its first attempt in this run)."""
        self.finished: str | None = None
        """The fid whose outcome ended the stage (an attempt, a message)."""
        self.decision: dict[str, Any] | None = None
        self.retry_at: str | None = None
        self.base = 0
        """The attempts before the current delegate frame (its job's attempt is base + the frame's)."""
        """The fid of the sleep frame of a scheduled retry."""


class Pipeline:
    """The state of a pipeline run, as its workflow keeps it (what ``ctx.expose`` shows)."""

    def __init__(self, spec: dict[str, Any]):
        self.spec = spec
        self.stages: dict[str, Stage] = {}
        self.order: list[str] = []
        for s in spec["stages"]:
            self.add(s)
        declared = spec.get("context") or []
        self.context: dict[str, dict[str, Any]] = {c["key"]: c for c in declared if not c.get("isDeleted")}
        self.sensitive: set[str] = {c["key"] for c in declared if c.get("isSensitive")}
        """The context keys that were ever sensitive: a view redacts their values, whatever a later
        item says (the service marks such an item sensitive before it is journaled, too)."""
        self.paused = False
        self.outcome: str | None = None
        self.refused: list[dict[str, Any]] = []

    def add(self, spec: dict[str, Any]) -> None:
        self.stages[spec["stageName"]] = Stage(spec)
        self.order.append(spec["stageName"])

    def declared(self) -> list[dict[str, Any]]:
        return [self.stages[n].spec for n in self.order]

    def eligible(self) -> list[Stage]:
        return [s for s in (self.stages[n] for n in self.order) if s.status == "NotStarted"
                and all(self.stages[d].status in DONE for d in s.spec["dependsOn"])]

    def dependents(self, name: str) -> list[str]:
        """Every stage that depends on ``name``, transitively, in declaration order."""
        found: set[str] = set()
        changed = True
        while changed:
            changed = False
            for n in self.order:
                if n not in found and any(d == name or d in found for d in self.stages[n].spec["dependsOn"]):
                    found.add(n)
                    changed = True
        return [n for n in self.order if n in found]

    def busy(self) -> bool:
        return any(s.status in ("Pending", "Running", "RetryScheduled", "WaitingForApproval")
                   for s in self.stages.values())

    def merge_context(self, items: list[dict[str, Any]]) -> None:
        for item in items or []:
            if item.get("isSensitive"):
                self.sensitive.add(item["key"])
            if item.get("isDeleted"):
                self.context.pop(item["key"], None)
            else:
                self.context[item["key"]] = item


def job_seed(p: Pipeline, stage: Stage, application: str | None) -> dict[str, Any]:
    spec = stage.spec
    deps = spec["dependsOn"]
    prev = p.stages[deps[-1]].output if deps else None
    timeout = (spec.get("options") or {}).get("timeOut")
    return {"pipelineId": p.spec["pipelineId"], "stageId": stage.id, "stageName": stage.name,
            "stageHandlerName": spec["stageHandlerName"], "input": spec.get("input"), "prevStageOutput": prev,
            "pipelineKeywords": p.spec.get("keywords") or [], "contextItems": list(p.context.values()),
            "timeoutSeconds": timeout or None, "base": stage.attempts, "application": application,
            "traceId": p.spec.get("traceId")}


async def pipeline(ctx: Context, spec: dict[str, Any]) -> Any:
    p = Pipeline(spec)
    ctx.expose(p)
    application = spec.get("application")
    waiting: dict[Any, tuple[str, int, str]] = {}
    control = ctx.receive(CHANNEL)
    while True:
        if not p.paused:
            for stage in p.eligible():
                _dispatch(ctx, p, stage, application, waiting)
        in_flight = any(kind == "attempt" and run == p.stages[name].run for name, run, kind in waiting.values())
        if not p.busy() and not in_flight:
            if all(s.status in DONE for s in p.stages.values()):
                # an operator's message sent before the last result (stages appended, a rerun)
                # comes first: the last result's outcome may be journaled before it is received
                last_call = ctx.receive(CHANNEL, timeout=timedelta(milliseconds=1))
                taken = await ctx.first([control, last_call])
                try:
                    message = await taken
                except TimeoutError:
                    p.outcome = "Completed"
                    return {"outputs": {n: p.stages[n].output for n in p.order}}
                _control(p, message)
                if taken is control:  # the other receive ends too: by a timeout, or with the next message
                    control = ctx.receive(CHANNEL)
                    with contextlib.suppress(TimeoutError):
                        _control(p, await last_call)
                continue
            failed = [s for s in p.stages.values() if s.status == "Failed"]
            if failed:
                # the run ends failed; a rerun reopens this frame (engine.retry with the message)
                p.outcome = "Failed"
                closing = ctx.receive(REOPEN, timeout=timedelta(milliseconds=1))
                try:
                    message = await closing
                except TimeoutError:
                    # the failed frame is this receive (engine.retry reopens it); the error names
                    # the stage, its attempts and its own error (the pipeline's history shows them)
                    raise failure(closing.fid, failed[0]) from None  # type: ignore[attr-defined]
                p.outcome = None
                _control(p, message)
                control = ctx.receive(CHANNEL)
                continue
        frame = await ctx.first([*waiting, control])
        if frame is control:
            _control(p, await frame)
            control = ctx.receive(CHANNEL)
            continue
        name, run, kind = waiting.pop(frame)
        stage = p.stages[name]
        if run != stage.run:
            continue  # an outcome of a run that a rerun or a skip replaced
        if kind == "retry":
            stage.status = "NotStarted"
            stage.retry_at = None
            continue
        try:
            value = await frame
        except TimeoutError:
            _failed(ctx, p, stage, "TIMEOUT", "the attempt ran past the stage's timeOut", True, waiting, fid_of(frame))
            continue
        except StepFailed as exc:
            stage.attempts = stage.base + max(1, exc.attempts)
            _failed(ctx, p, stage, exc.error_type, exc.message, True, waiting, fid_of(frame))
            continue
        _result(ctx, p, stage, value, waiting, fid_of(frame))


STAGE_FAILED = "STAGE_FAILED"
"""The code of the error that ends a failed pipeline's execution: its details name the stage."""


def failure(fid: str, s: Stage) -> StepFailed:
    code = s.error_code or "FAILED"
    message = f"stage {s.name!r} failed after {s.attempts} attempt(s): {code}: {s.error_message or code}"
    return StepFailed(fid, code, message, 1, code=STAGE_FAILED,
                      details={"stage": s.name, "stageId": s.id, "attempts": s.attempts, "errorCode": s.error_code,
                               "errorMessage": s.error_message})


def fid_of(frame: Any) -> str:
    return str(frame.fid)


def _dispatch(ctx: Context, p: Pipeline, stage: Stage, application: str | None,
              waiting: dict[Any, tuple[str, int, str]]) -> None:
    timeout = (stage.spec.get("options") or {}).get("timeOut")
    seed = job_seed(p, stage, application)
    frame: Any = ctx.delegate(queue_of(application, stage.spec["stageHandlerName"]), seed,
                         key=f"{stage.id}.{stage.run}.{stage.frames + 1}",
                         timeout=timedelta(seconds=timeout) if timeout else None)
    stage.frames += 1
    stage.base = stage.attempts
    stage.attempts += 1
    stage.status = "Pending"
    stage.frame = frame.fid  # type: ignore[attr-defined]
    if stage.started is None:
        stage.started = stage.frame
    waiting[frame] = (stage.name, stage.run, "attempt")


def _failed(ctx: Context, p: Pipeline, stage: Stage, code: str | None, message: str | None, retryable: bool,
            waiting: dict[Any, tuple[str, int, str]], fid: str) -> None:
    stage.error_code, stage.error_message = code, message
    seconds = _retry.decide(stage.spec["plan"], code, retryable, stage.retries,
                            f"{ctx.eid}:{stage.id}:{stage.run}:{stage.retries}")
    if seconds is None:
        stage.status = "Failed"
        stage.finished = fid
        return
    stage.retries += 1
    stage.status = "RetryScheduled"
    sleep = ctx.sleep(timedelta(seconds=seconds))
    stage.retry_at = sleep.fid  # type: ignore[attr-defined]
    waiting[sleep] = (stage.name, stage.run, "retry")


def _result(ctx: Context, p: Pipeline, stage: Stage, value: Any, waiting: dict[Any, tuple[str, int, str]],
            fid: str) -> None:
    value = value if isinstance(value, dict) else {"ok": True, "output": value}
    if isinstance(value.get("attempt"), int):
        stage.attempts = value["attempt"]
    p.merge_context(value.get("context") or [])
    if value.get("append"):
        _append(p, value["append"])
    if not value.get("ok", True):
        _failed(ctx, p, stage, value.get("errorCode"), value.get("errorMessage"), value.get("retryable", True) is not False,
                waiting, fid)
        return
    stage.output = value.get("output")
    stage.error_code = stage.error_message = None
    stage.finished = fid
    stage.status = "WaitingForApproval" if value.get("waiting") else "Completed"


def _append(p: Pipeline, stages: list[dict[str, Any]]) -> None:
    """Stages the service validated and numbered (ids, resolved dependsOn, retry plan). One whose
    name or dependency no longer fits (a concurrent append took the name) is left out, and said."""
    for spec in stages:
        if not isinstance(spec, dict) or spec.get("stageName") in p.stages or \
                any(d not in p.stages and d not in {s.get("stageName") for s in stages} for d in spec.get("dependsOn", [])):
            p.refused.append({"append": spec.get("stageName") if isinstance(spec, dict) else None})
            continue
        p.add(spec)


def _control(p: Pipeline, message: Any) -> None:
    """An operator's action or an application's decision (validated by whoever sent it; one
    that no longer applies changes nothing)."""
    if not isinstance(message, dict):
        return
    op = message.get("op")
    stage = p.stages.get(message.get("stage") or "")
    if op == "pause":
        p.paused = True
    elif op == "resume":
        p.paused = False
    elif op == "append":
        _append(p, message.get("stages") or [])
    elif stage is None:
        return
    elif op == "decide" and stage.status == "WaitingForApproval" and message.get("run", stage.run) == stage.run:
        stage.decision = {"approved": bool(message.get("approved")), "rejectionReason": message.get("rejectionReason")}
        stage.finished = message.get("fid")
        if stage.decision["approved"]:
            stage.status = "Completed"
        else:
            stage.status = "Failed"
            stage.error_code = "REJECTED"
            stage.error_message = message.get("rejectionReason")
    elif op == "skip" and stage.status not in DONE:
        stage.run += 1
        stage.status = "Skipped"
    elif op == "rerun":
        names = [stage.name, *(p.dependents(stage.name) if message.get("next") else [])]
        for n in names:
            s = p.stages[n]
            s.run += 1
            s.status = "NotStarted"
            s.output = s.error_code = s.error_message = None
            s.retries = 0
            s.decision = None
            s.started = s.finished = s.retry_at = None


def install(registry: Registry) -> None:
    """Register ``flowli.pipeline`` version 1 in ``registry``, as the older release did."""
    registry.workflow(WORKFLOW, version="1")(pipeline)
