"""A run as the catalog shows it: the three-state view (``PENDING``, ``COMPLETED``, ``FAILED``,
and ``remediation_pending`` for a dag parked on a fixable step) and the history of its
transitions, both read from the record and the journal (live or archived), never reconstructed.
A dag run of the decider (``flowli.dag`` version 2) is read from its stored state (``state``:
its steps, gate and failure) and its events; a run of the version 1 workflow from its frames."""

from __future__ import annotations

import inspect
from typing import Any

from flowli.domain import Entry, EntryKind, ExecutionRecord, Status, Tone, redact, sensitive_keys
from flowli.engine import error_summary
from flowli.engine.deciders import Event

from ._dag import DAG, REMEDIATION, RESOLUTION, VERSION, dag_args, step_of_key
from ._dag_decider import INITIAL, evolve, upper

PENDING, COMPLETED, FAILED, PARKED = "PENDING", "COMPLETED", "FAILED", "remediation_pending"
STATES = (PENDING, COMPLETED, FAILED, PARKED)
RUN_TONES: dict[str, Tone] = {PENDING: Tone.BUSY, COMPLETED: Tone.OK, FAILED: Tone.BAD, PARKED: Tone.WAITING}
"""The tone of each status of a run (and of a step of a dag) in the catalog's words."""


_WORDS = {"running": PENDING, "pending": PENDING, "completed": COMPLETED, "failed": FAILED, PARKED: PARKED}
"""A step's status in the run's own words."""


def decided(record: ExecutionRecord) -> bool:
    """Whether a run is a dag run of the decider (its views read its stored state)."""
    return record.workflow == DAG and record.version == VERSION


def workflow_type(record: ExecutionRecord) -> str:
    """The catalog type of a run: a dag run's is the virtual type it was started as."""
    if record.workflow == DAG and record.args:
        return str(dag_args(record.args)[0])
    return record.workflow


def inputs_of(record: ExecutionRecord, fn: Any | None) -> Any:
    """The inputs of a run by name (a dag's are its composition inputs)."""
    if record.workflow == DAG and len(dag_args(record.args)) >= 3:
        return dag_args(record.args)[2]
    if fn is None:
        return record.args
    names = [p.name for p in list(inspect.signature(fn).parameters.values())[1:]]
    return dict(zip(names, record.args))


def _key_of(fid: str | None) -> str | None:
    if not fid or "/" not in fid:
        return None
    tail = fid.split("/", 1)[1]
    return tail.rpartition(":")[2] if ":" in tail else None


def step_name(record: ExecutionRecord, e: Entry) -> str | None:
    """The step an entry is of: a dag's child frames are its steps (by their key); another run's
    step frames are its steps (by their name)."""
    if e.fid is None or e.fid == "root" or not e.kind.value.startswith("frame."):
        return None
    code = e.provenance.code
    if record.workflow == DAG:
        if code.frame_kind != "child":
            return None
        key = _key_of(e.fid)
        return step_of_key(key) if key else None
    return code.frame_name or e.fid.rsplit("/", 1)[-1]


def resolutions_read(journal: list[Entry]) -> int:
    """How many resolutions a dag has read (its receive frames that completed)."""
    return sum(1 for e in journal if e.kind is EntryKind.FRAME_COMPLETED and e.provenance.code.frame_kind == "receive")


def _parked(record: ExecutionRecord, journal: list[Entry], answered: bool = False) -> dict[str, Any] | None:
    """The remediation envelope of a dag parked on a fixable step, else None (also when a
    resolution is on its way to it: ``answered``)."""
    if record.workflow != DAG or record.terminal or answered:
        return None
    suspended = next((e for e in reversed(journal) if e.kind in (EntryKind.EXECUTION_SUSPENDED,
                                                                 EntryKind.EXECUTION_RESUMED)), None)
    if suspended is None or suspended.kind is not EntryKind.EXECUTION_SUSPENDED:
        return None
    waits = (suspended.value or {}).get("waits", []) if isinstance(suspended.value, dict) else []
    if not any(str(w.get("channel", "")).endswith(f".{RESOLUTION}") for w in waits):
        return None
    return remediation(record, journal)


def remediation(record: ExecutionRecord, journal: list[Entry], state: Any = None) -> dict[str, Any] | None:
    """The last fixable failure of a dag step: ``{"step", "reason", "fix", "fid"}`` (a decider's:
    the gate it is parked on)."""
    if isinstance(state, dict):
        gate = state.get("gate")
        return dict(gate) if gate is not None and state.get("phase") == "parked" else None
    for e in reversed(journal):
        if e.kind is EntryKind.FRAME_FAILED and (e.error or {}).get("code") == REMEDIATION:
            details = (e.error or {}).get("details") or {}
            error = e.error or {}
            reason = error.get("cause_message")  # the step's own message, when a step raised it
            if not reason:
                cause = error.get("message", "")
                reason = cause.split(": ", 1)[1] if cause.startswith("child execution ") and ": " in cause else cause
            return {"step": step_name(record, e), "reason": reason, "fix": details.get("fix", {}), "fid": e.fid}
    return None


def state_of(record: ExecutionRecord, journal: list[Entry], answered: bool = False, state: Any = None) -> str:
    if record.status is Status.COMPLETED:
        return COMPLETED
    if record.status in (Status.FAILED, Status.CANCELLED):
        return FAILED
    if decided(record):
        return PARKED if isinstance(state, dict) and state.get("phase") == "parked" else PENDING
    return PARKED if _parked(record, journal, answered) is not None else PENDING


def reason_of(record: ExecutionRecord, journal: list[Entry], state: Any = None) -> dict[str, Any]:
    """The structured reason of a FAILED run: ``{"code", "message", "step"?}``."""
    error = record.error or {}
    if record.status is Status.CANCELLED:
        by = (record.cancel_requested or {}).get("actor") or error.get("by")
        return {"code": "CANCELLED", "message": f"cancelled by {by}" if by else "cancelled"}
    failure = state.get("failure") if isinstance(state, dict) else None
    if isinstance(failure, dict) and record.status is Status.FAILED and error.get("type") != "Terminated":
        return {k: failure[k] for k in ("code", "message", "step") if k in failure}
    if error.get("type") == "StepFailed":
        code = error.get("code") or upper(error.get("cause") or "StepFailed")
        message = error.get("cause_message") or error.get("message", "")
    else:
        code = error.get("code") or upper(error.get("type") or "Failed")
        message = error.get("message", "")
    reason: dict[str, Any] = {"code": code, "message": message or ""}
    step = (error.get("details") or {}).get("step")
    if step is None and error.get("fid"):
        failed = next((e for e in reversed(journal) if e.fid == error["fid"] and e.kind is EntryKind.FRAME_FAILED), None)
        if failed is not None:
            step = step_name(record, failed)
    if step is not None:
        reason["step"] = step
    if error.get("problems"):
        reason["problems"] = error["problems"]
    return reason


def state_data(record: ExecutionRecord, journal: list[Entry], answered: bool = False,
               state: Any = None) -> dict[str, Any] | None:
    """A dag's data threaded between steps: ``{"steps": {name: output}}``, and ``remediation``
    while it is parked."""
    if record.workflow != DAG:
        return None
    if decided(record):
        s = state if isinstance(state, dict) else {}
        data: dict[str, Any] = {"steps": dict(s.get("steps") or {})}
        gate = remediation(record, journal, s)
        if gate is not None and not record.terminal:
            data["remediation"] = {k: gate[k] for k in ("step", "reason", "fix")}
        return data
    steps: dict[str, Any] = {}
    for e in journal:
        if e.kind is EntryKind.FRAME_COMPLETED and e.provenance.code.frame_kind == "child":
            key = _key_of(e.fid)
            if key and "~" not in key:
                steps[step_of_key(key)] = e.value
    data = {"steps": steps}
    parked = _parked(record, journal, answered)
    if parked is not None:
        data["remediation"] = {k: parked[k] for k in ("step", "reason", "fix")}
    return data


def steps_of(record: ExecutionRecord, journal: list[Entry], state: Any = None) -> list[dict[str, Any]] | None:
    """Each step of a dag and its state in the run's words (``PENDING``, ``COMPLETED``,
    ``FAILED``, ``remediation_pending``), in layer order."""
    args = dag_args(record.args) if record.workflow == DAG else []
    if len(args) < 2 or not isinstance(args[1], dict):
        return None
    layers = args[1].get("layers", [])
    if decided(record):
        now: dict[str, str] = dict(state.get("status") or {}) if isinstance(state, dict) else {}
        if record.terminal:  # a step that waited on a gate when the run ended failed with it
            now = {k: FAILED if v == PARKED else v for k, v in now.items()}
        return [{"name": s["name"], "layer": layer["name"], "status": now.get(s["name"], PENDING)}
                for layer in layers for s in layer.get("steps", [])]
    status: dict[str, str] = {}
    for e in journal:
        name = step_name(record, e)
        key = _key_of(e.fid)
        if name is None or key is None or "~" in key:
            continue
        if e.kind is EntryKind.FRAME_STARTED:
            status[name] = "running"
        elif e.kind is EntryKind.FRAME_COMPLETED:
            status[name] = "completed"
        elif e.kind is EntryKind.FRAME_FAILED and (e.value or {}).get("final"):
            code = (e.error or {}).get("code")
            status[name] = PARKED if code == REMEDIATION and not record.terminal else "failed"
    for e in journal:  # a retry reopens the failed step
        if e.kind is EntryKind.EXECUTION_RETRIED and not record.terminal:
            fid = (e.value or {}).get("fid")
            for f in journal:
                if f.fid == fid and (n := step_name(record, f)) is not None and status.get(n) == "failed":
                    status[n] = "running"
    return [{"name": s["name"], "layer": layer["name"], "status": _WORDS[status.get(s["name"], "pending")]}
            for layer in layers for s in layer.get("steps", [])]


def view(record: ExecutionRecord, journal: list[Entry], answered: bool = False, dstate: Any = None) -> dict[str, Any]:
    """``get_workflow_status``: the three-state view of a run (``dstate``: a decider's state)."""
    state = state_of(record, journal, answered, dstate)
    out: dict[str, Any] = {"workflow_id": record.eid, "workflow_type": workflow_type(record), "status": state}
    keys = run_sensitive_keys(record, journal) if dstate is None else sensitive_keys([record.args, dstate])
    if state == COMPLETED:
        out["output"] = redact(record.result, keys)
    if state == FAILED:
        out["reason"] = reason_of(record, journal, dstate)
    data = state_data(record, journal, answered, dstate)
    if data is not None:
        out["state_data"] = redact(data, keys)
    steps = steps_of(record, journal, dstate)
    if steps is not None:
        out["steps"] = steps
    out["created_at"] = record.created_at.isoformat()
    out["updated_at"] = record.updated_at.isoformat()
    if record.parent_eid is not None:
        out["parent_workflow_id"] = record.parent_eid
    return out


_STATE_AFTER = {
    EntryKind.EXECUTION_COMPLETED: COMPLETED, EntryKind.EXECUTION_FAILED: FAILED,
    EntryKind.EXECUTION_CANCELLED: FAILED, EntryKind.EXECUTION_RETRIED: PENDING,
}


def run_sensitive_keys(record: ExecutionRecord, journal: list[Entry]) -> set[str]:
    """The keys of the context items marked sensitive anywhere in a run (its arguments, its
    journal): its payloads show their values as ``"***"`` wherever they appear."""
    return sensitive_keys([record.args, *(e.value for e in journal)])


def history(record: ExecutionRecord, journal: list[Entry], include_state_data: bool, fn: Any | None) -> list[dict[str, Any]]:
    """``get_workflow_history``: every transition of the journal, oldest first, each with the
    three-state state after it; payloads only with ``include_state_data``, their sensitive values
    redacted (a pipeline's context items, whatever entry they are in)."""
    rows = _history(record, journal, include_state_data, fn)
    if not include_state_data:
        return rows
    keys = run_sensitive_keys(record, journal)
    return [redact(r, keys) for r in rows]


def _history(record: ExecutionRecord, journal: list[Entry], include_state_data: bool, fn: Any | None) -> list[dict[str, Any]]:
    if decided(record):
        return _decided_history(record, journal, include_state_data)
    out: list[dict[str, Any]] = []
    state = PENDING
    steps: dict[str, Any] = {}
    dag = record.workflow == DAG
    for n, e in enumerate(journal):
        state = _STATE_AFTER.get(e.kind, state)
        if e.kind is EntryKind.EXECUTION_SUSPENDED and dag:
            waits = (e.value or {}).get("waits", []) if isinstance(e.value, dict) else []
            parked = any(str(w.get("channel", "")).endswith(f".{RESOLUTION}") for w in waits)
            state = PARKED if parked else PENDING
        elif e.kind is EntryKind.EXECUTION_RESUMED:
            state = PENDING
        row: dict[str, Any] = {"seq": e.seq, "at": e.at.isoformat(), "event": e.kind.value, "state": state}
        step = step_name(record, e)
        if step is not None:
            row["step"] = step
        row["actor"] = str(e.provenance.actor)
        if include_state_data:
            if e.kind is EntryKind.EXECUTION_STARTED:
                row["input"] = inputs_of(record, fn)
            elif e.kind is EntryKind.FRAME_STARTED and isinstance(e.value, dict) and "args" in e.value:
                row["input"] = e.value["args"]
            if e.kind in (EntryKind.FRAME_COMPLETED, EntryKind.EXECUTION_COMPLETED):
                row["output"] = e.value
            if e.error is not None:
                row["error"] = error_summary(e.error)
            if dag:
                if e.kind is EntryKind.FRAME_COMPLETED and step is not None and "~" not in (_key_of(e.fid) or ""):
                    steps[step] = e.value
                if step is not None or e.kind in (EntryKind.EXECUTION_SUSPENDED, EntryKind.EXECUTION_COMPLETED):
                    data: dict[str, Any] = {"steps": dict(steps)}
                    if state == PARKED:
                        gate = remediation(record, journal[: n + 1])
                        if gate is not None:
                            data["remediation"] = {k: gate[k] for k in ("step", "reason", "fix")}
                    row["state_data"] = data
        out.append(row)
    return out


def _decided_history(record: ExecutionRecord, journal: list[Entry], include_state_data: bool) -> list[dict[str, Any]]:
    """The history of a dag run of the decider: its entries, each event by its own name (``step.
    completed``, ``step.parked``, ...), the state after it folded from the events before it."""
    out: list[dict[str, Any]] = []
    state = PENDING
    folded: dict[str, Any] = {}
    for e in journal:
        state = _STATE_AFTER.get(e.kind, state)
        event: str | None = None
        data: dict[str, Any] = {}
        if e.kind is EntryKind.EVENT and isinstance(e.value, dict):
            event = str(e.value.get("event"))
            given = e.value.get("data")
            data = given if isinstance(given, dict) else {}
            folded = evolve(folded or INITIAL, Event(event, data))
            if event == "step.parked":
                state = PARKED
            elif event in ("step.remediated", "step.denied", "dag.retried"):
                state = PENDING
        row: dict[str, Any] = {"seq": e.seq, "at": e.at.isoformat(), "event": event or e.kind.value, "state": state}
        step = data.get("step")
        if step is not None:
            row["step"] = step
        row["actor"] = str(e.provenance.actor)
        if include_state_data:
            if e.kind is EntryKind.EXECUTION_STARTED:
                row["input"] = inputs_of(record, None)
            elif event == "step.started":
                row["input"] = data.get("kwargs")
            if event in ("step.completed", "step.compensated"):
                row["output"] = data.get("output")
            elif e.kind is EntryKind.EXECUTION_COMPLETED:
                row["output"] = e.value
            if event == "step.failed":
                row["error"] = data.get("error")
            elif e.error is not None:
                row["error"] = error_summary(e.error)
            if step is not None or e.kind in (EntryKind.EXECUTION_SUSPENDED, EntryKind.EXECUTION_COMPLETED):
                shown: dict[str, Any] = {"steps": dict(folded.get("steps") or {})}
                if state == PARKED and folded.get("gate"):
                    shown["remediation"] = {k: folded["gate"][k] for k in ("step", "reason", "fix")}
                row["state_data"] = shown
        out.append(row)
    return out


