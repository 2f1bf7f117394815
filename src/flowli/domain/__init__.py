"""Value types, statuses, errors, RetryPolicy and provenance. Imports nothing of flowli."""

from ._errors import ArgumentsInvalid as ArgumentsInvalid
from ._errors import Cancelled as Cancelled
from ._errors import DatabaseUnavailable as DatabaseUnavailable
from ._errors import DuplicateFrameError as DuplicateFrameError
from ._errors import ExecutionFailed as ExecutionFailed
from ._errors import ExecutionStateError as ExecutionStateError
from ._errors import ExecutionTerminalError as ExecutionTerminalError
from ._errors import FlowliError as FlowliError
from ._errors import InvalidDatabaseURL as InvalidDatabaseURL
from ._errors import LeaseLost as LeaseLost
from ._errors import NondeterminismError as NondeterminismError
from ._errors import NonRetryableError as NonRetryableError
from ._errors import NoOpenReviewError as NoOpenReviewError
from ._errors import NotJSONCompatibleError as NotJSONCompatibleError
from ._errors import OperationRefused as OperationRefused
from ._errors import OutputInvalid as OutputInvalid
from ._errors import Refusal as Refusal
from ._errors import RegistrationError as RegistrationError
from ._errors import StaleAnswer as StaleAnswer
from ._errors import StaleItem as StaleItem
from ._errors import StaleState as StaleState
from ._errors import StepFailed as StepFailed
from ._errors import UnknownExecutionError as UnknownExecutionError
from ._errors import UnknownTaskError as UnknownTaskError
from ._errors import UnknownWorkflowError as UnknownWorkflowError
from ._errors import WorkflowArgumentsError as WorkflowArgumentsError
from ._ids import checked_eid as checked_eid
from ._ids import child_eid as child_eid
from ._ids import is_eid as is_eid
from ._ids import keyed_eid as keyed_eid
from ._ids import new_eid as new_eid
from ._ids import task_id as task_id
from ._json import canonical as canonical
from ._json import check_json as check_json
from ._json import check_json_since as check_json_since
from ._json import digest as digest
from ._json import dumps as dumps
from ._json import loads as loads
from ._provenance import SYSTEM as SYSTEM
from ._provenance import Actor as Actor
from ._provenance import Code as Code
from ._provenance import Principal as Principal
from ._provenance import Provenance as Provenance
from ._provenance import Site as Site
from ._provenance import actor_for as actor_for
from ._provenance import principal_for as principal_for
from ._records import Entry as Entry
from ._records import ExecutionRecord as ExecutionRecord
from ._records import Message as Message
from ._records import Task as Task
from ._records import Timer as Timer
from ._redact import REDACTED as REDACTED
from ._redact import is_sensitive as is_sensitive
from ._redact import mask as mask
from ._redact import redact as redact
from ._redact import sensitive_keys as sensitive_keys
from ._retry import NO_RETRY as NO_RETRY
from ._retry import RetryPolicy as RetryPolicy
from ._roles import BUILT_IN_ROLES as BUILT_IN_ROLES
from ._roles import DECIDE_RUNS as DECIDE_RUNS
from ._roles import EVERY_CAPABILITY as EVERY_CAPABILITY
from ._roles import OPERATE_RUNS as OPERATE_RUNS
from ._roles import READ_RUNS as READ_RUNS
from ._roles import START_RUNS as START_RUNS
from ._roles import WRITE_CATALOG as WRITE_CATALOG
from ._roles import custom_role as custom_role
from ._roles import grants as grants
from ._roles import lacking as lacking
from ._status import ENTRY_STATUS as ENTRY_STATUS
from ._status import STATUS_TONES as STATUS_TONES
from ._status import TERMINAL as TERMINAL
from ._status import EntryKind as EntryKind
from ._status import FrameKind as FrameKind
from ._status import Status as Status
from ._status import TaskKind as TaskKind
from ._status import Tone as Tone
from ._tenancy import DEFAULT_APPLICATION as DEFAULT_APPLICATION
from ._tenancy import belongs as belongs
from ._types import Prerequisite as Prerequisite
from ._types import TypeMetadata as TypeMetadata
from ._types import type_metadata as type_metadata

__all__ = [
    "BUILT_IN_ROLES",
    "EVERY_CAPABILITY",
    "DECIDE_RUNS",
    "OPERATE_RUNS",
    "READ_RUNS",
    "START_RUNS",
    "WRITE_CATALOG",
    "custom_role",
    "grants",
    "lacking",
    "Actor",
    "Cancelled",
    "Code",
    "DatabaseUnavailable",
    "DuplicateFrameError",
    "ENTRY_STATUS",
    "Entry",
    "EntryKind",
    "ExecutionFailed",
    "ExecutionRecord",
    "ExecutionStateError",
    "ExecutionTerminalError",
    "FlowliError",
    "FrameKind",
    "InvalidDatabaseURL",
    "LeaseLost",
    "Message",
    "NO_RETRY",
    "NoOpenReviewError",
    "NonRetryableError",
    "NondeterminismError",
    "NotJSONCompatibleError",
    "OperationRefused",
    "OutputInvalid",
    "ArgumentsInvalid",
    "Prerequisite",
    "Principal",
    "Provenance",
    "REDACTED",
    "Refusal",
    "SYSTEM",
    "RegistrationError",
    "RetryPolicy",
    "Site",
    "StaleAnswer",
    "StaleItem",
    "StaleState",
    "Status",
    "DEFAULT_APPLICATION",
    "belongs",
    "STATUS_TONES",
    "Tone",
    "StepFailed",
    "TERMINAL",
    "Task",
    "TaskKind",
    "Timer",
    "TypeMetadata",
    "UnknownExecutionError",
    "UnknownTaskError",
    "UnknownWorkflowError",
    "WorkflowArgumentsError",
    "actor_for",
    "canonical",
    "check_json",
    "check_json_since",
    "checked_eid",
    "child_eid",
    "digest",
    "dumps",
    "loads",
    "is_eid",
    "is_sensitive",
    "keyed_eid",
    "mask",
    "new_eid",
    "principal_for",
    "redact",
    "sensitive_keys",
    "task_id",
    "type_metadata",
]
