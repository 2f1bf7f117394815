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
from ._decider import install as install
from ._decider import queue_of as queue_of
from ._policies import RULE_RANGES as RULE_RANGES
from ._policies import Policies as Policies
from ._policies import effective_policy as effective_policy
from ._policies import policy_body as policy_body
from ._retry import TERMINAL_CODES as TERMINAL_CODES
from ._retry import decide as decide
from ._retry import delays as delays
from ._retry import plan as plan
from ._schedules import Schedules as Schedules
from ._schedules import scheduled_pipeline as scheduled_pipeline
from ._service import Pipelines as Pipelines
from ._service import redact as redact
from ._spec import MAX_NAME as MAX_NAME
from ._spec import MAX_RETRIES as MAX_RETRIES
from ._spec import MAX_SECONDS as MAX_SECONDS
from ._spec import MAX_STAGES as MAX_STAGES
from ._spec import PipelineInputError as PipelineInputError
from ._spec import declaration as declaration
from ._spec import stage_list as stage_list
from ._view import redact_items as redact_items
from ._workers import Session as Session
from ._workers import Workers as Workers

__all__ = ["MAX_ID", "MAX_NAME", "MAX_RETRIES", "MAX_SECONDS", "MAX_STAGES", "ROLES", "RULE_RANGES",
           "TERMINAL_CODES", "WORKFLOW", "Access", "Applications", "Conflict", "Forbidden", "NotFound",
           "PipelineInputError", "Pipelines", "Policies", "Schedules", "ServiceError", "Session", "Unauthorized", "Unavailable", "Workers",
           "decide", "declaration", "delays", "effective_policy", "install", "key_of", "plan", "policy_body", "queue_of",
           "redact", "redact_items", "scheduled_pipeline", "stage_list"]
