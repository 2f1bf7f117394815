"""RBAC in the engine: roles grant capabilities; one middleware checks every transition a
principal with roles asks for, whatever the entry point (HTTP, MCP, CLI, the dashboard), and
the catalog checks its reads with the same function.

A principal without roles is code of the application itself (``by="alice@example.com"`` from
Python): trusted, as any caller of the engine's methods is. Every entry point gives its
principals their roles (an API key's, a dashboard user's, an MCP session's)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flowli.domain import Principal
from flowli.engine import CallNext, Engine, Registry, Transition

from ._dag import DAG, dag_args
from ._errors import ApprovalNeeded, PermissionDenied

READ, START, OPERATE, WRITE = "runs:read", "runs:start", "runs:operate", "catalog:write"
ROLES: dict[str, frozenset[str]] = {
    "admin": frozenset({"*"}),
    "operator": frozenset({READ, START, OPERATE, WRITE}),
    "viewer": frozenset({READ}),
}
"""The built-in roles. ``admin`` holds every capability, a type's declared permissions included;
``operator`` reads, starts, operates runs and saves compositions; ``viewer`` reads."""

_OPERATE = {"signal", "broadcast", "cancel", "migrate", "answer", "retry", "terminate", "fail"}


class Roles:
    """The roles of one engine: the built-in ones and custom ones (``define``)."""

    def __init__(self) -> None:
        self._roles = dict(ROLES)

    def define(self, name: str, capabilities: Iterable[str]) -> None:
        """Define (or redefine) a custom role: the capabilities it grants (``runs:start``, a type's
        declared permission such as ``s3:write``)."""
        if not isinstance(name, str) or not name or name in ROLES:
            raise ValueError(f"a custom role needs a name that is not a built-in role, got {name!r}")
        caps = frozenset(capabilities)
        if not all(isinstance(c, str) and c for c in caps):
            raise ValueError(f"role {name!r}: capabilities are non-empty strings, got {sorted(map(repr, caps))}")
        self._roles[name] = caps

    def names(self) -> list[str]:
        return sorted(self._roles)

    def capabilities(self, roles: Iterable[str]) -> frozenset[str]:
        out: set[str] = set()
        for role in roles:
            out |= self._roles.get(role, frozenset())
        return frozenset(out)

    def allows(self, principal: Principal, capability: str) -> bool:
        caps = self.capabilities(principal.roles)
        return "*" in caps or capability in caps

    def require_all(self, principal: Any, needed: Iterable[tuple[str, str]]) -> None:
        """Refuse a principal with roles that lacks one of the capabilities (PermissionDenied,
        naming it), then an assistant's write that no person approved (ApprovalNeeded): every
        capability is checked before the approval, so a refusal that an approval could not lift
        comes first."""
        needed = list(needed)
        if not isinstance(principal, Principal) or not principal.roles:
            return
        for capability, action in needed:
            if not self.allows(principal, capability):
                raise PermissionDenied(_who(principal), capability, action)
        for capability, action in needed:
            require_approval(principal, capability, action)

    def require(self, principal: Any, capability: str, action: str) -> None:
        """Refuse (PermissionDenied, naming the capability) a principal with roles that lack it;
        an assistant's write without a person's approval (ApprovalNeeded)."""
        self.require_all(principal, [(capability, action)])


def _who(principal: Principal) -> str:
    return f"{principal.kind}:{principal.id} (roles {', '.join(principal.roles)})"


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
        return [(OPERATE, f"{t.kind} run {t.eid}")]
    return []


_INSTALLED = "_flowli_rbac"


def install(engine: Engine) -> Roles:
    """The RBAC of ``engine``: its middleware registered once; returns its roles."""
    roles: Roles | None = getattr(engine, _INSTALLED, None)
    if roles is not None:
        return roles
    found = Roles()

    async def rbac(t: Transition, call_next: CallNext) -> Any:
        if isinstance(t.principal, Principal) and t.principal.roles:
            found.require_all(t.principal, needs(engine.registry, t))
        return await call_next()

    engine.use(rbac, kinds={"start", *_OPERATE})  # what needs() asks capabilities for
    setattr(engine, _INSTALLED, found)
    return found
