"""A pipeline's declaration: its stages, their options, keywords and context items, checked as
the contract says where a type cannot say it (the types are the models' of ``_inputs``): names,
their lengths, dependencies and cycles, the ranges of numbers; each error one sentence naming
the stage and the field."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from typing import Any

from ._inputs import (
    MAX_NAME,
    MAX_RETRIES,
    MAX_SECONDS,
    MAX_STAGES,
    ContextItem,
    Keyword,
    PipelineIn,
    PipelineInputError,
    StageIn,
    StageOptions,
    StagesIn,
    read,
)

_NUMBERS = ("maxRetries", "retryInterval", "maxRetryInterval", "timeOut")
RANGES = {"maxRetries": (MAX_RETRIES, ""), "retryInterval": (MAX_SECONDS, " seconds"),
          "maxRetryInterval": (MAX_SECONDS, " seconds"), "timeOut": (MAX_SECONDS, " seconds")}
"""Each number of a stage's options: its largest value (the smallest is 0) and its unit."""


def stage_options(options: StageOptions | None, where: str) -> dict[str, Any]:
    """The options given (none null), each number in its range."""
    if options is None:
        return {}
    out = options.model_dump(exclude_none=True)
    for field in _NUMBERS:
        value = out.get(field)
        if value is None:
            continue
        if value < 0:
            raise PipelineInputError(f"{where}: options.{field} must not be negative, got {value}")
        top, unit = RANGES[field]
        if not math.isfinite(value) or value > top:
            raise PipelineInputError(f"{where}: options.{field} must be from 0 to {top}{unit}, got {value}")
    return out


def short(text: str, field: str) -> str:
    """``text``, refused when longer than MAX_NAME characters (``field`` names it)."""
    if len(text) > MAX_NAME:
        raise PipelineInputError(f"{field} is longer than {MAX_NAME} characters")
    return text


def stage_spec(index: int, stage: StageIn) -> dict[str, Any]:
    name = stage.stageName
    if not name.strip():
        raise PipelineInputError(f"stages[{index}]: stageName is required (a nonempty string)")
    where = f"stage {name!r}"
    if any(ch in name for ch in ",\t\r\n"):
        raise PipelineInputError(f"{where}: stageName must not contain commas, tabs or line breaks")
    short(name, f"{where}: stageName")
    if not stage.stageHandlerName.strip():
        raise PipelineInputError(f"{where}: stageHandlerName is required (a nonempty string)")
    short(stage.stageHandlerName, f"{where}: stageHandlerName")
    return {"stageName": name, "stageHandlerName": stage.stageHandlerName, "input": stage.input,
            "description": stage.description, "isEvent": stage.isEvent, "options": stage_options(stage.options, where)}


def stage_list(stages: Sequence[StageIn] | Any,
               existing: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """Validated stages, each with ``dependsOn`` resolved: its own list, else the stage declared
    before it (among ``existing`` ones too: an append continues the declaration order).
    ``stages`` not yet read as ``StageIn`` (a list of mappings) are read first."""
    if not isinstance(stages, list) or not stages:
        raise PipelineInputError("stages: at least one stage is required")
    if not all(isinstance(stage, StageIn) for stage in stages):
        stages = read(StagesIn, {"stages": stages}).stages
    if len(existing) + len(stages) > MAX_STAGES:
        raise PipelineInputError(f"stages: a pipeline has at most {MAX_STAGES} stages, got {len(existing) + len(stages)}")
    specs = [stage_spec(i, s) for i, s in enumerate(stages)]
    names = [spec["stageName"] for spec in existing]
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


def labels(items: Sequence[Keyword | ContextItem] | None, field: str) -> list[dict[str, Any]]:
    """Keywords or context items as a pipeline keeps them (a context item with its type, whether
    it is sensitive, and whether it deletes the key)."""
    out = []
    for i, item in enumerate(items or ()):
        if not item.key:
            raise PipelineInputError(f"{field}[{i}]: key is required (a nonempty string)")
        entry: dict[str, Any] = {"key": item.key, "value": item.value}
        if isinstance(item, ContextItem):
            entry.update(valueType=item.valueType or "string", isSensitive=item.isSensitive)
            if item.isDeleted:
                entry["isDeleted"] = True
        out.append(entry)
    return out


def declaration(body: PipelineIn | Any) -> dict[str, Any]:
    """A create body (``PipelineIn``, or a mapping read into one), validated: name, stages
    (resolved), keywords, context items."""
    body = read(PipelineIn, body)
    if not body.name.strip():
        raise PipelineInputError("name is required (a nonempty string)")
    short(body.name, "name")
    return {"name": body.name, "traceId": body.traceId, "stages": stage_list(body.stages),
            "keywords": labels(body.pipelineKeywords, "pipelineKeywords"),
            "context": labels(body.pipelineContextItems, "pipelineContextItems")}


def intent_digest(decl: dict[str, Any]) -> str:
    """The creation intent of an idempotent create: the name, the stages in their order with all
    their fields, keywords and context (not traceId)."""
    intent = {"name": decl["name"], "stages": decl["stages"], "keywords": decl["keywords"], "context": decl["context"]}
    return hashlib.sha256(json.dumps(intent, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
