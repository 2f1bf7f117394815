"""The error tree of flowli.

Failures are one ``Exception`` tree rooted at :class:`FlowliError`. Control flow that must
survive a user's ``except Exception:`` — cancellation and a lost lease — derives from
``BaseException``, as trio's ``Cancelled`` does::

    BaseException
     ├── Cancelled            the execution was cancelled; raised in the workflow function
     └── LeaseLost            this worker no longer owns the execution; it writes nothing more
    Exception
     ├── NonRetryableError    raised by a step to stop its retries at once
     └── FlowliError
          ├── RegistrationError        a workflow could not be registered
          ├── UnknownWorkflowError     no workflow with that name (and version)
          ├── WorkflowArgumentsError   arguments do not fit the workflow's signature
          ├── NotJSONCompatibleError   a value cannot be journaled
          ├── DuplicateFrameError      one key repeats under one parent frame
          ├── NondeterminismError      a replay met a different frame than the journal holds
          ├── StepFailed               a frame has no attempt left
          ├── ExecutionFailed          an execution ended failed (its error, as data)
          ├── UnknownExecutionError    no execution with that eid
          ├── ExecutionTerminalError   the execution is completed, failed or cancelled
          ├── ExecutionStateError      the execution is not in a state that allows the call
          ├── OutputInvalid            a workflow's result that does not fit its return annotation
          ├── OperationRefused         an operator's action refused by its guard (idle, lease, seq)
          ├── UnknownTaskError         no open task with that id
          ├── StaleAnswer              an answer or failure for an attempt that is not current
          ├── NoOpenReviewError        an execution with no review waiting for an answer
          ├── InvalidDatabaseURL       a database URL that no backend understands
          └── DatabaseUnavailable      a database URL that parsed, whose server did not let flowli in
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar


class Refusal(enum.StrEnum):
    """What kind of refusal a failure is, in the one taxonomy every adapter maps once (the HTTP
    service to its statuses, the dashboard to its pages, MCP to a tool's error)."""

    INVALID = "invalid"
    """The input is not valid: the message names what and where."""
    UNAUTHORIZED = "unauthorized"
    """No credential, or one that is unknown or disabled."""
    FORBIDDEN = "forbidden"
    """A valid credential whose role lacks what the action needs."""
    NOT_FOUND = "not_found"
    """No such thing in the caller's application."""
    CONFLICT = "conflict"
    """The state of what it acts on does not allow it now."""
    STALE = "stale"
    """An answer, a state or an attempt that is not current any more."""
    UNAVAILABLE = "unavailable"
    """A part it needs (the store) did not answer: not confirmed, try again."""
    LIMITED = "limited"
    """The caller asked more often (or holds more) than its limit allows: try again later."""


class FlowliError(Exception):
    """The root of every failure that flowli raises."""

    refusal: ClassVar[Refusal] = Refusal.CONFLICT
    """What kind of refusal it is (see Refusal); a subclass says its own."""

    def refusal_fields(self) -> dict[str, Any]:
        """The fields an answer carries beside the message (a capability, the problems, ...)."""
        return {}


class NonRetryableError(Exception):
    """Raise it in a step to stop the retries of the frame at once."""


class RegistrationError(FlowliError):
    """A workflow could not be registered (not async, or a duplicate name and version)."""


class UnknownWorkflowError(FlowliError):
    """No workflow with that name, or no such version of it."""

    def __init__(self, workflow: str, version: str | None = None, known: list[str] | None = None):
        self.workflow = workflow
        self.version = version
        where = f"workflow {workflow!r}" + (f" version {version!r}" if version is not None else "")
        hint = f"; registered: {', '.join(known)}" if known else ""
        super().__init__(f"unknown {where}{hint}")


class WorkflowArgumentsError(FlowliError):
    """The arguments of a start do not fit the workflow's signature."""

    def __init__(self, workflow: str, detail: str):
        self.workflow = workflow
        super().__init__(f"arguments do not fit workflow {workflow!r}: {detail}")


class NotJSONCompatibleError(FlowliError):
    """A value that must be journaled (step value, argument, payload) is not JSON-compatible."""

    def __init__(self, what: str, detail: str):
        self.what = what
        super().__init__(f"{what} is not JSON-compatible: {detail}")


class DuplicateFrameError(FlowliError):
    """One key repeats under one parent frame."""

    def __init__(self, fid: str):
        self.fid = fid
        super().__init__(f"frame {fid} already exists in this execution: give each frame a distinct key")


class NondeterminismError(FlowliError):
    """A replay met a frame that does not match the journal.

    The execution suspends for an operator, who cancels it or migrates it to another version.
    """

    def __init__(self, eid: str, fid: str, detail: str):
        self.eid = eid
        self.fid = fid
        self.detail = detail
        super().__init__(f"nondeterminism in execution {eid} at frame {fid}: {detail}")


class StepFailed(FlowliError):
    """A frame has no attempt left. Raised in the workflow, and again on every replay."""

    def __init__(self, fid: str, error_type: str, message: str, attempts: int, code: str | None = None,
                 details: dict[str, Any] | None = None):
        self.fid = fid
        self.error_type = error_type
        self.message = message
        self.attempts = attempts
        self.code = code
        """The cause's own code (``OUTPUT_INVALID``, ``REMEDIATION_REQUIRED``), when it had one."""
        self.details = details
        super().__init__(f"frame {fid} failed after {attempts} attempt(s): {error_type}: {message}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (StepFailed, (self.fid, self.error_type, self.message, self.attempts, self.code, self.details))


class ExecutionFailed(FlowliError):
    """An execution ended failed; carries its error as data when the type cannot be rebuilt."""

    def __init__(self, eid: str, error_type: str, message: str):
        self.eid = eid
        self.error_type = error_type
        self.message = message
        super().__init__(f"execution {eid} failed: {error_type}: {message}")


class UnknownExecutionError(FlowliError):
    refusal = Refusal.NOT_FOUND

    def __init__(self, eid: str):
        self.eid = eid
        super().__init__(f"unknown execution {eid}")


class ExecutionTerminalError(FlowliError):
    def __init__(self, eid: str, status: str, action: str):
        self.eid = eid
        self.status = status
        super().__init__(f"cannot {action} execution {eid}: it is {status}")


class UnknownTaskError(FlowliError):
    def __init__(self, task_id: str):
        self.task_id = task_id
        super().__init__(f"no open task {task_id} (it was answered, acked or withdrawn, or never existed)")


class StaleAnswer(FlowliError):
    """An answer, a failure or a renewal for a DELEGATE attempt that is not the current one:
    its lease expired or went to another consumer, a later attempt replaced it, it was answered
    already, or its execution ended. Nothing changed."""

    refusal = Refusal.STALE

    def __init__(self, task_id: str, reason: str):
        self.task_id = task_id
        self.reason = reason
        super().__init__(f"task {task_id} is stale: {reason}")


class NoOpenReviewError(FlowliError):
    def __init__(self, eid: str):
        self.eid = eid
        super().__init__(f"execution {eid} has no open review")


class ExecutionStateError(FlowliError):
    def __init__(self, eid: str, status: str, action: str, need: str):
        self.eid = eid
        self.status = status
        super().__init__(f"cannot {action} execution {eid}: it is {status}, it must be {need}")


class _DoesNotFit(FlowliError):
    """A value that does not fit a workflow's types, each bad field named (``problems``)."""

    sentence = ""

    def __init__(self, workflow: str, problems: list[str]):
        self.workflow = workflow
        self.problems = list(problems)
        super().__init__(self.sentence.format(workflow=workflow, problems="; ".join(self.problems)))

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.workflow, self.problems))


class ArgumentsInvalid(_DoesNotFit):
    """The journaled arguments of an execution do not fit the types of its workflow's structured
    parameters (it was started around the catalog): the run fails with INPUT_INVALID."""

    code = "INPUT_INVALID"
    sentence = "the arguments of workflow {workflow!r} do not fit its parameters: {problems}"


class OutputInvalid(_DoesNotFit):
    """A workflow's result does not fit its return annotation: the run fails with OUTPUT_INVALID."""

    code = "OUTPUT_INVALID"
    sentence = "the output of workflow {workflow!r} does not match its schema: {problems}"


class OperationRefused(FlowliError):
    """An operation on an execution that its guards refuse (it progressed recently, a live worker
    holds its lease, its journal moved past the seq the caller saw). Nothing changed."""

    def __init__(self, eid: str, action: str, reason: str):
        self.eid = eid
        self.action = action
        self.reason = reason
        super().__init__(f"cannot {action} execution {eid}: {reason}")


class StaleItem(FlowliError):
    """A write that replaces an item's body only as it was read (``NewItem.expect``) found it
    changed or gone: nothing of the write applied (a schedule paused while one of its firings
    was being written, say)."""

    refusal = Refusal.STALE

    def __init__(self, kind: str, key: str):
        self.kind = kind
        self.key = key
        super().__init__(f"the {kind} {key!r} changed since it was read")


class StaleState(FlowliError):
    """A write that advances the state of a decider's execution from a version that is not the
    stored one any more: another command advanced it first. Nothing changed; the engine decides
    the command again against the fresh state."""

    refusal = Refusal.STALE

    def __init__(self, eid: str, version: int):
        self.eid = eid
        self.version = version
        super().__init__(f"the state of execution {eid} is not at version {version} any more")


class InvalidDatabaseURL(FlowliError):
    def __init__(self, url: str, detail: str):
        self.url = url
        super().__init__(f"invalid database URL {url!r}: {detail}")


class Cancelled(BaseException):
    """The execution was cancelled.

    A ``BaseException``: a workflow's ``except Exception:`` must not swallow a cancellation.
    """


class LeaseLost(BaseException):
    """This worker lost the lease of an execution; it stops at once and writes nothing more.

    A ``BaseException`` for the same reason as :class:`Cancelled`.
    """

    def __init__(self, eid: str, epoch: int):
        self.eid = eid
        self.epoch = epoch
        super().__init__(f"lease of execution {eid} at epoch {epoch} is lost")


class DatabaseUnavailable(FlowliError):
    """The URL parsed, but the database did not answer, or refused: the server's own answer."""

    refusal = Refusal.UNAVAILABLE

    def __init__(self, url: str, answer: str, parsed: str):
        self.url = url
        self.answer = answer
        super().__init__(f"cannot connect to the database at {url}: {answer} (the URL parsed: {parsed})")
