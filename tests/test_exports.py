"""The public surface that DESIGN.md fixes: tests outside the project import these names."""

from __future__ import annotations

import inspect

import pytest

import flowli
import flowli.access
import flowli.catalog
import flowli.client
import flowli.dashboard
import flowli.domain
import flowli.engine
import flowli.http
import flowli.log
import flowli.metrics
import flowli.pipelines
import flowli.services
import flowli.store
from flowli import Context, Engine, Registry

pytestmark = pytest.mark.unit


def test_top_level_names():
    assert sorted(flowli.__all__) == ["Context", "Engine", "Options", "Principal", "Registry", "connect", "testing"]
    assert inspect.iscoroutinefunction(flowli.connect)


PINNED = {
    flowli.domain: [
        "Actor", "ArgumentsInvalid", "BUILT_IN_ROLES", "Cancelled", "Code", "DECIDE_RUNS", "DEFAULT_APPLICATION", "DatabaseUnavailable", "DuplicateFrameError", "ENTRY_STATUS", "EVERY_CAPABILITY", "Entry", "EntryKind", "ExecutionFailed",
        "ExecutionRecord", "ExecutionStateError", "ExecutionTerminalError", "FlowliError", "FrameKind",
        "InvalidDatabaseURL", "LeaseLost", "Message", "NO_RETRY", "NoOpenReviewError", "NonRetryableError",
        "NondeterminismError", "NotJSONCompatibleError", "OPERATE_RUNS", "OperationRefused", "OutputInvalid", "Prerequisite", "Principal", "Provenance", "READ_RUNS", "REDACTED", "Refusal", "RegistrationError", "RetryPolicy",
        "START_RUNS", "STATUS_TONES", "SYSTEM", "Site", "StaleAnswer", "StaleItem", "StaleState", "Status", "StepFailed", "TERMINAL", "Task", "TaskKind", "Timer", "Tone", "TypeMetadata", "UnknownExecutionError",
        "UnknownTaskError", "UnknownWorkflowError", "WRITE_CATALOG", "WorkflowArgumentsError", "actor_for", "belongs", "canonical", "check_json",
        "check_json_since", "checked_eid", "child_eid", "custom_role", "digest", "dumps", "grants", "is_eid", "is_sensitive", "keyed_eid", "lacking", "loads", "mask", "new_eid", "principal_for", "redact",
        "sensitive_keys", "task_id", "type_metadata",
    ],
    flowli.engine: [
        "AttemptView", "COLLECTOR_THRESHOLDS", "CallNext", "Checked", "Clock", "Consumer", "Context", "Decider", "Difference", "EXECUTIONS", "Engine", "ExecutionPage", "ExecutionSummary",
        "Explanation", "FRAME_TONES", "FrameIds", "FrameView", "MAX_INTERVAL", "MIN_INTERVAL", "Memo", "Middleware", "OpenAttempt", "Options", "Projector", "Registry", "RunView", "SCHEDULE", "ScheduleError",
        "StateQuery", "StoredState", "SystemClock", "Transition", "Verification", "WorkflowDef", "describe_wait", "divergence", "error_summary", "firing_key", "input_model", "next_fire", "problems",
        "reply_channel", "task_traceparent", "trigger", "tuned_collector", "unvisited", "validation_error",
    ],
    flowli.store: [
        "Acquired", "Acquisition", "Announcement", "Claim", "Fence", "Guard", "HELD", "Intent", "Item", "Items", "JournalFilter", "NewExecution", "NewItem", "NewMessage", "OpenAttempt", "Plan", "Query", "Renewal",
        "Resume", "StateIndex", "StateQuery", "StatusChange", "Store", "StoredState", "TaskHold", "Views", "WakeCheck", "WakeWaiters", "Withdrawal", "Write", "WriteResult", "connect_wal", "fits", "scope_sql",
    ],
    flowli.pipelines: [
        "Access", "AckIn", "Applications", "BootstrapIn", "Conflict", "ContextItem", "DecisionIn", "Forbidden",
        "HeartbeatIn", "IdempotencyKeyIn", "IdempotentPipelineIn", "InputBody", "Keyword", "LeaseIn", "LogIn",
        "MAX_BATCH", "MAX_HANDLERS", "MAX_ID", "MAX_NAME", "MAX_RETRIES", "MAX_SECONDS", "MAX_STAGES", "NotFound",
        "PIPELINE_STATUSES",
        "PipelineIn", "PipelineInputError", "Pipelines", "Policies", "PolicyIn", "PolicyRules", "PolicyTags",
        "PolicyTargeting", "PullBatchIn", "PullIn", "ROLES",
        "RULE_RANGES", "RerunIn", "ResultIn", "ResultItemIn", "STAGE_STATUSES", "ScheduleIn", "Schedules", "ServiceError", "Session", "SkipIn",
        "StageIn", "StageOptions", "StagesIn", "TERMINAL_CODES", "Unauthorized", "Unavailable", "WORKFLOW",
        "Workers", "decide", "declaration", "delays", "documented", "effective_policy", "handler_of", "install", "key_of",
        "plan", "policy_body", "progress", "queue_of", "read", "redact", "redact_items", "schedule_input", "sentence",
        "stage_list", "status_word"
    ],
    flowli.catalog: [
        "AUDIT", "ApprovalNeeded", "COMPILED_FORMAT_VERSION", "Catalog", "CatalogError",
        "CompositionConflict", "CompositionInvalid", "DAG", "InputsInvalid", "MAX_IDLE_SECONDS",
        "PARKED", "PermissionDenied", "Prerequisite", "ROLES", "RUN_TONES", "RemediationDenied", "RemediationRequired", "Roles",
        "RunStateError", "SAVE", "StepInputInvalid", "UnknownType", "catalog_of", "compile_definition",
        "content_hash", "decided", "inputs_of", "install", "policy", "remediation", "require_approval", "roles_of", "steps_of",
        "validate"
    ],
    flowli.dashboard: ["Dashboard", "MAX_NODES", "Node", "TooLarge", "layered", "layout", "svg"],
    flowli.http: ["AllowedHosts", "MAX_BODY", "Pages", "STATUS", "Service", "create_app", "from_this_machine", "serve"],
    flowli.client: ["ClientError", "HttpWorker", "PipelinesClient", "StageError", "WaitForApproval"],
    flowli.metrics: ["Metrics", "serve"],
    flowli.services: ["Services"],
    flowli.access: [
        "APPLICATION", "Access", "Applications", "Conflict", "Forbidden", "KEY", "MAX_ID", "NotFound", "ROLES",
        "SESSION", "ServiceError", "USER", "Unauthorized", "Unavailable", "digest", "item_id", "key_of", "owned",
    ],
    flowli.log: ["Attempt", "Bucket", "Evidence", "attach", "attempt_scope", "current_attempt", "get_logger"],
}


@pytest.mark.parametrize("module", list(PINNED), ids=lambda m: m.__name__)
def test_each_layer_exports_exactly_its_pinned_names(module):
    """A name added to or dropped from a layer's public surface is a decision: change it here too."""
    assert sorted(module.__all__) == PINNED[module]
    for name in module.__all__:
        assert hasattr(module, name), name


def test_domain_names():
    for name in ["RetryPolicy", "NonRetryableError", "StepFailed", "DuplicateFrameError", "NondeterminismError",
                 "Cancelled", "LeaseLost", "Status"]:
        assert hasattr(flowli.domain, name), name
    # control flow survives a user's `except Exception:`
    assert not issubclass(flowli.domain.Cancelled, Exception)
    assert not issubclass(flowli.domain.LeaseLost, Exception)
    assert [s.value for s in flowli.domain.Status] == ["pending", "running", "suspended", "completed", "failed", "cancelled"]


def test_engine_methods_are_coroutines_but_worker():
    for name in ["start", "status", "result", "signal", "broadcast", "cancel", "journal", "migrate", "list", "run_worker"]:
        assert inspect.iscoroutinefunction(getattr(Engine, name)), name
    assert not inspect.iscoroutinefunction(Engine.worker)


def test_context_methods():
    for name in ["step", "child", "receive", "sleep", "sleep_until", "gather", "now", "random", "uuid", "send",
                 "announce", "enqueue", "withdraw"]:
        assert callable(getattr(Context, name)), name
    assert callable(Registry().workflow)
