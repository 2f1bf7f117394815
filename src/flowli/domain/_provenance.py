from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

ActorKind = Literal["worker", "human", "system", "schedule"]


@dataclass(frozen=True)
class Actor:
    """Who acts. The id of a human actor is the email address."""

    kind: ActorKind
    id: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.id}"


@dataclass(frozen=True)
class Site:
    """Where the code runs."""

    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    worker: str | None = None
    instance: str | None = None
    region: str | None = None
    epoch: int | None = None


@dataclass(frozen=True)
class Code:
    """What runs."""

    workflow: str | None = None
    version: str | None = None
    frame_kind: str | None = None
    frame_name: str | None = None
    ref: str | None = None


@dataclass(frozen=True)
class Provenance:
    """Actor, site, code, attempt number and time, together. Every entry, task and message has one."""

    actor: Actor
    site: Site
    code: Code
    at: datetime
    attempt: int | None = None
    on_behalf_of: str | None = None

    def to_json(self) -> dict[str, Any]:
        # by hand, not dataclasses.asdict: it deep-copies, and this runs for every entry written
        s, c = self.site, self.code
        data: dict[str, Any] = {
            "actor": {"kind": self.actor.kind, "id": self.actor.id},
            "site": {"host": s.host, "pid": s.pid, "worker": s.worker, "instance": s.instance, "region": s.region,
                     "epoch": s.epoch},
            "code": {"workflow": c.workflow, "version": c.version, "frame_kind": c.frame_kind,
                     "frame_name": c.frame_name, "ref": c.ref},
            "at": self.at.isoformat(),
        }
        if self.attempt is not None:
            data["attempt"] = self.attempt
        if self.on_behalf_of is not None:
            data["on_behalf_of"] = self.on_behalf_of
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Provenance:
        return cls(
            actor=_part(Actor, data["actor"]),
            site=_part(Site, data.get("site", {})),
            code=_part(Code, data.get("code", {})),
            at=datetime.fromisoformat(data["at"]),
            attempt=data.get("attempt"),
            on_behalf_of=data.get("on_behalf_of"),
        )

    def with_(self, **changes: Any) -> Provenance:
        return replace(self, **changes)


_PARTS: dict[tuple[Any, ...], Any] = {}
"""The actors, sites and codes read back, by their fields: every entry, task and message read
has a provenance, and few distinct parts recur (one site per process, one code per frame), so
one frozen instance serves them all (built anew, a read of a task spent half its time here)."""
_PARTS_KEPT = 4096


def _part(cls: Any, data: dict[str, Any]) -> Any:
    """``cls(**data)``: the instance read before with the same fields, else a new one."""
    try:
        key = (cls, *data.items())
        found = _PARTS.get(key)
    except TypeError:  # a field that is not hashable (not written by this code): built each time
        return cls(**data)
    if found is None:
        found = cls(**data)
        if len(_PARTS) >= _PARTS_KEPT:
            _PARTS.clear()
        _PARTS[key] = found
    return found


_ACTOR_KINDS = ("worker", "human", "system", "schedule")


@dataclass(frozen=True)
class Principal:
    """Who asks for a change, and within which application: accepted wherever ``by=`` is.

    ``kind`` is the kind of actor the journal records (``human`` for a person, whose id is the
    email address; ``system`` for a service or an API key; ``worker``; ``schedule``); ``roles``
    grant capabilities to the layers that authorize (the HTTP service, the MCP server);
    ``application`` is the tenant: a principal of an application reads and changes only the
    executions of that application. ``None`` is single-tenant use (a local database).

    ``credential`` names what the principal authenticated with (``apikey:17``), so that a write
    carried out later (an approved one) checks it is still valid and takes its roles as they are
    then. An ``assistant`` principal (an API key made for an assistant) may read, but each of its
    writes takes effect only under a person's ``approval`` (the approval's eid): until then it
    ``waits_for_approval``.

    ``trusted`` marks the application's own code in this process (and the engine's own actors):
    its changes are not checked against roles. Every other principal is checked, and one without
    roles holds no capability: the checks fail closed. A ``by=`` string is the application's own
    code (``principal_for`` makes it a trusted principal); so is ``SYSTEM``.
    """

    id: str
    kind: str = "human"
    roles: tuple[str, ...] = ()
    application: str | None = None
    credential: str | None = None
    assistant: bool = False
    approval: str | None = None
    trusted: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValueError(f"Principal.id must be a non-empty string, got {self.id!r}")
        if isinstance(self.roles, str):
            raise ValueError(f"Principal.roles is a sequence of role names, got the string {self.roles!r}")
        object.__setattr__(self, "roles", tuple(self.roles))

    @property
    def waits_for_approval(self) -> bool:
        """An assistant's principal with no approval: its writes are refused until a person
        approves them."""
        return self.assistant and self.approval is None

    @property
    def actor(self) -> Actor:
        kind = self.kind if self.kind in _ACTOR_KINDS else "system"
        return Actor(kind, self.id)  # type: ignore[arg-type]


def actor_for(by: str | Principal | None, default: Actor) -> Actor:
    """The actor for a ``by=`` argument: a Principal's own, an email address is a human,
    ``kind:id`` is explicit, any other string a system."""
    if by is None:
        return default
    if isinstance(by, Principal):
        return by.actor
    kind, sep, ident = by.partition(":")
    if sep and kind in _ACTOR_KINDS:
        return Actor(kind, ident)  # type: ignore[arg-type]
    return Actor("human" if "@" in by else "system", by)


SYSTEM = Principal("application", "system", trusted=True)
"""The application's own code, named: a change it asks for is not checked against roles."""


def principal_for(by: str | Principal | None, default: Actor, application: str | None = None) -> Principal:
    """The principal of a ``by=`` argument. A string (or none: ``default``) names an actor of the
    application's own code in the application given: a trusted principal."""
    if isinstance(by, Principal):
        return by
    actor = actor_for(by, default)
    return Principal(actor.id, actor.kind, (), application, trusted=True)
