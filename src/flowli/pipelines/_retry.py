"""Retry classification: the stage options, the action policies that take precedence over them,
and the decision for one failure. Pure functions: the pipeline workflow calls them in replay."""

from __future__ import annotations

import hashlib
import math
from typing import Any

from ._inputs import MAX_SECONDS

TERMINAL_CODES = frozenset({"BUSINESS_REJECTED", "VALIDATION_ERROR", "INVALID_STATE", "MISSING_REQUIRED_DATA"})
"""Never retried, even when listed."""

_DELAYS_SHOWN = 20


def stage_delay(options: dict[str, Any], n: int) -> float:
    """Delay n (n = 1, 2, ...) of the stage options, before jitter, capped by maxRetryInterval and
    by MAX_SECONDS."""
    interval = float(options.get("retryInterval") or 0)
    backoff = options.get("backoff") or "fixed"
    if backoff == "linear":
        delay = interval * n
    elif backoff == "exponential":
        delay = interval * 2.0 ** min(n - 1, 1000)  # past 2^1000 the week's cap holds anyway
    else:
        delay = interval
    cap = options.get("maxRetryInterval")
    if cap:
        delay = min(delay, float(cap))
    return min(delay, MAX_SECONDS)


def matches(policy: dict[str, Any], pipeline: str, stage: dict[str, Any], keywords: list[dict[str, Any]]) -> bool:
    """Whether a policy's targeting selects the stage (every given list must contain it)."""
    t = policy.get("targeting") or {}
    if t.get("stageNames") and stage["stageName"] not in t["stageNames"]:
        return False
    if t.get("stageHandlerNames") and stage["stageHandlerName"] not in t["stageHandlerNames"]:
        return False
    if t.get("pipelineNames") and pipeline not in t["pipelineNames"]:
        return False
    tags = t.get("tags") or {}
    have = {f"{k['key']}:{k['value']}" for k in keywords} | {k["key"] for k in keywords}
    if tags.get("include") and not set(tags["include"]) & have:
        return False
    return not (tags.get("exclude") and set(tags["exclude"]) & have)


def plan(stage: dict[str, Any], pipeline: str, keywords: list[dict[str, Any]],
         policies: list[tuple[int, dict[str, Any]]]) -> dict[str, Any]:
    """The retry plan of a stage: the first enabled retry policy that matches it (by id), else its
    options when both maxRetries and retryInterval are positive, else none."""
    for pid, policy in policies:
        if policy.get("type") == "retry" and policy.get("state") == "enabled" and matches(policy, pipeline, stage, keywords):
            rules = policy.get("rules") or {}
            return {"source": "policy", "policyId": pid, "maxRetries": int(rules.get("maxRetries") or 0),
                    "intervalSeconds": float(rules.get("intervalSeconds") or 0),
                    "backoffMultiplier": float(rules.get("backoffMultiplier") or 1),
                    "retryOnErrorCodes": list(rules.get("errorCodes") or []), "jitter": False}
    options = stage.get("options") or {}
    if (options.get("maxRetries") or 0) > 0 and (options.get("retryInterval") or 0) > 0:
        return {"source": "stage", "maxRetries": int(options["maxRetries"]), "options": options,
                "retryOnErrorCodes": list(options.get("retryOnErrorCodes") or []), "jitter": bool(options.get("jitter"))}
    return {"source": "none", "maxRetries": 0, "retryOnErrorCodes": []}


def delay(plan_: dict[str, Any], n: int) -> float:
    """Delay n of a plan, before jitter: never longer than MAX_SECONDS, whatever a backoff grows to."""
    if plan_["source"] == "policy":
        try:
            seconds = float(plan_["intervalSeconds"] * plan_["backoffMultiplier"] ** (n - 1))
        except OverflowError:
            seconds = math.inf
        return min(seconds, MAX_SECONDS)
    if plan_["source"] == "stage":
        return stage_delay(plan_["options"], n)
    return 0.0


def delays(plan_: dict[str, Any]) -> list[float]:
    return [delay(plan_, n) for n in range(1, min(plan_["maxRetries"], _DELAYS_SHOWN) + 1)]


def jittered(seconds: float, seed: str) -> float:
    """``seconds`` spread by up to ±20 %, the same on every replay (derived from ``seed``)."""
    fraction = int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big") / 2**64
    return seconds * (0.8 + 0.4 * fraction)


def decide(plan_: dict[str, Any], code: str | None, retryable: bool, retries: int, seed: str) -> float | None:
    """The delay before the next attempt after a failure with ``code`` (``retries`` retries ran
    already), or None: no retry."""
    if not retryable or (code or "") in TERMINAL_CODES or retries >= plan_["maxRetries"]:
        return None
    allow = plan_["retryOnErrorCodes"]
    if allow and code not in allow:
        return None  # a policy's filter does not fall back to the stage options
    seconds = delay(plan_, retries + 1)
    return jittered(seconds, seed) if plan_.get("jitter") else seconds
