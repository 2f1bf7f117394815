"""The decider ``flowli.pipeline`` (version "2"): a pipeline is one execution of it, whose state is
the pipeline with its stages, stored beside the execution and advanced in the write of each
command (see ``flowli.engine.deciders``). Nothing is replayed: a read is the stored state.

Commands and what they decide (events in the pipeline's words, effects the engine's):

- Start(spec): ``pipeline.started``, then each eligible stage ``stage.dispatched`` (a Delegate on
  the queue of its application and handler, key the stage id, attempt its attempt number; a
  Timer ``timeout:<id>:<attempt>`` with its ``timeOut``).
- Answered: ``stage.completed`` or ``stage.waiting_for_approval``; Failed, a timeout, an expiry:
  ``stage.failed`` then ``stage.retry_scheduled`` (a Timer ``retry:<id>:<attempt>``) when its
  retry plan says so. A command about an attempt that is not the stage's open one changes nothing.
  The event of an attempt's outcome names in ``leasedBy`` the worker that held its lease.
- Signal on ``pipeline``: pause, resume, append, decide (``stage.approved``/``stage.rejected``),
  skip, rerun; CancelRequested: ``pipeline.cancelled`` and the end Cancel.
- When nothing is open: all stages done, ``pipeline.completed`` and Complete; one failed,
  ``pipeline.failed`` and Fail (a rerun reopens it: ``engine.retry`` with its message, the command
  Retried).
- Adopted: a pipeline of the previous release (the workflow of version "1", folded by ``_upgrade``)
  becomes this decider's: each stage whose attempt was open is dispatched again (its next
  attempt), a scheduled retry is due at once; a pipeline that had failed ends failed.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from flowli.engine import Registry
from flowli.engine.deciders import (
    Adopted,
    Answered,
    Cancel,
    CancelRequested,
    Complete,
    Delegate,
    Event,
    Expired,
    Fail,
    Failed,
    Index,
    Retried,
    Signal,
    Start,
    Timer,
    TimerFired,
    Withdraw,
)

from . import _retry

WORKFLOW = "flowli.pipeline"
VERSION = "2"
CHANNEL = "pipeline"
DONE = frozenset({"Completed", "Skipped"})
BUSY = frozenset({"Pending", "Running", "RetryScheduled", "WaitingForApproval"})
EXPIRIES = 3
"""Leases of one attempt that may expire (its worker died) before the attempt counts as failed:
each expiry makes the next attempt at once."""

INITIAL: dict[str, Any] = {"spec": None, "order": [], "stages": {}, "ids": {}, "context": {}, "sensitive": [],
                           "paused": False, "outcome": None, "refused": [], "at": None}


def queue_of(application: str | None, handler: str) -> str:
    """The queue of an application's handler: its DELEGATE tasks wait there for a worker."""
    return f"pipelines:{application or ''}:{handler}"


def handler_of(queue: str, application: str | None) -> str | None:
    """The handler of ``application`` whose jobs wait in ``queue`` (the inverse of
    :func:`queue_of`), else None."""
    prefix = queue_of(application, "")
    return queue[len(prefix):] if queue.startswith(prefix) and len(queue) > len(prefix) else None


def new_stage(spec: dict[str, Any]) -> dict[str, Any]:
    return {"spec": spec, "id": spec["id"], "name": spec["stageName"], "status": "NotStarted", "attempts": 0,
            "output": None, "errorCode": None, "errorMessage": None, "run": 0, "retries": 0, "expiries": 0,
            "decision": None, "startedAt": None, "finishedAt": None, "fingerprints": {}}


# ---- evolve --------------------------------------------------------------------------------------


def evolve(state: dict[str, Any], event: Event) -> dict[str, Any]:
    """The state after ``event``: a new state that shares with ``state`` what the event does not
    change (a stage's record is copied only when the event changes it), so folding one event
    costs what the event touches, not the size of the pipeline. Neither argument is changed."""
    s = dict(state)
    d = event.data or {}
    kind = event.kind
    if kind in _TOUCHES_ALL:
        s["stages"], s["order"], s["ids"], s["refused"] = \
            dict(s["stages"]), list(s["order"]), dict(s["ids"]), list(s["refused"])
    stage = None
    if isinstance(d, dict) and "stage" in d and d.get("stage") in s["stages"]:
        if s["stages"] is state["stages"]:
            s["stages"] = dict(s["stages"])
        old = s["stages"][d["stage"]]
        # a stage's own containers: its fingerprints change in place below; its spec never does
        stage = s["stages"][d["stage"]] = {**old, "fingerprints": dict(old["fingerprints"])}
    if kind in _TOUCHES_CONTEXT:
        s["context"], s["sensitive"] = dict(s["context"]), list(s["sensitive"])
    if kind == "pipeline.started":
        spec = d["spec"]
        s["spec"] = {k: v for k, v in spec.items() if k not in ("stages", "context")}
        s["at"] = d.get("at")
        for st in spec["stages"]:
            _add(s, st)
        declared = spec.get("context") or []
        s["context"] = {c["key"]: c for c in declared if not c.get("isDeleted")}
        s["sensitive"] = sorted({c["key"] for c in declared if c.get("isSensitive")})
    elif kind == "stage.dispatched":
        assert stage is not None
        stage["attempts"] = d["attempt"]
        stage["status"] = "Pending"
        stage["startedAt"] = stage["startedAt"] or d.get("at")
    elif kind == "stage.retry_due":
        assert stage is not None
        stage["status"] = "NotStarted"
    elif kind == "stage.lease_expired":
        assert stage is not None
        stage["expiries"] += 1
    elif kind in ("stage.completed", "stage.waiting_for_approval"):
        assert stage is not None
        _merge(s, d.get("context") or [])
        stage["fingerprints"][str(d["attempt"])] = d.get("fingerprint")
        stage["attempts"] = d["attempt"]
        stage["output"] = d.get("output")
        stage["errorCode"] = stage["errorMessage"] = None
        stage["finishedAt"] = d.get("at")
        stage["status"] = "WaitingForApproval" if kind == "stage.waiting_for_approval" else "Completed"
    elif kind == "stage.failed":
        assert stage is not None
        _merge(s, d.get("context") or [])
        if d.get("fingerprint"):
            stage["fingerprints"][str(d["attempt"])] = d["fingerprint"]
        stage["errorCode"], stage["errorMessage"] = d.get("errorCode"), d.get("errorMessage")
        stage["expiries"] = 0
        stage["status"] = "Failed"
        stage["finishedAt"] = d.get("at")
    elif kind == "stage.retry_scheduled":
        assert stage is not None
        stage["retries"] += 1
        stage["status"] = "RetryScheduled"
        stage["finishedAt"] = None
    elif kind == "stages.appended":
        for st in d.get("stages") or []:
            _add(s, st)
        s["refused"] += [{"append": n} for n in d.get("refused") or []]
    elif kind in ("stage.approved", "stage.rejected"):
        assert stage is not None
        stage["decision"] = {"approved": kind == "stage.approved", "rejectionReason": d.get("rejectionReason"),
                             "reason": d.get("reason")}
        stage["finishedAt"] = d.get("at")
        if kind == "stage.approved":
            stage["status"] = "Completed"
        else:
            stage["status"], stage["errorCode"], stage["errorMessage"] = "Failed", "REJECTED", d.get("rejectionReason")
    elif kind == "stage.skipped":
        assert stage is not None
        stage["run"] += 1
        stage["status"] = "Skipped"
        if s["outcome"] == "Failed":  # its failed stage skipped: the pipeline goes on
            s["outcome"] = None
    elif kind == "stage.rerun":
        for n in d.get("stages") or []:
            st = s["stages"][n]
            s["stages"][n] = {**st, "run": st["run"] + 1, "status": "NotStarted", "output": None, "errorCode": None,
                              "errorMessage": None, "retries": 0, "expiries": 0, "decision": None, "startedAt": None,
                              "finishedAt": None}
        s["outcome"] = None
    elif kind == "pipeline.paused":
        s["paused"] = True
    elif kind == "pipeline.resumed":
        s["paused"] = False
    elif kind == "pipeline.completed":
        s["outcome"] = "Completed"
    elif kind == "pipeline.failed":
        s["outcome"] = "Failed"
    elif kind == "pipeline.cancelled":
        s["outcome"] = "Cancelled"
    return s


_TOUCHES_ALL = frozenset({"pipeline.started", "stages.appended", "stage.rerun"})
"""Events that change many stages or the order: folded on copies of the state's containers."""
_TOUCHES_CONTEXT = frozenset({"stage.completed", "stage.waiting_for_approval", "stage.failed"})


def status_of(state: dict[str, Any]) -> str:
    """The pipeline's status by its state alone (its execution's end is in the state too: the
    outcome is decided in the write that ends it)."""
    if state.get("spec") is None:
        return "NotStarted"
    if state["outcome"] is not None:
        return str(state["outcome"])
    if state["paused"]:
        return "Paused"
    started = any(s["status"] != "NotStarted" for s in state["stages"].values())
    return "Running" if started else "NotStarted"


def index(state: dict[str, Any]) -> Index:
    """What lists of pipelines filter on: the status, the name, the keywords, the search text
    (the name, the id, the idempotency key and the context's values that are not sensitive),
    and how many stages wait for an approval (the inbox)."""
    spec = state.get("spec") or {}
    sensitive = set(state["sensitive"])
    text = [spec.get("name") or "", str(spec.get("pipelineId", "")), spec.get("idempotencyKey") or ""]
    text += [str(c.get("value")) for k, c in state["context"].items()
             if k not in sensitive and not c.get("isSensitive") and c.get("value") is not None]
    return Index(number=spec.get("pipelineId"), label=status_of(state), name=spec.get("name"),
                 tags=tuple(f"{k.get('key')}:{k.get('value')}" for k in spec.get("keywords") or []),
                 text="\n".join(text).lower(),
                 waiting=sum(1 for st in state["stages"].values() if st["status"] == "WaitingForApproval"))


def _add(s: dict[str, Any], spec: dict[str, Any]) -> None:
    s["stages"][spec["stageName"]] = new_stage(spec)
    s["order"].append(spec["stageName"])
    s["ids"][str(spec["id"])] = spec["stageName"]


def _merge(s: dict[str, Any], items: list[dict[str, Any]]) -> None:
    for item in items:
        if item.get("isSensitive") and item["key"] not in s["sensitive"]:
            s["sensitive"].append(item["key"])
        if item.get("isDeleted"):
            s["context"].pop(item["key"], None)
        else:
            s["context"][item["key"]] = item


# ---- decide --------------------------------------------------------------------------------------


class _Decision:
    """The events and effects of one command, with the state they lead to (each event folded as
    it is decided, so the next rule sees it)."""

    def __init__(self, state: dict[str, Any], at: str | None):
        self.state = state
        self.at = at
        self.events: list[Event] = []
        self.effects: list[Any] = []

    def emit(self, kind: str, data: dict[str, Any]) -> None:
        event = Event(kind, data)
        self.events.append(event)
        self.state = evolve(self.state, event)

    def stage(self, name: str) -> dict[str, Any]:
        return self.state["stages"][name]  # type: ignore[no-any-return]


def decide(state: dict[str, Any], command: Any) -> tuple[list[Event], list[Any]]:
    at = getattr(command, "at", None)
    d = _Decision(state, at)
    if isinstance(command, Start):
        d.emit("pipeline.started", {"spec": command.input, "at": at})
    elif state["outcome"] in ("Completed", "Cancelled"):
        return [], []
    elif isinstance(command, Answered):
        _answered(d, command)
    elif isinstance(command, Failed):
        details = command.details if isinstance(command.details, dict) else {}
        _failed(d, command.key, command.attempt, command.error_type, command.message, command.retryable, details)
    elif isinstance(command, Expired):
        _expired(d, command)
    elif isinstance(command, TimerFired):
        _timer(d, command.key)
    elif isinstance(command, (Signal, Retried)):  # a rerun of a failed pipeline is a retry with its message
        if command.channel == CHANNEL and isinstance(command.payload, dict):
            _control(d, command.payload)
    elif isinstance(command, CancelRequested):
        d.emit("pipeline.cancelled", {"by": command.by, "reason": command.reason, "at": at})
        return d.events, [Cancel(command.reason)]
    elif isinstance(command, Adopted):
        _adopted(d)
    _advance(d)
    return d.events, d.effects


def open_stage(state: dict[str, Any], key: str, attempt: int) -> dict[str, Any] | None:
    """The stage whose open attempt is ``attempt`` of DELEGATE ``key``, or None (a stale one)."""
    name = state["ids"].get(key)
    stage = state["stages"].get(name) if name else None
    if stage is None or stage["status"] != "Pending" or stage["attempts"] != attempt:
        return None
    return stage  # type: ignore[no-any-return]


def _answered(d: _Decision, c: Answered) -> None:
    stage = open_stage(d.state, c.key, c.attempt)
    if stage is None:
        return
    value = c.value if isinstance(c.value, dict) else {"ok": True, "output": c.value}
    if value.get("append"):
        _append(d, value["append"])
    data = {"stage": stage["name"], "attempt": c.attempt, "output": value.get("output"),
            "fingerprint": value.get("fingerprint"), "context": value.get("context") or [], "at": d.at}
    if value.get("logs"):
        data["logs"] = value["logs"]
    if value.get("worker"):
        data["leasedBy"] = value["worker"]
    d.emit("stage.waiting_for_approval" if value.get("waiting") else "stage.completed", data)


def _failed(d: _Decision, key: str, attempt: int, code: str | None, message: str | None, retryable: bool,
            details: dict[str, Any]) -> None:
    stage = open_stage(d.state, key, attempt)
    if stage is None:
        return
    if details.get("append"):
        _append(d, details["append"])
    name = stage["name"]
    data = {"stage": name, "attempt": attempt, "errorCode": code, "errorMessage": message, "retryable": retryable,
            "fingerprint": details.get("fingerprint"), "context": details.get("context") or [], "at": d.at}
    if details.get("logs"):
        data["logs"] = details["logs"]
    if details.get("worker"):
        data["leasedBy"] = details["worker"]
    d.emit("stage.failed", data)
    # the jitter's seed: the pipeline, the stage, its run and its retry (the same on any fold)
    seconds = _retry.decide(stage["spec"]["plan"], code, retryable, stage["retries"],
                            f"{d.state['spec']['pipelineId']}:{stage['id']}:{stage['run']}:{stage['retries']}")
    if seconds is not None:
        d.emit("stage.retry_scheduled", {"stage": name, "attempt": attempt, "retry": stage["retries"] + 1,
                                         "afterSeconds": seconds, "at": d.at})
        d.effects.append(Timer(f"retry:{stage['id']}:{attempt}", after=timedelta(seconds=seconds)))


def _adopted(d: _Decision) -> None:
    """The stages whose attempts the workflow of the previous release had open (their tasks are
    withdrawn by the adoption) run again; a retry it had scheduled is due now. A pipeline it had
    failed, its execution not ended yet, ends failed."""
    for name in d.state["order"]:
        stage = d.stage(name)
        if stage["status"] == "Pending":
            _dispatch(d, stage)
        elif stage["status"] == "RetryScheduled" and d.state["paused"]:
            d.emit("stage.retry_due", {"stage": name, "at": d.at})
        elif stage["status"] == "RetryScheduled":
            _dispatch(d, stage)
    if d.state["outcome"] == "Failed":
        failed = next((d.stage(n) for n in d.state["order"] if d.stage(n)["status"] == "Failed"), None)
        if failed is not None:
            d.effects = [_fail(failed)]


def _expired(d: _Decision, c: Expired) -> None:
    stage = open_stage(d.state, c.key, c.attempt)
    if stage is None:
        return
    if stage["expiries"] + 1 < EXPIRIES:
        d.emit("stage.lease_expired", {"stage": stage["name"], "attempt": c.attempt, "at": d.at,
                                       **({"leasedBy": c.owner} if c.owner else {})})
        _dispatch(d, stage)
        return
    _failed(d, c.key, c.attempt, "LEASE_EXPIRED", f"the lease of attempt {c.attempt} expired {EXPIRIES} times",
            True, {"worker": c.owner} if c.owner else {})


def _timer(d: _Decision, key: str) -> None:
    kind, _, rest = key.partition(":")
    sid, _, attempt_text = rest.partition(":")
    name = d.state["ids"].get(sid)
    if name is None or not attempt_text.isdigit():
        return
    stage = d.stage(name)
    attempt = int(attempt_text)
    if kind == "retry" and stage["status"] == "RetryScheduled" and stage["attempts"] == attempt:
        if not d.state["paused"]:
            _dispatch(d, stage)
        else:
            d.emit("stage.retry_due", {"stage": name, "at": d.at})
    elif kind == "timeout" and open_stage(d.state, sid, attempt) is not None:
        d.effects.append(Withdraw(sid, attempt))
        _failed(d, sid, attempt, "TIMEOUT", "the attempt ran past the stage's timeOut", True, {})


def _dispatch(d: _Decision, stage: dict[str, Any]) -> None:
    s = d.state
    spec = stage["spec"]
    attempt = stage["attempts"] + 1
    d.emit("stage.dispatched", {"stage": stage["name"], "attempt": attempt, "at": d.at})
    stage = d.stage(stage["name"])
    deps = spec["dependsOn"]
    timeout = (spec.get("options") or {}).get("timeOut")
    application = s["spec"].get("application")
    seed = {"pipelineId": s["spec"]["pipelineId"], "pipelineName": s["spec"].get("name"), "stageId": stage["id"],
            "stageName": stage["name"],
            "stageHandlerName": spec["stageHandlerName"], "input": spec.get("input"),
            "prevStageOutput": s["stages"][deps[-1]]["output"] if deps else None,
            "pipelineKeywords": s["spec"].get("keywords") or [], "contextItems": list(s["context"].values()),
            "timeoutSeconds": timeout or None, "base": 0, "application": application,
            "traceId": s["spec"].get("traceId")}
    d.effects.append(Delegate(str(stage["id"]), queue_of(application, spec["stageHandlerName"]), seed, attempt,
                              workers=True, label=f"stage {stage['name']!r} (attempt {attempt})",
                              served_by=f"handler {spec['stageHandlerName']!r}"))
    if timeout:
        d.effects.append(Timer(f"timeout:{stage['id']}:{attempt}", after=timedelta(seconds=timeout)))


def _append(d: _Decision, stages: list[Any]) -> None:
    """Stages the service validated and numbered. One whose name or dependency no longer fits (a
    concurrent append took the name) is left out, and said."""
    have = d.state["stages"]
    names = {s.get("stageName") for s in stages if isinstance(s, dict)}
    kept, refused = [], []
    for spec in stages:
        if not isinstance(spec, dict) or spec.get("stageName") in have or \
                any(x not in have and x not in names for x in spec.get("dependsOn", [])):
            refused.append(spec.get("stageName") if isinstance(spec, dict) else None)
            continue
        kept.append(spec)
    d.emit("stages.appended", {"stages": kept, "refused": refused, "at": d.at})


def _control(d: _Decision, message: dict[str, Any]) -> None:
    """An operator's action or an application's decision (validated by whoever sent it; one that
    no longer applies changes nothing)."""
    s = d.state
    op = message.get("op")
    stage = s["stages"].get(message.get("stage") or "")
    if op == "pause" and not s["paused"]:
        d.emit("pipeline.paused", {"at": d.at})
    elif op == "resume" and s["paused"]:
        d.emit("pipeline.resumed", {"at": d.at})
    elif op == "append":
        _append(d, message.get("stages") or [])
    elif stage is None:
        return
    elif op == "decide" and stage["status"] == "WaitingForApproval" and message.get("run", stage["run"]) == stage["run"]:
        data = {"stage": stage["name"], "rejectionReason": message.get("rejectionReason"), "at": d.at}
        if message.get("reason"):  # an approval's reason
            data["reason"] = message["reason"]
        d.emit("stage.approved" if message.get("approved") else "stage.rejected", data)
    elif op == "skip" and stage["status"] not in DONE:
        d.emit("stage.skipped", {"stage": stage["name"], "at": d.at})
    elif op == "rerun":
        names = [stage["name"], *(dependents(s, stage["name"]) if message.get("next") else [])]
        d.emit("stage.rerun", {"stages": names, "at": d.at})


def dependents(s: dict[str, Any], name: str) -> list[str]:
    """Every stage that depends on ``name``, transitively, in declaration order."""
    found: set[str] = set()
    for n in s["order"]:  # a stage depends only on stages declared before it
        if any(x == name or x in found for x in s["stages"][n]["spec"]["dependsOn"]):
            found.add(n)
    return [n for n in s["order"] if n in found]


def _advance(d: _Decision) -> None:
    """Dispatch what became eligible; end the pipeline when nothing is open."""
    s = d.state
    if s["outcome"] is not None:
        return
    if not s["paused"]:
        for name in s["order"]:
            st = s["stages"][name]
            if st["status"] == "NotStarted" and all(s["stages"][x]["status"] in DONE for x in st["spec"]["dependsOn"]):
                _dispatch(d, st)
                s = d.state
    s = d.state
    stages = [s["stages"][n] for n in s["order"]]
    if any(st["status"] in BUSY for st in stages):
        return
    if all(st["status"] in DONE for st in stages):
        d.emit("pipeline.completed", {"at": d.at})
        d.effects = [Complete({"outputs": {n: s["stages"][n]["output"] for n in s["order"]}})]
        return
    failed = [st for st in stages if st["status"] == "Failed"]
    if failed:
        f = failed[0]
        d.emit("pipeline.failed", {"stage": f["name"], "stageId": f["id"], "attempts": f["attempts"],
                                   "errorCode": f["errorCode"], "errorMessage": f["errorMessage"], "at": d.at})
        # the execution ends failed; a rerun reopens it (engine.retry with its signal)
        d.effects = [_fail(f)]


def _fail(f: dict[str, Any]) -> Fail:
    code = f["errorCode"] or "FAILED"
    return Fail(f"stage {f['name']!r} failed after {f['attempts']} attempt(s): {code}: {f['errorMessage'] or code}",
                "StageFailed")


def install(registry: Registry) -> None:
    """Register the decider ``flowli.pipeline`` version 2 in ``registry`` (once). The pipelines
    of the previous release (its workflow, version 1) become this decider's (see ``_upgrade``)."""
    if WORKFLOW not in registry.decider_names():
        registry.decider(WORKFLOW, version=VERSION, initial=INITIAL, evolve=evolve, index=index,
                         shares=True)(decide)
