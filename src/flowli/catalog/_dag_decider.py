"""``flowli.dag`` as a decider (version 2): a compiled composition run layer by layer, never
replayed. Its steps are child executions (the effect ``Child``, the command ``ChildEnded``); a
step that fails on a fixable precondition parks the run on a remediation gate until a message
on the ``resolution`` channel answers it (the command ``Signal``); a denial compensates the
completed steps in reverse, one child at a time; ``engine.retry`` of a failed run (the command
``Retried``) runs the failed steps of its layer again, as fresh children.

The state (JSON), which the catalog reads for a run's views:

    {"type", "compiled", "inputs",          # what the run was started with
     "layer": i,                            # the layer running (its index)
     "phase": "running" | "parked" | "compensating" | "completed" | "failed",
     "status": {step: "PENDING" | "COMPLETED" | "FAILED" | "remediation_pending"},
     "attempts": {step: n}, "running": {child key: step},
     "steps": {step: output}, "done": [steps, in completion order],
     "errors": {step: {"code", "message", "fix"?}},
     "gate": {"step", "reason", "fix", "fid"} | None,   # the parked step (fid: its child key)
     "compensation": {"step", "reason", "queue", "compensated", "failures"} | None,
     "failure": {"code", "message", "step"?} | None}

Commands and what they decide (events in the run's words; effects):

- Start → ``dag.started``; the first layer's ``step.started`` each with a Child.
- ChildEnded of a step → ``step.completed`` or ``step.failed``; when the layer has no running
  step: a plain failure → ``dag.failed`` + Fail; a fixable one → ``step.parked`` (no effect:
  the run holds nothing); all completed → the next layer's starts, or ``dag.completed`` +
  Complete with the outputs of the last layer.
- Signal ``resolution`` {fid, resolution} for the gate → ``step.remediated`` and a fresh
  ``step.started`` (Child ``name#n``), or ``step.denied`` and the compensations.
- ChildEnded of a compensation → ``step.compensated`` or ``compensation.failed``; the next
  one, or ``dag.failed`` (REMEDIATION_DENIED) + Fail.
- Retried → ``dag.retried`` and a fresh ``step.started`` for each failed step of the layer.
- CancelRequested → ``dag.cancelled`` + Cancel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flowli.engine import Registry
from flowli.engine.deciders import (
    Cancel,
    CancelRequested,
    Child,
    ChildEnded,
    Complete,
    Effect,
    Event,
    Fail,
    Retried,
    Signal,
    Start,
)

from ._errors import InputsInvalid, RemediationDenied, StepInputInvalid, UnknownType
from ._types import lookup

VERSION = "2"
"""The decider's version of ``flowli.dag`` (version 1, the Python workflow, finishes the runs it started)."""
REMEDIATION = "REMEDIATION_REQUIRED"
RESOLUTION = "resolution"

INITIAL: dict[str, Any] = {"type": None, "compiled": None, "inputs": {}, "layer": 0, "phase": "running",
                           "status": {}, "attempts": {}, "running": {}, "steps": {}, "done": [],
                           "errors": {}, "gate": None, "compensation": None, "failure": None}


def step_key(step: str, attempt: int) -> str:
    """The child key of a step's run: its name, then ``name#2`` for a fresh attempt."""
    return step if attempt == 1 else f"{step}#{attempt}"


def upper(name: str) -> str:
    """``TimeoutError`` → ``TIMEOUT_ERROR``: an error type as a code."""
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i and not name[i - 1].isupper():
            out.append("_")
        out.append(ch.upper())
    return "".join(out)


def child_error(status: str, error: dict[str, Any] | None) -> dict[str, Any]:
    """A step's failure as the run shows it: ``{"code", "message", "fix"?}`` from its child's error."""
    e = error or {}
    if status == "cancelled":
        return {"code": "CANCELLED", "message": "the step's run was cancelled"}
    if e.get("type") == "StepFailed":
        code = e.get("code") or upper(e.get("cause") or "StepFailed")
        message = e.get("cause_message") or e.get("message", "")
    else:
        code = e.get("code") or upper(e.get("type") or "Failed")
        message = e.get("message", "")
    out: dict[str, Any] = {"code": code, "message": message or ""}
    if code == REMEDIATION:
        out["fix"] = (e.get("details") or {}).get("fix", {})
    return out


# ---- evolve --------------------------------------------------------------------------------------


def evolve(state: dict[str, Any], event: Event) -> dict[str, Any]:
    """The state after ``event``: a new dict, the parts that change copied (never in place)."""
    s = dict(state)
    d = event.data or {}
    kind = event.kind

    def put(part: str, key: str, value: Any) -> None:
        s[part] = {**s[part], key: value}

    def drop(part: str, key: Any) -> None:
        s[part] = {k: v for k, v in s[part].items() if k != key}

    if kind == "dag.started":
        s.update(type=d["type"], compiled=d["compiled"], inputs=d["inputs"],
                 status={st["name"]: "PENDING" for layer in d["compiled"].get("layers", []) for st in layer.get("steps", [])})
    elif kind == "layer.started":
        s["layer"] = d["layer"]
    elif kind == "step.started":
        put("attempts", d["step"], d["attempt"])
        put("running", d["key"], d["step"])
        put("status", d["step"], "PENDING")
        drop("errors", d["step"])
    elif kind == "step.completed":
        drop("running", d["key"])
        put("status", d["step"], "COMPLETED")
        put("steps", d["step"], d["output"])
        s["done"] = [*s["done"], d["step"]]
    elif kind == "step.failed":
        drop("running", d["key"])
        put("errors", d["step"], d["error"])
        put("status", d["step"], "remediation_pending" if d["error"]["code"] == REMEDIATION else "FAILED")
    elif kind == "step.parked":
        s.update(phase="parked", gate=d)
    elif kind == "step.remediated":
        s.update(phase="running", gate=None)
    elif kind == "step.denied":
        s.update(phase="compensating", gate=None,
                 compensation={"step": d["step"], "reason": d["reason"], "queue": list(d["queue"]), "compensated": [],
                               "failures": []})
    elif kind == "compensation.started":
        put("running", d["key"], d["step"])
    elif kind in ("step.compensated", "compensation.failed"):
        drop("running", d.get("key"))
        c = dict(s["compensation"])
        c["queue"] = [n for n in c["queue"] if n != d["step"]]
        if kind == "step.compensated":
            c["compensated"] = [*c["compensated"], d["step"]]
        else:
            c["failures"] = [*c["failures"], f"{d['step']} ({d['message']})"]
        s["compensation"] = c
    elif kind == "dag.failed":
        s.update(phase="failed", failure=d)
    elif kind == "dag.retried":
        s.update(phase="running", failure=None)
    elif kind == "dag.completed":
        s["phase"] = "completed"
    elif kind == "dag.cancelled":
        s.update(phase="failed", failure={"code": "CANCELLED", "message": d.get("message") or "cancelled"})
    return s


# ---- decide --------------------------------------------------------------------------------------


class _Deciding:
    """One command's decision: events folded as they are decided, effects gathered."""

    def __init__(self, registry: Registry, state: dict[str, Any]):
        self.registry = registry
        self.s = state
        self.events: list[Event] = []
        self.effects: list[Effect] = []

    def emit(self, kind: str, data: Any) -> None:
        event = Event(kind, data)
        self.events.append(event)
        self.s = evolve(self.s, event)

    def layer_steps(self) -> list[dict[str, Any]]:
        layers = self.s["compiled"]["layers"]
        return list(layers[self.s["layer"]]["steps"]) if self.s["layer"] < len(layers) else []

    def fail(self, code: str, message: str, step: str | None = None) -> None:
        self.emit("dag.failed", {"code": code, "message": message, **({"step": step} if step else {})})
        self.effects.append(Fail(message, type=upper_type(code)))

    # -- steps

    def start_steps(self, steps: list[dict[str, Any]]) -> None:
        """Fresh attempts of ``steps`` (their inputs mapped first: a mapping that cannot be made
        fails the run before any of them starts)."""
        made = []
        for step in steps:
            try:
                kwargs = kwargs_of(step, self.s["inputs"], self.s["steps"])
                made.append((step, kwargs, arguments(self.registry, step, kwargs)))
            except StepInputInvalid as exc:
                self.fail(exc.code, str(exc), step["name"])
                return
        for step, kwargs, args in made:
            n = self.s["attempts"].get(step["name"], 0) + 1
            key = step_key(step["name"], n)
            self.emit("step.started", {"step": step["name"], "key": key, "attempt": n, "kwargs": kwargs})
            self.effects.append(Child(key, step["workflow_type"], tuple(args)))

    def advance(self) -> None:
        """Go on when nothing runs: fail on a plain failure, park on a gate, or start the next layer."""
        while self.s["phase"] == "running" and not self.s["running"]:
            steps = self.layer_steps()
            status, errors = self.s["status"], self.s["errors"]
            failed = [st["name"] for st in steps if status[st["name"]] == "FAILED"]
            if failed:
                error = errors[failed[0]]
                self.fail(error["code"], error["message"], failed[0])
                return
            gated = [st["name"] for st in steps if status[st["name"]] == "remediation_pending"]
            if gated:
                name = gated[0]
                error = errors[name]
                self.emit("step.parked", {"step": name, "reason": error["message"], "fix": error.get("fix", {}),
                                          "fid": step_key(name, self.s["attempts"][name])})
                return
            layers = self.s["compiled"]["layers"]
            if self.s["layer"] + 1 >= len(layers):
                output = {st["name"]: self.s["steps"].get(st["name"]) for st in steps}
                self.emit("dag.completed", {"output": output})
                self.effects.append(Complete(output))
                return
            self.emit("layer.started", {"layer": self.s["layer"] + 1, "name": layers[self.s["layer"] + 1]["name"]})
            self.start_steps(self.layer_steps())

    # -- compensation

    def compensate_next(self) -> None:
        """The next compensation of the queue (reverse completion order), or the run's failure."""
        c = self.s["compensation"]
        while c["queue"]:
            name = c["queue"][0]
            step = _step(self.s["compiled"], name)
            undo = str(self.registry.get(step["workflow_type"]).meta.compensate)  # the queue holds those with one
            try:
                ctype = lookup(self.registry, undo)
                output = self.s["steps"].get(name)
                # the step's inputs, mapped again: from the run's inputs and outputs, which stay
                kwargs = kwargs_of(step, self.s["inputs"], self.s["steps"])
                given = {**(output if isinstance(output, dict) else {}), **kwargs}
                args = ctype.arguments({k: v for k, v in given.items() if k in ctype.model.model_fields})
            except (UnknownType, InputsInvalid, StepInputInvalid) as exc:
                self.emit("compensation.failed", {"step": name, "message": str(exc)})
                c = self.s["compensation"]
                continue
            key = f"{name}~compensate"
            self.emit("compensation.started", {"step": name, "key": key, "workflow_type": undo})
            self.effects.append(Child(key, undo, tuple(args)))
            return
        denied = RemediationDenied(c["step"], c["reason"], c["compensated"], c["failures"])
        self.fail(denied.code, str(denied), c["step"])

    # -- commands

    def started(self, given: Any) -> None:
        workflow_type, compiled, inputs = given
        self.emit("dag.started", {"type": workflow_type, "compiled": compiled, "inputs": inputs})
        self.emit("layer.started", {"layer": 0, "name": compiled["layers"][0]["name"]})
        self.start_steps(self.layer_steps())
        self.advance()

    def child_ended(self, cmd: ChildEnded) -> None:
        name = self.s["running"].get(cmd.key)
        if name is None:
            return  # not a child this run waits for (an end it took already)
        if self.s["phase"] == "compensating":
            if cmd.status == "completed":
                self.emit("step.compensated", {"step": name, "key": cmd.key, "output": cmd.result})
            else:
                self.emit("compensation.failed", {"step": name, "key": cmd.key,
                                                  "message": child_error(cmd.status, cmd.error)["message"]})
            self.compensate_next()
            return
        if cmd.status == "completed":
            self.emit("step.completed", {"step": name, "key": cmd.key, "output": cmd.result})
        else:
            self.emit("step.failed", {"step": name, "key": cmd.key, "error": child_error(cmd.status, cmd.error)})
        self.advance()

    def resolved(self, payload: Any, by: str | None) -> None:
        gate = self.s["gate"]
        if self.s["phase"] != "parked" or gate is None or not isinstance(payload, dict):
            return
        resolution = payload.get("resolution")
        if payload.get("fid") != gate["fid"] or resolution not in ("remediated", "denied"):
            return
        if resolution == "remediated":
            self.emit("step.remediated", {"step": gate["step"], "fid": gate["fid"], "by": by})
            self.start_steps([_step(self.s["compiled"], gate["step"])])
            self.advance()
            return
        queue = [n for n in reversed(self.s["done"])
                 if self.registry.get(_step(self.s["compiled"], n)["workflow_type"]).meta.compensate is not None]
        self.emit("step.denied", {"step": gate["step"], "reason": gate["reason"], "queue": queue, "by": by})
        self.compensate_next()

    def retried(self) -> None:
        failure = self.s["failure"] or {}
        self.emit("dag.retried", {"from": failure})
        if failure.get("code") == "REMEDIATION_DENIED":
            self.fail(failure["code"], failure.get("message", ""), failure.get("step"))  # compensated: no way back
            return
        self.start_steps([st for st in self.layer_steps() if self.s["status"][st["name"]] == "FAILED"
                          or st["name"] not in self.s["attempts"]])
        self.advance()


def upper_type(code: str) -> str:
    """The error type of the run's end: ``OUTPUT_INVALID`` → ``OutputInvalid``."""
    return "".join(part.capitalize() for part in code.split("_")) or "DagFailed"


def decider(registry: Registry) -> Callable[[dict[str, Any], Any], tuple[list[Event], list[Effect]]]:
    """The decide function of ``flowli.dag`` version 2, with ``registry`` to map its steps' inputs."""

    def decide(state: dict[str, Any], command: Any) -> tuple[list[Event], list[Effect]]:
        run = _Deciding(registry, state)
        if isinstance(command, Start):
            run.started(command.input)
        elif isinstance(command, ChildEnded):
            run.child_ended(command)
        elif isinstance(command, Signal) and command.channel == RESOLUTION:
            run.resolved(command.payload, command.by)
        elif isinstance(command, Retried):
            run.retried()
        elif isinstance(command, CancelRequested):
            message = f"cancelled by {command.by}" if command.by else "cancelled"
            run.emit("dag.cancelled", {"by": command.by, "reason": command.reason, "message": message})
            run.effects.append(Cancel(command.reason))
        return run.events, run.effects

    return decide


def _step(compiled: dict[str, Any], name: str) -> dict[str, Any]:
    return next(st for layer in compiled["layers"] for st in layer["steps"] if st["name"] == name)


def kwargs_of(step: dict[str, Any], inputs: dict[str, Any], outputs: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for param, value in step.get("input", {}).items():
        if isinstance(value, dict) and set(value) == {"$input"}:
            if value["$input"] in inputs:
                out[param] = inputs[value["$input"]]
        else:
            out[param] = value
    for param, ref in step.get("state_data", {}).items():
        produced = outputs.get(ref["step"])
        if not isinstance(produced, dict) or ref["field"] not in produced:
            raise StepInputInvalid(step["name"], f"input '{param}' maps field '{ref['field']}' of step '{ref['step']}',"
                                                 " which its output does not hold")
        out[param] = produced[ref["field"]]
    return out


def arguments(registry: Registry, step: dict[str, Any], kwargs: dict[str, Any]) -> list[Any]:
    try:
        return lookup(registry, step["workflow_type"]).arguments(kwargs)
    except (UnknownType, InputsInvalid) as exc:
        raise StepInputInvalid(step["name"], str(exc)) from None
