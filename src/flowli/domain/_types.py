"""Catalog metadata of a workflow type, declared at registration (``registry.workflow(name,
kind=..., featured=..., ...)``): plain values, checked when the workflow is registered."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._errors import RegistrationError

KINDS = ("state_machine", "data", "dag")
SCOPES = ("organization", "library", "none")


@dataclass(frozen=True)
class Prerequisite:
    """What must exist before a type can run (most often a connection): its ``variant`` (``aws``),
    a ``title`` and a ``guide`` that tells how to set it up."""

    variant: str
    title: str
    guide: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"variant": self.variant, "title": self.title, "guide": self.guide}


@dataclass(frozen=True)
class TypeMetadata:
    kind: str = "state_machine"
    featured: bool = False
    scope: str = "none"
    read_only: bool = False
    permissions: tuple[str, ...] = ()
    prerequisites: tuple[Prerequisite, ...] = ()
    description: str = ""
    compensate: str | None = None
    """The type that undoes a completed step of this type when a dag is denied."""
    declared: bool = False
    """Whether the registration gave catalog metadata: the result of such a type is checked
    against its return annotation (OUTPUT_INVALID); a bare registration journals its result as
    it is, as the engine's core contract has it."""


def type_metadata(workflow: str, version: str, values: dict[str, Any]) -> TypeMetadata:
    """The metadata of ``workflow`` from the keywords of its registration; RegistrationError
    naming the workflow and the keyword for a bad one."""
    where = f"workflow {workflow!r} version {version!r}"
    known = {"kind", "featured", "scope", "read_only", "permissions", "prerequisites", "description", "compensate"}
    unknown = sorted(set(values) - known)
    if unknown:
        raise RegistrationError(f"{where}: unknown keyword {unknown[0]!r}; the catalog metadata is one of"
                                f" {', '.join(sorted(known))}")
    kind = values.get("kind", "state_machine")
    if kind not in KINDS:
        raise RegistrationError(f"{where}: kind must be one of {', '.join(KINDS)}, got {kind!r}")
    scope = values.get("scope", "none")
    if scope not in SCOPES:
        raise RegistrationError(f"{where}: scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    for flag in ("featured", "read_only"):
        if not isinstance(values.get(flag, False), bool):
            raise RegistrationError(f"{where}: {flag} must be True or False, got {values[flag]!r}")
    permissions = values.get("permissions", ())
    if isinstance(permissions, str) or not all(isinstance(p, str) and p for p in permissions):
        raise RegistrationError(f"{where}: permissions must be a list of capability names, got {permissions!r}")
    prerequisites = values.get("prerequisites", ())
    if not all(isinstance(p, Prerequisite) for p in prerequisites):
        raise RegistrationError(f"{where}: prerequisites must be a list of Prerequisite, got {prerequisites!r}")
    description = values.get("description", "")
    if not isinstance(description, str):
        raise RegistrationError(f"{where}: description must be a string, got {description!r}")
    compensate = values.get("compensate")
    if compensate is not None and (not isinstance(compensate, str) or not compensate):
        raise RegistrationError(f"{where}: compensate must be the name of a workflow type, got {compensate!r}")
    read_only = bool(values.get("read_only", False)) or kind == "data"
    return TypeMetadata(kind, bool(values.get("featured", False)), scope, read_only, tuple(permissions),
                        tuple(prerequisites), description, compensate, declared=bool(values))
