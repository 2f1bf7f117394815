"""RBAC in the engine: roles grant capabilities; one middleware checks every transition a
principal asks for, whatever the entry point (HTTP, MCP, CLI, the dashboard), and the catalog
checks its reads with the same function.

The application's own code is trusted, as any caller of the engine's methods is: a ``by=``
string (``by="alice@example.com"`` from Python), no ``by=``, a principal marked ``trusted``
(``flowli.domain.SYSTEM``, the engine's own actors). Every other principal is checked: each
entry point gives its principals their roles (an API key's, a dashboard user's, an MCP
session's), and a principal without roles holds no capability (the check fails closed)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flowli.domain import (
    BUILT_IN_ROLES,
    DECIDE_RUNS,
    OPERATE_RUNS,
    READ_RUNS,
    START_RUNS,
    WRITE_CATALOG,
    Principal,
    custom_role,
    grants,
)
from flowli.engine import CallNext, Engine, Middleware, Registry, Transition

from ._dag import DAG, dag_args
from ._errors import ApprovalNeeded, PermissionDenied

READ, START, OPERATE, DECIDE, WRITE = READ_RUNS, START_RUNS, OPERATE_RUNS, DECIDE_RUNS, WRITE_CATALOG
ROLES = BUILT_IN_ROLES
"""The built-in roles (``flowli.domain.BUILT_IN_ROLES``)."""

_OPERATE = {"signal", "broadcast", "cancel", "migrate", "answer", "retry", "terminate", "fail"}


class Roles:
    """The roles of one engine: the built-in ones, the custom ones its registry declares
    (``Registry.role``), and those defined here (``define``)."""

    def __init__(self, declared: dict[str, frozenset[str]] | None = None) -> None:
        self._declared = declared if declared is not None else {}
        """The registry's own mapping, read at each check: a role declared later counts too (a
        custom role never takes a built-in role's name)."""

    def _of(self, role: str) -> frozenset[str]:
        return ROLES.get(role) or self._declared.get(role, frozenset())

    def define(self, name: str, capabilities: Iterable[str]) -> None:
        """Define (or redefine) a custom role in this process, as ``Registry.role`` declares one
        (the registry's roles are what every check reads): the capabilities it grants
        (``runs:start``, a type's declared permission such as ``s3:write``)."""
        declared, caps = custom_role(name, capabilities)
        self._declared[declared] = caps

    def knows(self, role: str) -> bool:
        return role in ROLES or role in self._declared

    def names(self) -> list[str]:
        return sorted({*ROLES, *self._declared})

    def capabilities(self, roles: Iterable[str]) -> frozenset[str]:
        """What ``roles`` grant together; a role this engine does not know grants nothing."""
        out: set[str] = set()
        for role in roles:
            out |= self._of(role)
        return frozenset(out)

    def allows(self, principal: Principal, capability: str) -> bool:
        return grants(self.capabilities(principal.roles), capability)

    def role_allows(self, role: str, capability: str) -> bool:
        """Whether the one role ``role`` grants ``capability`` (an unknown role grants nothing)."""
        return grants(self._of(role), capability)

    def require_all(self, principal: Any, needed: Iterable[tuple[str, str]]) -> None:
        """Refuse a principal that lacks one of the capabilities (PermissionDenied, naming it; one
        without roles lacks them all), then an assistant's write that no person approved
        (ApprovalNeeded): every capability is checked before the approval, so a refusal that an
        approval could not lift comes first. The application's own code passes (a ``by=``
        string or none, a ``trusted`` principal)."""
        needed = list(needed)
        if not isinstance(principal, Principal) or principal.trusted:
            return
        for capability, action in needed:
            if not self.allows(principal, capability):
                raise PermissionDenied(_who(principal), capability, action)
        for capability, action in needed:
            require_approval(principal, capability, action)

    def require(self, principal: Any, capability: str, action: str) -> None:
        """Refuse (PermissionDenied, naming the capability) a principal whose roles lack it; an
        assistant's write without a person's approval (ApprovalNeeded)."""
        self.require_all(principal, [(capability, action)])


def _who(principal: Principal) -> str:
    roles = f"roles {', '.join(principal.roles)}" if principal.roles else "no role"
    return f"{principal.kind}:{principal.id} ({roles})"


def require_approval(principal: Any, capability: str, action: str) -> None:
    """The approval gate, bound to the credential: an assistant's principal (an API key made with
    ``--assistant``) may read (``runs:read``), and every other capability it uses waits for a
    person's approval, whatever the entry point (MCP, ``/catalog``, ``/pipelines``): its writes
    are carried out only by an approval (a principal with ``approval`` set)."""
    if isinstance(principal, Principal) and principal.waits_for_approval and capability != READ:
        raise ApprovalNeeded(_who(principal), capability, action)


def start_needs(registry: Registry, workflow: Any, args: list[Any]) -> list[tuple[str, str]]:
    """What a start of ``workflow(*args)`` needs: ``runs:start`` (``runs:read`` for a read-only
    type, a data type being a read), the type's declared permissions, and for a dag those of
    every step type of its compiled form (no back door)."""
    known = isinstance(workflow, str) and workflow in registry.names()
    meta = registry.get(workflow).meta if known else None
    out = [(READ if meta is not None and meta.read_only else START, f"start {workflow}")]
    if meta is not None:
        out += [(p, f"start {workflow}") for p in meta.permissions]
    if workflow == DAG:
        args = dag_args(args)
        compiled = args[1] if len(args) > 1 and isinstance(args[1], dict) else {}
        for layer in compiled.get("layers", []):
            for step in layer.get("steps", []):
                name = step.get("workflow_type")
                if isinstance(name, str) and name in registry.names():
                    out += [(p, f"start {args[0]} (step type {name})") for p in registry.get(name).meta.permissions]
    return out


def needs(registry: Registry, t: Transition) -> list[tuple[str, str]]:
    """The capabilities a transition needs, each with the action the refusal names."""
    if t.kind == "start":
        return start_needs(registry, t.workflow, (t.payload or {}).get("args") or [])
    if t.kind in _OPERATE:
        if isinstance(t.payload, dict) and t.payload.get("decision") is True:
            return [(DECIDE, f"answer a decision of run {t.eid}")]
        return [(OPERATE, f"{t.kind} run {t.eid}")]
    return []


def policy(registry: Registry) -> tuple[Middleware, frozenset[str]]:
    """The RBAC middleware of an engine of ``registry``, and the transition kinds it sees: every
    transition a principal that is not the application's own code asks for is checked against
    the roles ``registry`` knows (``flowli.connect`` builds every engine with it)."""
    roles = Roles(registry.roles)

    async def rbac(t: Transition, call_next: CallNext) -> Any:
        if isinstance(t.principal, Principal) and not t.principal.trusted:
            roles.require_all(t.principal, needs(registry, t))
        return await call_next()

    rbac.flowli_rbac = True  # type: ignore[attr-defined]  # what roles_of looks for
    return rbac, frozenset({"start", *_OPERATE})  # what needs() asks capabilities for


def roles_of(engine: Engine) -> Roles:
    """The roles ``engine`` checks (the built-in ones and its registry's). Refused (fails closed)
    for an engine built without the RBAC policy: its checks would not run."""
    if not any(getattr(m, "flowli_rbac", False) for m in engine.middleware):
        raise RuntimeError("this engine was built without RBAC: open it with flowli.connect, or build it with"
                           " middleware=[flowli.catalog.policy(registry)]")
    return Roles(engine.registry.roles)
