"""The catalog's errors: each one sentence naming what was wrong and where."""

from __future__ import annotations

import difflib
from typing import Any

from flowli.domain import FlowliError, Refusal, lacking


class CatalogError(FlowliError):
    """The root of the catalog's refusals (bad input, a state that does not allow it)."""

    refusal = Refusal.INVALID


class UnknownType(CatalogError):
    """A workflow type that is not in the catalog, with the nearest name if there is one."""

    code = "UNKNOWN_TYPE"
    refusal = Refusal.NOT_FOUND

    def __init__(self, name: str, known: list[str], where: str = ""):
        self.name = name
        self.suggestion = suggest(name, known)
        hint = f"; did you mean {self.suggestion!r}?" if self.suggestion else ""
        super().__init__(f"{where}unknown workflow type {name!r}{hint}")

    def refusal_fields(self) -> dict[str, Any]:
        return {"suggestion": self.suggestion} if self.suggestion else {}


class InputsInvalid(CatalogError):
    """Inputs that do not fit a type's input schema: every bad field is named."""

    code = "INPUT_INVALID"

    def __init__(self, workflow_type: str, problems: list[str]):
        self.workflow_type = workflow_type
        self.problems = problems
        super().__init__(f"the inputs of {workflow_type!r} do not match its schema: {'; '.join(problems)}")

    def refusal_fields(self) -> dict[str, Any]:
        return {"problems": self.problems}


class CompositionInvalid(CatalogError):
    """A composition that does not validate; ``errors`` are the validator's sentences."""

    code = "COMPOSITION_INVALID"

    def __init__(self, errors: list[str]):
        self.errors = errors
        self.details = {"errors": errors}
        super().__init__("the composition does not validate: " + "; ".join(errors))

    def refusal_fields(self) -> dict[str, Any]:
        return {"errors": self.errors}


class RunStateError(CatalogError):
    """An operation the run's state does not allow (resolve a run that is not parked, retry one
    that is not failed)."""

    refusal = Refusal.CONFLICT


class PermissionDenied(CatalogError):
    """The principal lacks a capability: the message names it."""

    code = "PERMISSION_DENIED"
    refusal = Refusal.FORBIDDEN

    def __init__(self, principal: str, capability: str, action: str):
        self.principal = principal
        self.capability, named = lacking(capability)
        super().__init__(f"{principal} may not {action}: it lacks {named}")

    def refusal_fields(self) -> dict[str, Any]:
        return {"capability": self.capability}


class ApprovalNeeded(PermissionDenied):
    """An assistant's write that no person approved: over MCP its write tools open an approval
    (``approval_required``); elsewhere (``/catalog``, ``/pipelines``) it is refused."""

    code = "APPROVAL_REQUIRED"

    def __init__(self, principal: str, capability: str, action: str):
        self.principal = principal
        self.capability = capability
        CatalogError.__init__(self, f"{principal} may not {action} without a person's approval: it is an"
                                    " assistant's key, whose writes take effect only once a person approves them"
                                    " (ask through the MCP server at /mcp, whose write tools open an approval)")


class CompositionConflict(CatalogError):
    """A changed definition saved under a version that holds another one."""

    code = "COMPOSITION_CONFLICT"
    refusal = Refusal.CONFLICT


class StepInputInvalid(CatalogError):
    """A dag step whose inputs could not be made from the composition's inputs and the outputs
    of earlier steps."""

    code = "STEP_INPUT_INVALID"

    def __init__(self, step: str, message: str):
        self.step = step
        self.details = {"step": step}
        super().__init__(f"step '{step}': {message}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (StepInputInvalid, (self.step, str(self).split(": ", 1)[1]))


class RemediationDenied(CatalogError):
    """A remediation gate answered ``denied``: the completed steps were compensated, the run fails."""

    code = "REMEDIATION_DENIED"

    def __init__(self, step: str, reason: str, compensated: list[str], failures: list[str]):
        self.step = step
        self.details = {"step": step, "reason": reason, "compensated": compensated, "compensation_failures": failures}
        undone = f"; compensated {', '.join(compensated)}" if compensated else "; nothing to compensate"
        failed = f"; compensation failed for {', '.join(failures)}" if failures else ""
        super().__init__(f"step '{step}': remediation denied ({reason}){undone}{failed}")

    def __reduce__(self) -> tuple[Any, ...]:
        d = self.details
        return (RemediationDenied, (d["step"], d["reason"], d["compensated"], d["compensation_failures"]))


class RemediationRequired(Exception):  # noqa: N818 - the reference's name
    """Raise it in a dag step that failed on a fixable precondition: the run parks in
    ``remediation_pending`` with ``state_data.remediation = {"step", "reason", "fix"}`` until
    ``resolve_workflow`` answers it."""

    code = "REMEDIATION_REQUIRED"

    def __init__(self, message: str, fix: dict[str, Any] | None = None):
        self.fix = dict(fix or {})
        self.details = {"fix": self.fix}
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (RemediationRequired, (str(self), self.fix))


def suggest(name: str, known: list[str]) -> str | None:
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    return close[0] if close else None
