"""Roles and the capabilities they grant: the one model every entry point checks (the engine's
RBAC, the pipelines routes, the catalog, MCP, the dashboard, the CLI). A role is a set of
capabilities; the built-in roles are three, and an application declares its own with
``Registry.role`` (every process that loads its registry knows them: ``flowli serve``, a worker,
the CLI)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

READ_RUNS, START_RUNS, OPERATE_RUNS, WRITE_CATALOG = "runs:read", "runs:start", "runs:operate", "catalog:write"
"""The built-in capabilities: read runs, start runs, act on runs (signal, cancel, retry, pause,
resume, rerun or skip a stage, a worker's pull and answer), save compositions and an
application's settings. A type's declared ``permissions`` are capabilities too."""
DECIDE_RUNS = "runs:decide"
"""Answer a person's decision that a run waits for: a stage's approval, a review (an assistant's
write that waits for approval is one), a remediation gate. ``runs:operate`` includes it (who acts
on runs answers their decisions, as before there was a capability of its own); a role that holds
it alone answers decisions and acts on nothing else (an auditor's)."""

INCLUDED: Mapping[str, str] = {DECIDE_RUNS: OPERATE_RUNS}
"""A capability that a broader one includes: the broader one grants it too."""
EVERY_CAPABILITY = "*"
"""The capability that holds every other one (the ``admin`` role's): an administrator's views,
every application."""

BUILT_IN_ROLES: Mapping[str, frozenset[str]] = {
    "admin": frozenset({EVERY_CAPABILITY}),
    "operator": frozenset({READ_RUNS, START_RUNS, OPERATE_RUNS, DECIDE_RUNS, WRITE_CATALOG}),
    "viewer": frozenset({READ_RUNS}),
}
"""The built-in roles. ``admin`` holds every capability, a type's declared permissions included;
``operator`` reads, starts, operates runs, answers decisions and saves compositions; ``viewer``
reads."""


def custom_role(name: object, capabilities: Iterable[object]) -> tuple[str, frozenset[str]]:
    """A custom role as declared (its name and capabilities), or ValueError naming what is wrong."""
    if not isinstance(name, str) or not name.strip() or name in BUILT_IN_ROLES or any(c.isspace() for c in name):
        raise ValueError(f"a custom role needs a name without spaces that is not a built-in role"
                         f" ({', '.join(BUILT_IN_ROLES)}), got {name!r}")
    if isinstance(capabilities, str):
        raise ValueError(f"role {name!r}: capabilities are a list of strings, got the string {capabilities!r}")
    caps = frozenset(capabilities)
    if not caps or not all(isinstance(c, str) and c.strip() for c in caps):
        raise ValueError(f"role {name!r}: capabilities are non-empty strings, one at least,"
                         f" got {sorted(map(repr, caps))}")
    return name, caps  # type: ignore[return-value]


def grants(capabilities: frozenset[str], capability: str) -> bool:
    """Whether a role's ``capabilities`` grant ``capability`` (or the one that includes it)."""
    broader = INCLUDED.get(capability)
    return EVERY_CAPABILITY in capabilities or capability in capabilities or \
        (broader is not None and broader in capabilities)


def lacking(capability: str) -> tuple[str, str]:
    """What a refusal for want of ``capability`` names: the capability (the broader one that
    includes it, which any role that acts holds) and the words that say it, naming both."""
    broader = INCLUDED.get(capability)
    if broader is None:
        return capability, f"the capability {capability!r}"
    return broader, f"the capability {broader!r} (or {capability!r}, which answers decisions alone)"
