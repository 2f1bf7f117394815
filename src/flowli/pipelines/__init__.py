"""Pipelines: declarative stages run by application workers in any language, over HTTP. A
pipeline is an execution of the built-in decider ``flowli.pipeline``; see ``_decider`` (the
pipelines of an older release, a workflow of version 1, become the decider's once: ``_upgrade``)."""

from flowli.access import MAX_ID as MAX_ID
from flowli.access import ROLES as ROLES
from flowli.access import Access as Access
from flowli.access import Applications as Applications
from flowli.access import Conflict as Conflict
from flowli.access import Forbidden as Forbidden
from flowli.access import NotFound as NotFound
from flowli.access import ServiceError as ServiceError
from flowli.access import Unauthorized as Unauthorized
from flowli.access import Unavailable as Unavailable
from flowli.access import key_of as key_of

from ._decider import WORKFLOW as WORKFLOW
from ._decider import handler_of as handler_of
from ._decider import install as install
from ._decider import queue_of as queue_of
from ._inputs import MAX_BATCH as MAX_BATCH
from ._inputs import MAX_HANDLERS as MAX_HANDLERS
from ._inputs import MAX_NAME as MAX_NAME
from ._inputs import MAX_RETRIES as MAX_RETRIES
from ._inputs import MAX_SECONDS as MAX_SECONDS
from ._inputs import MAX_STAGES as MAX_STAGES
from ._inputs import RULE_RANGES as RULE_RANGES
from ._inputs import AckIn as AckIn
from ._inputs import Body as InputBody
from ._inputs import BootstrapIn as BootstrapIn
from ._inputs import ContextItem as ContextItem
from ._inputs import DecisionIn as DecisionIn
from ._inputs import HeartbeatIn as HeartbeatIn
from ._inputs import IdempotencyKeyIn as IdempotencyKeyIn
from ._inputs import IdempotentPipelineIn as IdempotentPipelineIn
from ._inputs import Keyword as Keyword
from ._inputs import LeaseIn as LeaseIn
from ._inputs import LogIn as LogIn
from ._inputs import PipelineIn as PipelineIn
from ._inputs import PipelineInputError as PipelineInputError
from ._inputs import PolicyIn as PolicyIn
from ._inputs import PolicyRules as PolicyRules
from ._inputs import PolicyTags as PolicyTags
from ._inputs import PolicyTargeting as PolicyTargeting
from ._inputs import PullBatchIn as PullBatchIn
from ._inputs import PullIn as PullIn
from ._inputs import RerunIn as RerunIn
from ._inputs import ResultIn as ResultIn
from ._inputs import ResultItemIn as ResultItemIn
from ._inputs import ScheduleIn as ScheduleIn
from ._inputs import SkipIn as SkipIn
from ._inputs import StageIn as StageIn
from ._inputs import StageOptions as StageOptions
from ._inputs import StagesIn as StagesIn
from ._inputs import documented as documented
from ._inputs import read as read
from ._inputs import sentence as sentence
from ._policies import Policies as Policies
from ._policies import effective_policy as effective_policy
from ._policies import policy_body as policy_body
from ._retry import TERMINAL_CODES as TERMINAL_CODES
from ._retry import decide as decide
from ._retry import delays as delays
from ._retry import plan as plan
from ._schedules import Schedules as Schedules
from ._schedules import schedule_input as schedule_input
from ._service import Pipelines as Pipelines
from ._service import redact as redact
from ._spec import declaration as declaration
from ._spec import stage_list as stage_list
from ._statuses import PIPELINE_STATUSES as PIPELINE_STATUSES
from ._statuses import STAGE_STATUSES as STAGE_STATUSES
from ._view import progress as progress
from ._view import redact_items as redact_items
from ._view import status_word as status_word
from ._workers import Session as Session
from ._workers import Workers as Workers

__all__ = ["MAX_BATCH", "MAX_HANDLERS", "MAX_ID", "MAX_NAME", "MAX_RETRIES", "MAX_SECONDS", "MAX_STAGES",
           "PIPELINE_STATUSES", "ROLES", "RULE_RANGES", "STAGE_STATUSES", "TERMINAL_CODES", "WORKFLOW", "Access", "AckIn", "Applications", "BootstrapIn", "Conflict",
           "ContextItem", "DecisionIn", "Forbidden", "HeartbeatIn", "IdempotencyKeyIn", "IdempotentPipelineIn",
           "InputBody", "Keyword", "LeaseIn", "LogIn", "NotFound", "PipelineIn", "PipelineInputError", "Pipelines",
           "Policies", "PolicyIn", "PolicyRules", "PolicyTags", "PolicyTargeting", "PullBatchIn", "PullIn", "RerunIn",
           "ResultIn", "ResultItemIn", "ScheduleIn", "Schedules", "ServiceError", "Session", "SkipIn", "StageIn", "StageOptions",
           "StagesIn", "Unauthorized", "Unavailable", "Workers", "decide", "declaration", "delays", "documented",
           "effective_policy", "handler_of", "install", "key_of", "plan", "policy_body", "progress", "queue_of", "read", "redact", "redact_items",
           "schedule_input", "sentence", "stage_list", "status_word"]
