"""Roles as one model: the built-in roles and an application's own (``Registry.role``) grant
capabilities, and every check reads the same ones (``Roles`` of the engine's RBAC, the pipelines'
``Access``, the dashboard's and the CLI's questions). A declaration that is wrong says what."""

from __future__ import annotations

from typing import Any

import pytest

from flowli import Registry
from flowli.catalog import Roles
from flowli.domain import BUILT_IN_ROLES, Principal, RegistrationError
from flowli.pipelines import Access, Forbidden

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("name", "capabilities", "says"), [
    ("admin", ["runs:read"], "not a built-in role"),
    ("", ["runs:read"], "not a built-in role"),
    ("two words", ["runs:read"], "without spaces"),
    (7, ["runs:read"], "got 7"),
    ("auditor", [], "one at least"),
    ("auditor", ["runs:read", ""], "non-empty strings"),
    ("auditor", "runs:read", "a list of strings"),
])
def test_a_wrong_declaration_says_what_is_wrong(name: Any, capabilities: Any, says: str) -> None:
    registry = Registry()
    with pytest.raises(RegistrationError, match=says):
        registry.role(name, capabilities)
    assert registry.roles == {}


def test_declared_roles_are_read_by_each_check_even_when_declared_later() -> None:
    registry = Registry()
    roles = Roles(registry.roles)
    assert not roles.knows("auditor") and sorted(BUILT_IN_ROLES) == roles.names()
    registry.role("auditor", ["runs:read", "s3:read"])
    assert roles.knows("auditor") and roles.names() == ["admin", "auditor", "operator", "viewer"]
    auditor = Principal("ann@example.com", roles=("auditor",))
    assert roles.allows(auditor, "runs:read") and roles.allows(auditor, "s3:read")
    assert not roles.allows(auditor, "runs:start")
    assert roles.allows(Principal("root@example.com", roles=("admin",)), "s3:read")  # admin holds every capability
    assert not roles.allows(Principal("x@example.com", roles=("ghost",)), "runs:read")  # nobody declared it


def test_access_checks_a_role_by_its_capabilities_and_fails_closed() -> None:
    registry = Registry()
    registry.role("launcher", ["runs:read", "runs:start"])
    roles = Roles(registry.roles)

    def access(role: str) -> Access:
        return Access("billing", 1, role, "k", 3, roles=roles)

    access("launcher").require("runs:start")
    with pytest.raises(Forbidden, match="has role launcher, which lacks the capability 'runs:operate'"):
        access("launcher").require("runs:operate")
    for role in ("ghost", ""):  # a role this engine does not know grants nothing: refused, no KeyError
        with pytest.raises(Forbidden, match="lacks the capability 'runs:read'"):
            access(role).require("runs:read")
    # the built-in roles as before, with the engine's roles or the built-in ones alone (the default)
    for made in (lambda role: Access("billing", 1, role, "k", roles=roles), lambda role: Access("billing", 1, role, "k")):
        made("operator").require("runs:operate")
        with pytest.raises(Forbidden):
            made("viewer").require("runs:start")
        made("viewer").require("runs:read")
    with pytest.raises(Forbidden):  # a declared role means nothing to the built-in roles alone
        Access("billing", 1, "launcher", "k").require("runs:start")


def test_answering_decisions_is_a_capability_of_its_own_that_acting_on_runs_includes() -> None:
    registry = Registry()
    registry.role("auditor", ["runs:read", "runs:decide"])
    registry.role("mover", ["runs:read", "runs:operate"])
    roles = Roles(registry.roles)
    assert roles.role_allows("auditor", "runs:decide") and not roles.role_allows("auditor", "runs:operate")
    assert roles.role_allows("mover", "runs:decide") and roles.role_allows("operator", "runs:decide")
    assert not roles.role_allows("viewer", "runs:decide") and roles.role_allows("admin", "runs:decide")
    # a refusal names the capability any acting role holds, and the narrower one
    viewer = Access("billing", 1, "viewer", "vic@example.com", actor_kind="human", roles=roles)
    with pytest.raises(Forbidden, match=r"lacks the capability 'runs:operate' \(or 'runs:decide', which answers"):
        viewer.require("runs:decide")
    Access("billing", 1, "auditor", "aud@example.com", actor_kind="human", roles=roles).require("runs:decide")
