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
            actor=Actor(**data["actor"]),
            site=Site(**data.get("site", {})),
            code=Code(**data.get("code", {})),
            at=datetime.fromisoformat(data["at"]),
            attempt=data.get("attempt"),
            on_behalf_of=data.get("on_behalf_of"),
        )

    def with_(self, **changes: Any) -> Provenance:
        return replace(self, **changes)


def actor_for(by: str | None, default: Actor) -> Actor:
    """The actor for a ``by=`` argument: an email address is a human, ``kind:id`` is explicit."""
    if by is None:
        return default
    kind, sep, ident = by.partition(":")
    if sep and kind in ("worker", "human", "system", "schedule"):
        return Actor(kind, ident)  # type: ignore[arg-type]
    return Actor("human" if "@" in by else "system", by)
