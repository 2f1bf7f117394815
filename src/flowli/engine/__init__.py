"""Registry, Context, replay and memo, the worker loop, leases, the sweeper and the Engine.

Imports domain and the Store protocol, never a backend module.
"""

from flowli.store import OpenAttempt as OpenAttempt
from flowli.store import StateQuery as StateQuery
from flowli.store import StoredState as StoredState

from ._clock import Clock as Clock
from ._clock import SystemClock as SystemClock
from ._collector import COLLECTOR_THRESHOLDS as COLLECTOR_THRESHOLDS
from ._collector import tuned_collector as tuned_collector
from ._consumer import Consumer as Consumer
from ._consumer import reply_channel as reply_channel
from ._context import Context as Context
from ._decider import Decider as Decider
from ._engine import Engine as Engine
from ._errors import error_summary as error_summary
from ._explain import Explanation as Explanation
from ._frames import FrameIds as FrameIds
from ._frames import Memo as Memo
from ._frames import divergence as divergence
from ._frames import unvisited as unvisited
from ._projection import EXECUTIONS as EXECUTIONS
from ._projection import ExecutionPage as ExecutionPage
from ._projection import ExecutionSummary as ExecutionSummary
from ._projection import Projector as Projector
from ._registry import Registry as Registry
from ._registry import WorkflowDef as WorkflowDef
from ._runtime import Options as Options
from ._schedules import MAX_INTERVAL as MAX_INTERVAL
from ._schedules import MIN_INTERVAL as MIN_INTERVAL
from ._schedules import SCHEDULE as SCHEDULE
from ._schedules import ScheduleError as ScheduleError
from ._schedules import firing_key as firing_key
from ._schedules import next_fire as next_fire
from ._schedules import trigger as trigger
from ._tracing import task_traceparent as task_traceparent
from ._transitions import CallNext as CallNext
from ._transitions import Middleware as Middleware
from ._transitions import Transition as Transition
from ._typing import input_model as input_model
from ._typing import problems as problems
from ._typing import validation_error as validation_error
from ._verify import Checked as Checked
from ._verify import Difference as Difference
from ._verify import Verification as Verification
from ._views import FRAME_TONES as FRAME_TONES
from ._views import AttemptView as AttemptView
from ._views import FrameView as FrameView
from ._views import RunView as RunView
from ._views import describe_wait as describe_wait

__all__ = [
    "COLLECTOR_THRESHOLDS",
    "Decider",
    "AttemptView",
    "Checked",
    "Difference",
    "Verification",
    "FrameView",
    "FRAME_TONES",
    "RunView",
    "describe_wait",
    "error_summary",
    "CallNext",
    "Clock",
    "Consumer",
    "MAX_INTERVAL",
    "MIN_INTERVAL",
    "SCHEDULE",
    "ScheduleError",
    "firing_key",
    "next_fire",
    "trigger",
    "validation_error",
    "tuned_collector",
    "Context",
    "Engine",
    "EXECUTIONS",
    "ExecutionPage",
    "Explanation",
    "FrameIds",
    "Memo",
    "divergence",
    "unvisited",
    "ExecutionSummary",
    "Middleware",
    "Options",
    "Registry",
    "Projector",
    "StateQuery",
    "StoredState",
    "OpenAttempt",
    "SystemClock",
    "Transition",
    "WorkflowDef",
    "input_model",
    "problems",
    "reply_channel",
    "task_traceparent",
]
