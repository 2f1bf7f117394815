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
from ._inputs import RULE_RANGES, PipelineInputError, PolicyIn, read
from ._service import POLICY, STAGE, Pipelines
from ._spec import short


def policy_body(body: PolicyIn | Any) -> dict[str, Any]:
    """A retry policy as stored, from its body (``PolicyIn``, or a mapping read into one): what a
    type cannot say is checked here (a nonempty name, each number in its range), each refusal
    naming the policy."""
    policy = _read(body)
    name = policy.name
    if not name.strip():
        raise PipelineInputError("name is required (a nonempty string)")
    short(name, "name")
    rules = policy.rules.model_dump(exclude_none=True)
    for field, top in RULE_RANGES.items():
        value = rules.get(field)
        if value is None:
            continue
        if value < 0:
            raise PipelineInputError(f"policy {name!r}: rules.{field} must be a non-negative number, got {value!r}")
        if not math.isfinite(value) or value > top:
            raise PipelineInputError(f"policy {name!r}: rules.{field} must be a number from 0 to {top}, got {value!r}")
    target: dict[str, Any] = {}
    if policy.targeting is not None:
        target = policy.targeting.model_dump(exclude_none=True, exclude={"tags"})
        tags = policy.targeting.tags
        if tags is not None:
            target["tags"] = {"include": tags.include or [], "exclude": tags.exclude or []}
    return {"name": name, "type": "retry", "rules": rules, "targeting": target, "state": policy.state}


def _read(body: Any) -> PolicyIn:
    """``body`` as a ``PolicyIn``; a refusal names the policy when its name is known."""
    try:
        return read(PolicyIn, body)
    except PipelineInputError as exc:
        name = body.get("name") if isinstance(body, dict) else None
        if isinstance(name, str) and name.strip() and not str(exc).startswith("name"):
            raise PipelineInputError(f"policy {name!r}: {exc}") from None
        raise


class Policies:
    def __init__(self, engine: Engine, pipelines: Pipelines):
        self.engine = engine
        self.pipelines = pipelines

    def _json(self, item: Any) -> dict[str, Any]:
        return {"id": item.id, **{k: v for k, v in item.body.items() if k != "key"}}

    async def _item(self, access: Access, policy_id: Any) -> Any:
        return await owned(self.engine, access, POLICY, policy_id, "policy")

    async def create(self, access: Access, body: PolicyIn | Any) -> dict[str, Any]:
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

    async def replace(self, access: Access, policy_id: Any, body: PolicyIn | Any) -> dict[str, Any]:
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
