"""A pipeline's declaration: its stages, their options, keywords and context items, validated
as the contract says, each error one sentence naming the stage and the field."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from flowli.domain import FlowliError, Refusal

BACKOFFS = ("fixed", "linear", "exponential")
_NUMBERS = ("maxRetries", "retryInterval", "maxRetryInterval", "timeOut")
_BOOLEANS = ("jitter", "failIfOutputEmpty", "notifyOnFailure")
_STORED = ("runInParallelWith", "runAsUser")  # accepted and stored, no effect (as in the reference)
_STAGE_FIELDS = ("stageName", "stageHandlerName", "input", "description", "isEvent", "options")
_OPTION_FIELDS = ("dependsOn", "retryOnErrorCodes", "backoff", *_NUMBERS, *_BOOLEANS, *_STORED)

MAX_STAGES = 1000
"""The most stages a pipeline has (those declared at create and appended after, together)."""
MAX_NAME = 200
"""The longest name (characters): a pipeline's, a stage's, a handler's, an idempotency key."""
MAX_RETRIES = 100
"""The most retries a stage's options (or a retry policy) may ask for."""
MAX_SECONDS = 604_800
"""The longest ``retryInterval``, ``maxRetryInterval`` and ``timeOut`` (one week, in seconds),
and the longest delay before a retry whatever its backoff grows to."""
RANGES = {"maxRetries": (MAX_RETRIES, ""), "retryInterval": (MAX_SECONDS, " seconds"),
          "maxRetryInterval": (MAX_SECONDS, " seconds"), "timeOut": (MAX_SECONDS, " seconds")}
"""Each number of a stage's options: its largest value (the smallest is 0) and its unit."""


class PipelineInputError(FlowliError):
    """A create, append or action body that is not valid: the message names where."""

    refusal = Refusal.INVALID


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _where(index: int, stage: Any) -> str:
    name = stage.get("stageName") if isinstance(stage, dict) else None
    return f"stage {name!r}" if isinstance(name, str) and name else f"stages[{index}]"


def stage_options(options: Any, where: str) -> dict[str, Any]:
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise PipelineInputError(f"{where}: options must be an object")
    out: dict[str, Any] = {}
    for field, value in options.items():
        if field not in _OPTION_FIELDS:
            raise PipelineInputError(f"{where}: options.{field} is not a stage option")
        if value is None:
            continue
        if field in _NUMBERS:
            if not _is_number(value):
                raise PipelineInputError(f"{where}: options.{field} must be a number, got {json.dumps(value)}")
            if value < 0:
                raise PipelineInputError(f"{where}: options.{field} must not be negative, got {value}")
            top, unit = RANGES[field]
            if not math.isfinite(value) or value > top:
                raise PipelineInputError(f"{where}: options.{field} must be from 0 to {top}{unit}, got {value}")
        elif field in _BOOLEANS and not isinstance(value, bool):
            raise PipelineInputError(f"{where}: options.{field} must be true or false, got {json.dumps(value)}")
        elif field in ("dependsOn", "retryOnErrorCodes", "runInParallelWith"):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise PipelineInputError(f"{where}: options.{field} must be a list of strings")
        elif field == "backoff" and value not in BACKOFFS:
            raise PipelineInputError(f"{where}: options.backoff must be fixed, linear or exponential, got {json.dumps(value)}")
        elif field == "runAsUser" and not isinstance(value, str):
            raise PipelineInputError(f"{where}: options.runAsUser must be a string")
        out[field] = value
    return out


def short(text: str, field: str) -> str:
    """``text``, refused when longer than MAX_NAME characters (``field`` names it)."""
    if len(text) > MAX_NAME:
        raise PipelineInputError(f"{field} is longer than {MAX_NAME} characters")
    return text


def stage_spec(index: int, stage: Any) -> dict[str, Any]:
    where = _where(index, stage)
    if not isinstance(stage, dict):
        raise PipelineInputError(f"stages[{index}] must be an object")
    for field in stage:
        if field not in _STAGE_FIELDS:
            raise PipelineInputError(f"{where}: {field} is not a stage field")
    name = stage.get("stageName")
    if not isinstance(name, str) or not name.strip():
        raise PipelineInputError(f"stages[{index}]: stageName is required (a nonempty string)")
    if any(ch in name for ch in ",\t\r\n"):
        raise PipelineInputError(f"{where}: stageName must not contain commas, tabs or line breaks")
    short(name, f"{where}: stageName")
    handler = stage.get("stageHandlerName")
    if not isinstance(handler, str) or not handler.strip():
        raise PipelineInputError(f"{where}: stageHandlerName is required (a nonempty string)")
    short(handler, f"{where}: stageHandlerName")
    value = stage.get("input")
    if value is not None and not isinstance(value, str):
        raise PipelineInputError(f"{where}: input must be a string (serialize JSON input), got {type(value).__name__}")
    description = stage.get("description")
    if description is not None and not isinstance(description, str):
        raise PipelineInputError(f"{where}: description must be a string")
    is_event = stage.get("isEvent", False)
    if not isinstance(is_event, bool):
        raise PipelineInputError(f"{where}: isEvent must be true or false, got {json.dumps(is_event)}")
    return {"stageName": name, "stageHandlerName": handler, "input": value, "description": description,
            "isEvent": is_event, "options": stage_options(stage.get("options"), where)}


def stage_list(stages: Any, existing: list[dict[str, Any]] = ()) -> list[dict[str, Any]]:  # type: ignore[assignment]
    """Validated stages, each with ``dependsOn`` resolved: its own list, else the stage declared
    before it (among ``existing`` ones too: an append continues the declaration order)."""
    if not isinstance(stages, list) or not stages:
        raise PipelineInputError("stages: at least one stage is required")
    if len(existing) + len(stages) > MAX_STAGES:
        raise PipelineInputError(f"stages: a pipeline has at most {MAX_STAGES} stages, got {len(existing) + len(stages)}")
    specs = [stage_spec(i, s) for i, s in enumerate(stages)]
    names = [s["stageName"] for s in existing]
    for spec in specs:
        if spec["stageName"] in names:
            raise PipelineInputError(f"stage {spec['stageName']!r}: stageName is used twice in the pipeline")
        names.append(spec["stageName"])
    known = set(names)
    previous = existing[-1]["stageName"] if existing else None
    for spec in specs:
        declared = spec["options"].get("dependsOn")
        if declared:
            for dep in declared:
                if dep not in known:
                    raise PipelineInputError(f"stage {spec['stageName']!r}: options.dependsOn names {dep!r},"
                                             " which is not a stage of the pipeline")
                if dep == spec["stageName"]:
                    raise PipelineInputError(f"stage {spec['stageName']!r}: options.dependsOn names the stage itself")
            spec["dependsOn"] = list(dict.fromkeys(declared))
        else:
            spec["dependsOn"] = [previous] if previous is not None else []
        previous = spec["stageName"]
    _no_cycle([*existing, *specs])
    return specs


def _no_cycle(stages: list[dict[str, Any]]) -> None:
    """Refuse a cycle of ``dependsOn``, naming it from the first stage (in declaration order) it
    is found from. A walk with a stack of its own, never a recursion: a chain of dependencies is as
    long as a pipeline."""
    deps = {s["stageName"]: s["dependsOn"] for s in stages}
    done: set[str] = set()
    for root in deps:
        if root in done:
            continue
        path: list[str] = [root]  # the stages being walked, each waiting for the next
        on_path = {root}
        todo = [iter(deps.get(root, ()))]
        while todo:
            dep = next(todo[-1], None)
            if dep is None:
                todo.pop()
                finished = path.pop()
                on_path.discard(finished)
                done.add(finished)
                continue
            if dep in done:
                continue
            if dep in on_path:
                cycle = path[path.index(dep):] + [dep]
                raise PipelineInputError(f"stage {dep!r}: options.dependsOn makes a cycle: {' -> '.join(cycle)}")
            path.append(dep)
            on_path.add(dep)
            todo.append(iter(deps.get(dep, ())))


def labels(items: Any, field: str) -> list[dict[str, Any]]:
    if items is None:
        return []
    if not isinstance(items, list):
        raise PipelineInputError(f"{field} must be a list of {{key, value}} objects")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("key"), str) or not item["key"]:
            raise PipelineInputError(f"{field}[{i}]: key is required (a nonempty string)")
        value = item.get("value")
        if value is not None and not isinstance(value, str):
            raise PipelineInputError(f"{field}[{i}] ({item['key']}): value must be a string, got {type(value).__name__}")
        entry: dict[str, Any] = {"key": item["key"], "value": value}
        if field != "pipelineKeywords":
            sensitive = item.get("isSensitive", False)
            if not isinstance(sensitive, bool):
                raise PipelineInputError(f"{field}[{i}] ({item['key']}): isSensitive must be true or false")
            value_type = item.get("valueType", "string")
            if value_type is not None and not isinstance(value_type, str):
                raise PipelineInputError(f"{field}[{i}] ({item['key']}): valueType must be a string")
            deleted = item.get("isDeleted", False)
            if not isinstance(deleted, bool):
                raise PipelineInputError(f"{field}[{i}] ({item['key']}): isDeleted must be true or false")
            entry.update(valueType=value_type or "string", isSensitive=sensitive)
            if deleted:
                entry["isDeleted"] = True
        out.append(entry)
    return out


def declaration(body: dict[str, Any]) -> dict[str, Any]:
    """A create body, validated: name, stages (resolved), keywords, context items."""
    name = body.get("name")
    if not isinstance(name, str) or not name.strip():
        raise PipelineInputError("name is required (a nonempty string)")
    short(name, "name")
    trace = body.get("traceId")
    if trace is not None and not isinstance(trace, str):
        raise PipelineInputError("traceId must be a string")
    return {"name": name, "traceId": trace, "stages": stage_list(body.get("stages")),
            "keywords": labels(body.get("pipelineKeywords"), "pipelineKeywords"),
            "context": labels(body.get("pipelineContextItems"), "pipelineContextItems")}


def intent_digest(decl: dict[str, Any]) -> str:
    """The creation intent of an idempotent create: the name, the stages in their order with all
    their fields, keywords and context (not traceId)."""
    intent = {"name": decl["name"], "stages": decl["stages"], "keywords": decl["keywords"], "context": decl["context"]}
    return hashlib.sha256(json.dumps(intent, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
