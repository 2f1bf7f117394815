"""The inputs of the pipeline and worker operations, typed: each operation of ``Pipelines`` and
``Workers`` takes one of these models (the HTTP routes hand over the body they validated, and a
mapping given instead is read into its model by ``read``). A model checks the types ("3" is not
a number, "yes" not a boolean, an unknown stage field or option is refused); the operation checks
what a type cannot say (names, dependencies, cycles, the ranges of numbers: ``_spec``), so each
check is made in one place and a range written here (``documented``) only documents it.

A refusal is one sentence in the service's words, naming the field (and a stage by its name):
``sentence``, which the HTTP service uses for every body it refuses."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, ValidationError, WithJsonSchema
from pydantic_core import PydanticCustomError

from flowli.access import MAX_ID
from flowli.domain import FlowliError, Refusal
from flowli.engine import MAX_INTERVAL, MIN_INTERVAL

MAX_STAGES = 1000
"""The most stages a pipeline has (those declared at create and appended after, together)."""
MAX_NAME = 200
"""The longest name (characters): a pipeline's, a stage's, a handler's, an idempotency key."""
MAX_RETRIES = 100
"""The most retries a stage's options (or a retry policy) may ask for."""
MAX_SECONDS = 604_800
"""The longest ``retryInterval``, ``maxRetryInterval`` and ``timeOut`` (one week, in seconds),
and the longest delay before a retry whatever its backoff grows to."""
MAX_MULTIPLIER = 10
"""The largest ``backoffMultiplier`` of a retry policy."""
RULE_RANGES = {"maxRetries": MAX_RETRIES, "intervalSeconds": MAX_SECONDS, "backoffMultiplier": MAX_MULTIPLIER}
"""The largest value of each number of a retry policy's rules (the smallest is 0)."""
MAX_HANDLERS = 100
"""The most handler names one worker serves (``supportedHandlers``, a pull's ``handlers``)."""
MAX_BATCH = 100
"""Jobs, results or creates in one request of a batch route at most (offered in the bootstrap answer)."""


class PipelineInputError(FlowliError):
    """A create, append or action body that is not valid: the message names where."""

    refusal = Refusal.INVALID


def _shown(value: Any, limit: int = 60) -> str:
    """``value`` as JSON, cut to ``limit`` characters (a refusal never repeats a whole body)."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return type(value).__name__
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _number(value: Any) -> int | float:
    """A JSON number as sent: an int stays an int (a strict float would make 3 into 3.0, and the
    declaration a stage keeps, and the digest of an idempotent create's intent, would change)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PydanticCustomError("number_type", "must be a number, got {got}", {"got": _shown(value)})
    return value


Number = Annotated[int | float, PlainValidator(_number), WithJsonSchema({"type": "number"})]


def documented(low: float, high: float, default: Any = None, **more: Any) -> Any:
    """A number field whose range the operation checks (the document says it; the model does not)."""
    return Field(default, json_schema_extra={"minimum": low, "maximum": high, **more})


class Body(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", defer_build=True)


class StageOptions(Body):
    model_config = ConfigDict(strict=True, extra="forbid", defer_build=True)
    dependsOn: list[str] | None = None
    maxRetries: Number | None = documented(0, MAX_RETRIES)
    retryInterval: Number | None = documented(0, MAX_SECONDS)
    retryOnErrorCodes: list[str] | None = None
    backoff: Literal["fixed", "linear", "exponential"] | None = None
    maxRetryInterval: Number | None = documented(0, MAX_SECONDS)
    jitter: bool | None = None
    timeOut: Number | None = documented(0, MAX_SECONDS)
    runInParallelWith: list[str] | None = None
    failIfOutputEmpty: bool | None = None
    notifyOnFailure: bool | None = None
    runAsUser: str | None = None


class StageIn(Body):
    model_config = ConfigDict(strict=True, extra="forbid", defer_build=True)
    stageName: str = Field(json_schema_extra={"maxLength": MAX_NAME})
    stageHandlerName: str = Field(json_schema_extra={"maxLength": MAX_NAME})
    input: str | None = None
    description: str | None = None
    isEvent: bool = False
    options: StageOptions | None = None


class Keyword(Body):
    key: str
    value: str | None = None


class ContextItem(Body):
    key: str
    value: str | None = None
    valueType: str | None = None
    isSensitive: bool = False
    isDeleted: bool = False


class PipelineIn(Body):
    name: str = Field(json_schema_extra={"maxLength": MAX_NAME})
    traceId: str | None = None
    stages: list[StageIn] = Field(json_schema_extra={"maxItems": MAX_STAGES})
    pipelineKeywords: list[Keyword] | None = None
    pipelineContextItems: list[ContextItem] | None = None


class IdempotentPipelineIn(PipelineIn):
    idempotencyKey: str = Field(json_schema_extra={"maxLength": MAX_NAME})


class ScheduleIn(Body):
    """A schedule: its name, one trigger (``cron`` with its ``timezone``, ``intervalSeconds`` or
    ``runAt``: checked where the schedule is stored) and the pipeline each firing creates."""

    name: str = Field(json_schema_extra={"maxLength": MAX_NAME})
    cron: str | None = None
    timezone: str | None = None
    intervalSeconds: float | None = documented(MIN_INTERVAL, MAX_INTERVAL)
    runAt: str | None = Field(None, description="an instant with its offset, from 1970-01-01 to 9000-01-01")
    pipeline: PipelineIn


class IdempotencyKeyIn(Body):
    idempotencyKey: str


class StagesIn(Body):
    stages: list[StageIn] = Field(json_schema_extra={"maxItems": MAX_STAGES})


class RerunIn(Body):
    stageId: int = documented(1, MAX_ID, ...)
    rerunAllNextStages: bool = False


class SkipIn(Body):
    stageId: int = documented(1, MAX_ID, ...)


class DecisionIn(Body):
    approved: bool
    rejectionReason: str | None = None


class BootstrapIn(Body):
    workerName: str = Field(max_length=MAX_NAME)
    supportedHandlers: list[str] = Field(max_length=MAX_HANDLERS)
    instanceId: str | None = None
    hostName: str | None = None
    pid: int | None = None
    sdkVersion: str | None = None


class PullIn(Body):
    handlers: list[str] | None = Field(None, max_length=MAX_HANDLERS)
    waitSeconds: Number = documented(0, 30, 0)


class LeaseIn(Body):
    executionId: str
    workerId: str | None = None


class LogIn(Body):
    message: str | None = None
    logLevel: str | None = None
    created: str | None = None


class ResultIn(Body):
    executionId: str
    attempt: int
    isSuccess: bool
    output: str | None = None
    errorCode: str | None = None
    errorMessage: str | None = None
    retryable: bool | None = None
    isWaitingForApproval: bool | None = None
    contextItems: list[ContextItem] | None = None
    appendStages: list[StageIn] | None = None
    logs: list[LogIn] | None = None


class PullBatchIn(PullIn):
    max: int = Field(ge=1, le=MAX_BATCH, description=f"jobs at most, 1 to {MAX_BATCH}")


class ResultItemIn(ResultIn):
    stageId: int | str
    token: str | None = None


class AckIn(Body):
    token: str
    requeue: bool = False


class HeartbeatIn(Body):
    state: Literal["ready", "draining"] | None = None
    inFlight: int | None = Field(None, json_schema_extra={"minimum": 0})


class PolicyRules(Body):
    model_config = ConfigDict(strict=True, extra="forbid", defer_build=True)
    maxRetries: Number = documented(0, RULE_RANGES["maxRetries"], ...)
    intervalSeconds: Number = documented(0, RULE_RANGES["intervalSeconds"], ...)
    backoffMultiplier: Number | None = documented(0, RULE_RANGES["backoffMultiplier"])
    errorCodes: list[str] | None = None


class PolicyTags(Body):
    model_config = ConfigDict(strict=True, extra="forbid", defer_build=True)
    include: list[str] | None = None
    exclude: list[str] | None = None


class PolicyTargeting(Body):
    model_config = ConfigDict(strict=True, extra="forbid", defer_build=True)
    stageNames: list[str] | None = None
    stageHandlerNames: list[str] | None = None
    pipelineNames: list[str] | None = None
    tags: PolicyTags | None = None


class PolicyIn(Body):
    name: str = Field(json_schema_extra={"maxLength": MAX_NAME})
    type: Literal["retry"] = "retry"
    rules: PolicyRules
    targeting: PolicyTargeting | None = None
    state: Literal["enabled", "disabled"] = "enabled"


M = TypeVar("M", bound=BaseModel)


def read(model: type[M], data: Any) -> M:
    """``data`` as a ``model``: itself when it is one already (a body the HTTP service read),
    else checked against it, a PipelineInputError in one sentence naming the field when it is
    not one."""
    if isinstance(data, model):
        return data
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise PipelineInputError(sentence(exc.errors(include_url=False), data)) from None


_LISTS_OF_STAGES = ("stages", "appendStages")
_PHRASES = {
    "missing": "is required",
    "extra_forbidden": "is not a known field",
    "string_type": "must be a string, got {input}",
    "bool_type": "must be true or false, got {input}",
    "int_type": "must be a whole number, got {input}",
    "float_type": "must be a number, got {input}",
    "list_type": "must be a list, got {input}",
    "model_type": "must be an object, got {input}",
    "dict_type": "must be an object, got {input}",
    "model_attributes_type": "must be an object, got {input}",
    "literal_error": "must be {expected}, got {input}",
}
"""How each kind of type error reads (a kind not here reads as the model says it)."""


def sentence(errors: Sequence[Mapping[str, Any]], data: Any = None) -> str:
    """The first of a model's ``errors`` as one sentence naming where: a stage by its name (or
    its index), a context item or keyword by its key, a field by its dotted path."""
    first = errors[0] if errors else {}
    kind = first.get("type", "")
    if kind in ("json_invalid", "json_type"):
        ctx = first.get("ctx") or {}
        return "the body is not valid JSON" + (f": {ctx.get('error')}" if ctx.get("error") else "")
    loc = [x for x in first.get("loc", ()) if x != "body"]
    where = _where(loc, data)
    phrase = _PHRASES.get(kind)
    if phrase is not None:
        value = first.get("input")
        text = phrase.format(input=_shown(value), **(first.get("ctx") or {}))
    elif first.get("msg", "").startswith("must "):
        text = first["msg"]  # ours (``Number``): already in these words
    else:
        return f"{where}: {first.get('msg', 'is not valid')}"
    return f"{where} {text}"


def _where(loc: list[Any], data: Any) -> str:
    """``loc`` in words: its parts joined by dots, an index after its list (``d[1]``, with an
    item's key: ``pipelineKeywords[1] (k)``), what lies inside an item after a colon; an item of
    a list of stages is its stage (``stage 'a'``, else ``stages[0]``)."""
    segments = [""]
    node = data
    for step in loc:
        if isinstance(step, int):
            node = node[step] if isinstance(node, list) and 0 <= step < len(node) else None
            if len(segments) == 1 and segments[0] in _LISTS_OF_STAGES:
                name = node.get("stageName") if isinstance(node, dict) else None
                segments[0] = f"stage {name!r}" if isinstance(name, str) and name else f"{segments[0]}[{step}]"
            else:
                key = node.get("key") if isinstance(node, dict) else None
                segments[-1] += f"[{step}]" + (f" ({key})" if isinstance(key, str) and key else "")
            segments.append("")
        else:
            node = node.get(step) if isinstance(node, dict) else None
            segments[-1] = f"{segments[-1]}.{step}" if segments[-1] else str(step)
    return ": ".join(s for s in segments if s) or "the body"
