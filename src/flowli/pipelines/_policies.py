"""Action policies (retry): create, read, replace, delete, enable, disable; and a stage's
effective policy. A stage's retry plan is fixed when the stage is declared (created or
appended): the policies enabled then, else its options. A policy changed later applies to the
stages declared after it, so that a run's retries are a function of its journal."""

from __future__ import annotations

import builtins
import math
import uuid
from typing import Any

from flowli.access import Access, Conflict, NotFound, owned
from flowli.domain import WRITE_CATALOG
from flowli.engine import Engine

from . import _retry
from ._inputs import MAX_RETRIES, MAX_SECONDS, PipelineInputError
from ._service import POLICY, STAGE, Pipelines
from ._spec import short

_RULES = ("maxRetries", "intervalSeconds", "backoffMultiplier", "errorCodes")
MAX_MULTIPLIER = 10
RULE_RANGES = {"maxRetries": MAX_RETRIES, "intervalSeconds": MAX_SECONDS, "backoffMultiplier": MAX_MULTIPLIER}
"""The largest value of each number of a retry policy's rules (the smallest is 0)."""
_TARGETING = ("stageNames", "stageHandlerNames", "pipelineNames", "tags")


def _strings(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PipelineInputError(f"{where} must be a list of strings")
    return list(value)


def policy_body(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise PipelineInputError("the body must be a JSON object")
    name = body.get("name")
    if not isinstance(name, str) or not name.strip():
        raise PipelineInputError("name is required (a nonempty string)")
    short(name, "name")
    if body.get("type", "retry") != "retry":
        raise PipelineInputError(f"policy {name!r}: type must be retry, got {body.get('type')!r}")
    rules = body.get("rules")
    if not isinstance(rules, dict):
        raise PipelineInputError(f"policy {name!r}: rules is required (an object)")
    clean: dict[str, Any] = {}
    for field, value in rules.items():
        if field not in _RULES:
            raise PipelineInputError(f"policy {name!r}: rules.{field} is not a retry rule")
        if field == "errorCodes":
            clean[field] = _strings(value, f"policy {name!r}: rules.errorCodes")
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise PipelineInputError(f"policy {name!r}: rules.{field} must be a non-negative number, got {value!r}")
        elif not math.isfinite(value) or value > RULE_RANGES[field]:
            raise PipelineInputError(f"policy {name!r}: rules.{field} must be a number from 0 to"
                                     f" {RULE_RANGES[field]}, got {value!r}")
        else:
            clean[field] = value
    if "maxRetries" not in clean or "intervalSeconds" not in clean:
        raise PipelineInputError(f"policy {name!r}: rules.maxRetries and rules.intervalSeconds are required")
    targeting = body.get("targeting") or {}
    if not isinstance(targeting, dict):
        raise PipelineInputError(f"policy {name!r}: targeting must be an object")
    target: dict[str, Any] = {}
    for field, value in targeting.items():
        if field not in _TARGETING:
            raise PipelineInputError(f"policy {name!r}: targeting.{field} is not a targeting field")
        if field == "tags":
            if not isinstance(value, dict):
                raise PipelineInputError(f"policy {name!r}: targeting.tags must be an object of include and exclude")
            target["tags"] = {k: _strings(value.get(k) or [], f"policy {name!r}: targeting.tags.{k}")
                              for k in ("include", "exclude")}
        elif value is not None:
            target[field] = _strings(value, f"policy {name!r}: targeting.{field}")
    state = body.get("state", "enabled")
    if state not in ("enabled", "disabled"):
        raise PipelineInputError(f"policy {name!r}: state must be enabled or disabled, got {state!r}")
    return {"name": name, "type": "retry", "rules": clean, "targeting": target, "state": state}


class Policies:
    def __init__(self, engine: Engine, pipelines: Pipelines):
        self.engine = engine
        self.pipelines = pipelines

    def _json(self, item: Any) -> dict[str, Any]:
        return {"id": item.id, **{k: v for k, v in item.body.items() if k != "key"}}

    async def _item(self, access: Access, policy_id: Any) -> Any:
        return await owned(self.engine, access, POLICY, policy_id, "policy")

    async def create(self, access: Access, body: Any) -> dict[str, Any]:
        access.require(WRITE_CATALOG)
        policy = policy_body(body)
        for existing in await self.engine.items.list(POLICY, access.application):
            if existing.body["name"] == policy["name"]:
                raise Conflict(f"policy {policy['name']!r} exists already (id {existing.id})")
        item, _ = await self.engine.items.put(POLICY, access.application, str(uuid.uuid4()), policy,
                                              self.engine.clock.now())
        return self._json(item)

    async def list(self, access: Access) -> builtins.list[dict[str, Any]]:
        return [self._json(i) for i in await self.engine.items.list(POLICY, access.application)]

    async def get(self, access: Access, policy_id: Any) -> dict[str, Any]:
        return self._json(await self._item(access, policy_id))

    async def replace(self, access: Access, policy_id: Any, body: Any) -> dict[str, Any]:
        access.require(WRITE_CATALOG)
        item = await self._item(access, policy_id)
        policy = policy_body(body)
        await self.engine.items.update(POLICY, item.id, policy, self.engine.clock.now())
        return {"id": item.id, **policy}

    async def delete(self, access: Access, policy_id: Any) -> None:
        access.require(WRITE_CATALOG)
        item = await self._item(access, policy_id)
        await self.engine.items.delete(POLICY, item.id)

    async def set_state(self, access: Access, policy_id: Any, state: str) -> dict[str, Any]:
        access.require(WRITE_CATALOG)
        item = await self._item(access, policy_id)
        policy = {**item.body, "state": state}
        await self.engine.items.update(POLICY, item.id, policy, self.engine.clock.now())
        return {"id": item.id, **policy}

    async def effective(self, access: Access, stage_id: Any) -> dict[str, Any]:
        stage, _ = await self.pipelines.stage(access, stage_id)
        item = await self.engine.items.get(STAGE, stage.id)
        plan = (item.body.get("spec") or {}).get("plan") if item else None
        if plan is None:
            raise NotFound(f"no retry plan of stage {stage.id}")
        return effective_policy(plan)


def effective_policy(plan: dict[str, Any]) -> dict[str, Any]:
    """What ``GET /stages/{id}/effective-policy`` answers for a stage's retry plan: which decides
    (``policy`` with its id, ``stage`` options or ``none``), its retries, their delays (before
    jitter) and the error codes it retries."""
    answer: dict[str, Any] = {"source": plan["source"], "retry": {
        "maxRetries": plan["maxRetries"], "delays": _retry.delays(plan), "retryOnErrorCodes": plan["retryOnErrorCodes"]}}
    if plan["source"] == "policy":
        answer["policyId"] = plan["policyId"]
    return answer
