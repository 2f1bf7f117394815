"""The bodies of the HTTP service as pydantic models: the OpenAPI document is generated from
them. Types are strict ("3" is not a number, "yes" not a boolean); the pipeline service checks
the rest (names, dependencies, cycles) and says which stage and field."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class Body(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class StageOptions(Body):
    model_config = ConfigDict(strict=True, extra="forbid")
    dependsOn: list[str] | None = None
    maxRetries: float | None = Field(None, ge=0)
    retryInterval: float | None = Field(None, ge=0)
    retryOnErrorCodes: list[str] | None = None
    backoff: Literal["fixed", "linear", "exponential"] | None = None
    maxRetryInterval: float | None = Field(None, ge=0)
    jitter: bool | None = None
    timeOut: float | None = Field(None, ge=0)
    runInParallelWith: list[str] | None = None
    failIfOutputEmpty: bool | None = None
    notifyOnFailure: bool | None = None
    runAsUser: str | None = None


class StageIn(Body):
    stageName: str
    stageHandlerName: str
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
    name: str
    traceId: str | None = None
    stages: list[StageIn]
    pipelineKeywords: list[Keyword] | None = None
    pipelineContextItems: list[ContextItem] | None = None


class IdempotentPipelineIn(PipelineIn):
    idempotencyKey: str


class IdempotencyKeyIn(Body):
    idempotencyKey: str


class StagesIn(Body):
    stages: list[StageIn]


class RerunIn(Body):
    stageId: int
    rerunAllNextStages: bool = False


class SkipIn(Body):
    stageId: int


class DecisionIn(Body):
    approved: bool
    rejectionReason: str | None = None


class BootstrapIn(Body):
    workerName: str
    supportedHandlers: list[str]
    instanceId: str | None = None
    hostName: str | None = None
    pid: int | None = None
    sdkVersion: str | None = None


class PullIn(Body):
    handlers: list[str] | None = None
    waitSeconds: float = Field(0, ge=0, le=30)


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


class AckIn(Body):
    token: str
    requeue: bool = False


class HeartbeatIn(Body):
    state: Literal["ready", "draining"] | None = None
    inFlight: int | None = Field(None, ge=0)


class Error(BaseModel):
    error: str


class PolicyRules(Body):
    maxRetries: float = Field(ge=0)
    intervalSeconds: float = Field(ge=0)
    backoffMultiplier: float | None = Field(None, ge=0)
    errorCodes: list[str] | None = None


class PolicyTags(Body):
    include: list[str] | None = None
    exclude: list[str] | None = None


class PolicyTargeting(Body):
    stageNames: list[str] | None = None
    stageHandlerNames: list[str] | None = None
    pipelineNames: list[str] | None = None
    tags: PolicyTags | None = None


class PolicyIn(Body):
    name: str
    type: Literal["retry"] = "retry"
    rules: PolicyRules
    targeting: PolicyTargeting | None = None
    state: Literal["enabled", "disabled"] = "enabled"


class ScheduleIn(Body):
    name: str
    cron: str | None = None
    timezone: str | None = None
    intervalSeconds: float | None = Field(None, gt=0)
    runAt: str | None = None
    pipeline: PipelineIn
