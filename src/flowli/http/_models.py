"""The bodies of the HTTP service as pydantic models, and the answers of its routes: the OpenAPI
document is generated from them. The bodies of the pipeline and worker routes are the pipeline
operations' own inputs (``flowli.pipelines``: a route hands the model it read to the operation);
the others are declared here. Body types are strict ("3" is not a number, "yes" not a boolean);
the services check the rest (names, dependencies, cycles, the ranges of numbers) and say which
stage and field, so a range here only documents the service's (``documented``): each check is
made in one place. The answers list what every answer carries; an answer may carry more."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

from flowli.pipelines import (
    MAX_BATCH,
    PIPELINE_STATUSES,
    STAGE_STATUSES,
    AckIn,
    BootstrapIn,
    ContextItem,
    DecisionIn,
    HeartbeatIn,
    IdempotencyKeyIn,
    IdempotentPipelineIn,
    Keyword,
    LeaseIn,
    LogIn,
    PipelineIn,
    PolicyIn,
    PolicyRules,
    PolicyTags,
    PolicyTargeting,
    PullBatchIn,
    PullIn,
    RerunIn,
    ResultIn,
    ResultItemIn,
    ScheduleIn,
    SkipIn,
    StageIn,
    StageOptions,
    StagesIn,
)
from flowli.pipelines import InputBody as Body


class ResultsIn(Body):
    results: list[Any] = Field(max_length=MAX_BATCH, description=(
        "each a ResultItemIn: a stage's result as POST /stages/{stageId}/result takes it, with its stageId and"
        " the job's token; each is checked on its own (a bad one is answered 400 in its place)"))


class CreatesIn(Body):
    pipelines: list[Any] = Field(max_length=MAX_BATCH, description=(
        "each an IdempotentPipelineIn, checked on its own (a bad one is answered 400 in its place)"))


__all__ = ["AckIn", "BootstrapIn", "ContextItem", "DecisionIn", "HeartbeatIn", "IdempotencyKeyIn",
           "IdempotentPipelineIn", "Keyword", "LeaseIn", "LogIn", "PipelineIn", "PolicyIn", "PolicyRules", "PolicyTags",
           "PolicyTargeting", "PullBatchIn", "PullIn", "RerunIn", "ResultIn", "ResultItemIn", "ScheduleIn", "SkipIn", "StageIn",
           "StageOptions", "StagesIn"]
"""The bodies that are the pipeline operations' own inputs (``flowli.pipelines``), named here
beside the service's other bodies and answers."""


class Error(BaseModel):
    """A refusal: one sentence naming the field, the stage or the id (and, on some, more)."""
    error: str


# ---- answers ----------------------------------------------------------------------------------

# the words of flowli.pipelines' tables (a status added there shows in the OpenAPI document);
# a type checker sees strings, since the words are data
if TYPE_CHECKING:
    PipelineStatus: TypeAlias = str
    StageStatus: TypeAlias = str
else:
    PipelineStatus = Literal[tuple(PIPELINE_STATUSES)]
    StageStatus = Literal[tuple(STAGE_STATUSES)]


class Answer(BaseModel):
    """An answer: the fields it always carries (it may carry more)."""

    model_config = ConfigDict(extra="allow")


class KeywordOut(Answer):
    key: str
    value: str | None


class ContextItemOut(Answer):
    key: str
    value: str | None = Field(description='"***" when the item is sensitive')


class StageOut(Answer):
    id: int
    pipelineId: int
    name: str
    stageHandlerName: str
    description: str | None
    isEvent: bool
    status: StageStatus
    input: str | None
    output: str | None
    attempt: int
    executionId: str | None
    errorCode: str | None
    errorMessage: str | None
    options: dict[str, Any]
    dependsOn: list[str]
    createdAt: str | None
    startedAt: str | None
    finishedAt: str | None


class PipelineOut(Answer):
    id: int
    name: str
    status: PipelineStatus
    applicationId: int
    idempotencyKey: str | None
    traceId: str | None
    createdAt: str | None
    finishedAt: str | None
    stages: list[StageOut]
    pipelineKeywords: list[KeywordOut]
    pipelineContextItems: list[ContextItemOut]


class CreatedOut(Answer):
    pipeline: PipelineOut
    created: bool
    wasExisting: bool


class PipelinePage(Answer):
    items: list[PipelineOut]
    totalCount: int
    pageNumber: int
    pageSize: int


class StagesOut(Answer):
    stages: list[StageOut]


class HistoryEntry(Answer):
    seq: int | None
    kind: str
    frame: str | None
    attempt: int | None
    at: str
    actor: str | None
    value: Any
    error: Any


class ApplicationRef(Answer):
    id: int
    name: str


class BootstrapOut(Answer):
    workerId: str
    workerSessionToken: str
    application: ApplicationRef
    heartbeat: dict[str, float] = Field(description='{"intervalSeconds"}')
    lease: dict[str, float] = Field(description='{"ttlSeconds"}')
    batch: BatchOffer | None = Field(None, description="the batch routes this service offers, and their limits")


class BatchOffer(Answer):
    maxJobs: int
    maxResults: int
    maxCreates: int


class JobOut(Answer):
    token: str
    pipelineId: int
    stageId: int
    stageName: str
    stageHandlerName: str
    executionId: str
    attempt: int
    idempotencyKey: str
    input: str | None
    prevStageOutput: str | None
    contextItems: list[ContextItemOut]
    pipelineKeywords: list[KeywordOut]
    timeoutSeconds: float | None
    traceparent: str | None


class LeasedJobOut(JobOut):
    leaseExpiresAt: str


class JobsOut(Answer):
    jobs: list[LeasedJobOut]


class ItemResultOut(Answer):
    stageId: int | str | None
    status: int
    accepted: bool
    reason: str | None = None


class ResultsOut(Answer):
    results: list[ItemResultOut]


class ItemCreatedOut(Answer):
    status: int
    pipeline: PipelineOut | None = None
    error: str | None = None
    pipelineId: int | None = None


class CreatesOut(Answer):
    results: list[ItemCreatedOut]


class LeaseOut(Answer):
    acquired: bool
    attempt: int | None = None
    leaseExpiresAt: str | None = None
    cancelRequested: bool | None = None
    reason: str | None = None


class ResultOut(Answer):
    accepted: bool
    reason: str | None = None


class AckOut(Answer):
    acknowledged: bool


class OkOut(Answer):
    ok: bool


class WorkerOut(Answer):
    workerId: str
    workerName: str
    supportedHandlers: list[str]
    state: str
    lastHeartbeat: str | None


class ScheduleOut(Answer):
    id: int
    name: str
    state: str
    nextFireAt: str | None
    lastFireAt: str | None
    firings: int
    pipeline: dict[str, Any] | None
    cron: str | None = None
    timezone: str | None = None
    intervalSeconds: float | None = None
    runAt: str | None = None


class PolicyOut(Answer):
    id: int
    name: str
    type: Literal["retry"]
    rules: dict[str, Any]
    targeting: dict[str, Any]
    state: Literal["enabled", "disabled"]


class RetryOut(Answer):
    maxRetries: int
    delays: list[float]
    retryOnErrorCodes: list[str]


class EffectivePolicyOut(Answer):
    source: Literal["policy", "stage", "none"]
    retry: RetryOut
    policyId: int | None = None
