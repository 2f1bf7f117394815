"""The refusals' sentences (the errors of ``flowli.domain``, ``flowli.pipelines`` and
``flowli.catalog``): each names what was wrong and where, keeps what it names as attributes, and
the ones built to be rebuilt (``__reduce__``) come back from pickle as themselves."""

from __future__ import annotations

import pickle

import pytest

from flowli.catalog import (
    CatalogError,
    CompositionConflict,
    CompositionInvalid,
    InputsInvalid,
    PermissionDenied,
    RemediationDenied,
    RemediationRequired,
    RunStateError,
    StepInputInvalid,
    UnknownType,
)
from flowli.dashboard._auth import TooManyLogins  # the login limit's refusal: the dashboard names it nowhere public
from flowli.domain import (
    ArgumentsInvalid,
    Cancelled,
    DatabaseUnavailable,
    DuplicateFrameError,
    ExecutionFailed,
    ExecutionStateError,
    ExecutionTerminalError,
    FlowliError,
    InvalidDatabaseURL,
    LeaseLost,
    NondeterminismError,
    NonRetryableError,
    NoOpenReviewError,
    NotJSONCompatibleError,
    OperationRefused,
    OutputInvalid,
    Refusal,
    RegistrationError,
    StaleAnswer,
    StaleState,
    StepFailed,
    UnknownExecutionError,
    UnknownTaskError,
    UnknownWorkflowError,
    WorkflowArgumentsError,
)
from flowli.http import STATUS
from flowli.pipelines import (
    Conflict,
    Forbidden,
    NotFound,
    PipelineInputError,
    ServiceError,
    Unauthorized,
    Unavailable,
)

pytestmark = pytest.mark.unit

EID = "0190f3a4-7b1c-7d2e-8f00-000000000001"


# ---- the domain -----------------------------------------------------------------------------


@pytest.mark.parametrize(("error", "sentence"), [
    (UnknownWorkflowError("invoice"), "unknown workflow 'invoice'"),
    (UnknownWorkflowError("invoice", "4"), "unknown workflow 'invoice' version '4'"),
    (UnknownWorkflowError("invoice", None, ["billing", "report"]),
     "unknown workflow 'invoice'; registered: billing, report"),
    (UnknownWorkflowError("invoice", "4", []), "unknown workflow 'invoice' version '4'"),
    (WorkflowArgumentsError("invoice", "missing a required argument: 'invoice_id'"),
     "arguments do not fit workflow 'invoice': missing a required argument: 'invoice_id'"),
    (NotJSONCompatibleError("the value of step fetch", "a set at $.ids"),
     "the value of step fetch is not JSON-compatible: a set at $.ids"),
    (DuplicateFrameError("root/fetch:orders"),
     "frame root/fetch:orders already exists in this execution: give each frame a distinct key"),
    (NondeterminismError(EID, "root/fetch#1", "the journal holds a sleep frame here, the code a step frame"),
     f"nondeterminism in execution {EID} at frame root/fetch#1: the journal holds a sleep frame here, the code a"
     " step frame"),
    (StepFailed("root/fetch#0", "TimeoutError", "upstream slow", 3),
     "frame root/fetch#0 failed after 3 attempt(s): TimeoutError: upstream slow"),
    (ExecutionFailed(EID, "LedgerClosed", "the ledger is closed"),
     f"execution {EID} failed: LedgerClosed: the ledger is closed"),
    (UnknownExecutionError(EID), f"unknown execution {EID}"),
    (ExecutionTerminalError(EID, "completed", "signal"), f"cannot signal execution {EID}: it is completed"),
    (ExecutionStateError(EID, "running", "migrate", "suspended or blocked"),
     f"cannot migrate execution {EID}: it is running, it must be suspended or blocked"),
    (UnknownTaskError("task-7"), "no open task task-7 (it was answered, acked or withdrawn, or never existed)"),
    (StaleAnswer("task-7", "its lease expired"), "task task-7 is stale: its lease expired"),
    (NoOpenReviewError(EID), f"execution {EID} has no open review"),
    (ArgumentsInvalid("invoice", ["amount: Input should be a valid integer", "currency: Field required"]),
     "the arguments of workflow 'invoice' do not fit its parameters: amount: Input should be a valid integer;"
     " currency: Field required"),
    (OutputInvalid("invoice", ["bucket_name: Input should be a valid string"]),
     "the output of workflow 'invoice' does not match its schema: bucket_name: Input should be a valid string"),
    (OperationRefused(EID, "hand back", "a live worker holds its lease"),
     f"cannot hand back execution {EID}: a live worker holds its lease"),
    (InvalidDatabaseURL("mysql://db", "a URL starts with sqlite:// or postgresql://"),
     "invalid database URL 'mysql://db': a URL starts with sqlite:// or postgresql://"),
    (DatabaseUnavailable("postgresql://u:***@db/x", "no server answered (refused)", "host db, port 5432"),
     "cannot connect to the database at postgresql://u:***@db/x: no server answered (refused) (the URL parsed: host db,"
     " port 5432)"),
    (LeaseLost(EID, 4), f"lease of execution {EID} at epoch 4 is lost"),
], ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else "")
def test_each_domain_error_says_what_and_where(error, sentence):
    assert str(error) == sentence


def test_domain_errors_keep_what_they_name():
    failed = StepFailed("root/fetch#0", "TimeoutError", "upstream slow", 3, "TIMEOUT", {"after": 30})
    assert (failed.fid, failed.error_type, failed.message, failed.attempts, failed.code, failed.details) == (
        "root/fetch#0", "TimeoutError", "upstream slow", 3, "TIMEOUT", {"after": 30})
    unknown = UnknownWorkflowError("invoice", "4")
    assert (unknown.workflow, unknown.version) == ("invoice", "4")
    stuck = NondeterminismError(EID, "root/a#0", "detail")
    assert (stuck.eid, stuck.fid, stuck.detail) == (EID, "root/a#0", "detail")
    terminal = ExecutionStateError(EID, "running", "migrate", "suspended")
    assert (terminal.eid, terminal.status) == (EID, "running")
    invalid = ArgumentsInvalid("invoice", ("a", "b"))  # type: ignore[arg-type]
    assert (invalid.workflow, invalid.problems, invalid.code) == ("invoice", ["a", "b"], "INPUT_INVALID")
    assert OutputInvalid("w", []).code == "OUTPUT_INVALID"
    lost = LeaseLost(EID, 4)
    assert (lost.eid, lost.epoch) == (EID, 4)
    assert StaleAnswer("t", "r").reason == "r" and OperationRefused(EID, "a", "r").reason == "r"


def test_the_error_tree():
    for error in (RegistrationError, UnknownWorkflowError, WorkflowArgumentsError, NotJSONCompatibleError,
                  DuplicateFrameError, NondeterminismError, StepFailed, ExecutionFailed, UnknownExecutionError,
                  ExecutionTerminalError, ExecutionStateError, OutputInvalid, ArgumentsInvalid, OperationRefused,
                  UnknownTaskError, StaleAnswer, NoOpenReviewError, InvalidDatabaseURL, DatabaseUnavailable,
                  ServiceError, PipelineInputError, CatalogError):
        assert issubclass(error, FlowliError), error
    # control flow that a workflow's `except Exception:` must not swallow
    for control in (Cancelled, LeaseLost):
        assert issubclass(control, BaseException) and not issubclass(control, Exception)
    assert issubclass(NonRetryableError, Exception) and not issubclass(NonRetryableError, FlowliError)
    assert not issubclass(RemediationRequired, CatalogError)  # raised by a user's step, like NonRetryableError


@pytest.mark.parametrize("error", [
    StepFailed("root/fetch#0", "TimeoutError", "upstream slow", 3, "TIMEOUT", {"after": 30}),
    ArgumentsInvalid("invoice", ["amount: Field required"]),
    OutputInvalid("invoice", ["arn: Field required"]),
    StepInputInvalid("s2", "input 'bucket' maps field 'bucket_name' of step 's1', which its output does not hold"),
    RemediationDenied("s2", "not allowed", ["s1"], ["s0 (boom)"]),
    RemediationRequired("bucket b has a legal hold", {"action": "release_hold"}),
], ids=lambda e: type(e).__name__)
def test_errors_built_to_be_rebuilt_come_back_from_pickle_as_themselves(error):
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error) and str(again) == str(error)
    assert getattr(again, "details", None) == getattr(error, "details", None)
    assert getattr(again, "problems", None) == getattr(error, "problems", None)


# ---- the pipeline service ------------------------------------------------------------------------


def test_each_service_refusal_has_its_http_status_and_keeps_its_sentence_and_extras():
    statuses = {ServiceError: 400, NotFound: 404, Conflict: 409, Unauthorized: 401, Forbidden: 403, Unavailable: 503}
    for cls, status in statuses.items():
        error = cls("no pipeline 42")
        assert (STATUS[error.refusal], error.message, str(error), error.refusal_fields()) == (
            status, "no pipeline 42", "no pipeline 42", {})
        assert issubclass(cls, ServiceError)
    conflict = Conflict("idempotencyKey 'k' was used for a different creation intent", pipelineId=7)
    assert conflict.refusal_fields() == {"pipelineId": 7}
    assert not issubclass(PipelineInputError, ServiceError)  # a bad body
    assert STATUS[PipelineInputError("x").refusal] == 400


def test_every_kind_of_refusal_has_one_status_and_every_error_a_kind():
    """The one taxonomy: each kind answers one status over HTTP, and each error of the service,
    the catalog and the engine says its kind (the default, a state that does not allow it: 409)."""
    assert set(STATUS) == set(Refusal)
    kinds = {
        PermissionDenied("service:k", "runs:start", "start x"): (403, {"capability": "runs:start"}),
        UnknownType("aws.s3.put_bucket_taging", ["aws.s3.put_bucket_tagging"]):
            (404, {"suggestion": "aws.s3.put_bucket_tagging"}),
        InputsInvalid("t", ["bucket is required"]): (400, {"problems": ["bucket is required"]}),
        CompositionInvalid(["no layers"]): (400, {"errors": ["no layers"]}),
        RunStateError("run x is not failed"): (409, {}),
        UnknownExecutionError("e"): (404, {}),
        StaleState("e", 3): (409, {}),
        ExecutionStateError("e", "completed", "signal", "running"): (409, {}),
        TooManyLogins("account", 30): (429, {}),
    }
    for error, (status, fields) in kinds.items():
        assert (STATUS[error.refusal], error.refusal_fields()) == (status, fields), error


# ---- the catalog ---------------------------------------------------------------------------------


def test_an_unknown_type_names_where_and_the_nearest_name_when_one_is_close():
    known = ["aws.s3.create_bucket", "aws.s3.put_bucket_tagging", "aws.s3.list_buckets"]
    near = UnknownType("aws.s3.put_bucket_taging", known, "step 's2': ")
    assert str(near) == ("step 's2': unknown workflow type 'aws.s3.put_bucket_taging'; did you mean"
                         " 'aws.s3.put_bucket_tagging'?")
    assert (near.name, near.suggestion, near.code) == ("aws.s3.put_bucket_taging", "aws.s3.put_bucket_tagging",
                                                       "UNKNOWN_TYPE")
    assert UnknownType("aws.s3.delete_bucket", known).suggestion == "aws.s3.create_bucket"  # the nearest of two
    far = UnknownType("billing.pay", known)
    assert str(far) == "unknown workflow type 'billing.pay'" and far.suggestion is None
    assert UnknownType("aws.ec2.create_volume", known).suggestion is None  # alike, but not close enough
    assert str(UnknownType("x", [])) == "unknown workflow type 'x'"


@pytest.mark.parametrize(("error", "sentence", "code"), [
    (InputsInvalid("aws.s3.create_bucket", ["bucket: Field required", "region: Input should be a valid string"]),
     "the inputs of 'aws.s3.create_bucket' do not match its schema: bucket: Field required; region: Input should be a"
     " valid string", "INPUT_INVALID"),
    (CompositionInvalid(["step 's2': unknown workflow type 'x'", "layer 'l': steps must be a non-empty list of steps"]),
     "the composition does not validate: step 's2': unknown workflow type 'x'; layer 'l': steps must be a non-empty"
     " list of steps", "COMPOSITION_INVALID"),
    (PermissionDenied("ann@example.com", "s3:write", "start aws.s3.create_bucket"),
     "ann@example.com may not start aws.s3.create_bucket: it lacks the capability 's3:write'", "PERMISSION_DENIED"),
    (StepInputInvalid("s2", "input 'bucket' maps field 'bucket_name' of step 's1', which its output does not hold"),
     "step 's2': input 'bucket' maps field 'bucket_name' of step 's1', which its output does not hold",
     "STEP_INPUT_INVALID"),
    (RemediationDenied("s2", "not allowed", ["s1", "s0"], []),
     "step 's2': remediation denied (not allowed); compensated s1, s0", "REMEDIATION_DENIED"),
    (RemediationDenied("s2", "not allowed", [], []),
     "step 's2': remediation denied (not allowed); nothing to compensate", "REMEDIATION_DENIED"),
    (RemediationDenied("s2", "not allowed", ["s1"], ["s0 (StepFailed: boom)"]),
     "step 's2': remediation denied (not allowed); compensated s1; compensation failed for s0 (StepFailed: boom)",
     "REMEDIATION_DENIED"),
    (RemediationRequired("bucket b has a legal hold", {"action": "release_hold"}), "bucket b has a legal hold",
     "REMEDIATION_REQUIRED"),
    (CompositionConflict("composition 'vw_demo' version '1.0' is saved already with another definition"),
     "composition 'vw_demo' version '1.0' is saved already with another definition", "COMPOSITION_CONFLICT"),
], ids=["inputs", "composition", "permission", "step-input", "denied", "denied-nothing", "denied-failures",
        "remediation", "conflict"])
def test_each_catalog_error_says_what_and_where_with_its_code(error, sentence, code):
    assert (str(error), error.code) == (sentence, code)


def test_catalog_errors_keep_what_they_name_as_details():
    invalid = CompositionInvalid(["a", "b"])
    assert (invalid.errors, invalid.details) == (["a", "b"], {"errors": ["a", "b"]})
    denied = RemediationDenied("s2", "not allowed", ["s1"], ["s0 (boom)"])
    assert (denied.step, denied.details) == ("s2", {"step": "s2", "reason": "not allowed", "compensated": ["s1"],
                                                    "compensation_failures": ["s0 (boom)"]})
    fix = {"action": "release_hold", "bucket": "b"}
    required = RemediationRequired("held", fix)
    assert required.fix == fix and required.fix is not fix and required.details == {"fix": fix}
    assert RemediationRequired("held").fix == {}
    assert (StepInputInvalid("s2", "m").step, StepInputInvalid("s2", "m").details) == ("s2", {"step": "s2"})
    permission = PermissionDenied("ann", "s3:write", "start it")
    assert (permission.principal, permission.capability) == ("ann", "s3:write")
    assert InputsInvalid("t", ["p"]).problems == ["p"] and InputsInvalid("t", ["p"]).workflow_type == "t"
    assert issubclass(RunStateError, CatalogError) and issubclass(CompositionConflict, CatalogError)
