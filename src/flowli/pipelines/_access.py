"""Applications, API keys and worker sessions, kept as store items. Keys are random and shown
once; the store holds their SHA-256 digest (a random 256-bit key needs no slow hash: there is
nothing to guess), so a stolen database yields no usable key."""

from __future__ import annotations

import asyncio
import builtins
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any

from flowli.domain import Principal
from flowli.engine import Engine

from ._errors import Conflict, Forbidden, NotFound, PipelineInputError, Unauthorized

ROLES = ("admin", "operator", "viewer")
APPLICATION, KEY, USER, SESSION = "application", "apikey", "user", "worker-session"


def key_of(headers: Any) -> str | None:
    """The API key a request carries: ``X-API-Key``, else ``Authorization: Bearer <key>``
    (``headers`` is a mapping with lower-case names, or a case-insensitive one)."""
    key = headers.get("x-api-key")
    auth = headers.get("authorization", "")
    if not key and auth.lower().startswith("bearer "):
        key = auth[7:].strip()
    return str(key) if key else None


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class Access:
    """Who calls: an application's key (or a worker session of one), with its role."""

    application: str
    application_id: int
    role: str
    actor: str
    """The key's name (or the worker's), recorded as the actor of every action."""
    key_id: int | None = None
    actor_kind: str = "service"
    """``human`` for a dashboard user (the actor is their email)."""

    @property
    def principal(self) -> Principal:
        """Who acts, for the engine: the key's name (or the user's email), with its role, in its
        application."""
        return Principal(self.actor, self.actor_kind, (self.role,), self.application)

    def require(self, role: str) -> None:
        rank = {"viewer": 0, "operator": 1, "admin": 2}
        if rank[self.role] < rank[role]:
            who = "the key" if self.actor_kind == "service" else "the user"
            raise Forbidden(f"{who} {self.actor!r} has role {self.role}, which may not do this ({role} or admin needed)")


MAX_ID = 2**63 - 1
"""The largest id of an item (the store's ids are 64-bit)."""


def item_id(number: Any) -> int | None:
    """The id ``number`` names (an int, or a string of decimal digits), or None: not a number, or
    outside 1 to MAX_ID, so no item has it."""
    if isinstance(number, bool):
        return None
    if isinstance(number, str):
        number = number.strip()
        if not (number.isascii() and number.isdigit()):
            return None
    try:
        n = int(number)
    except (TypeError, ValueError):
        return None
    return n if 1 <= n <= MAX_ID else None


async def owned(engine: Engine, access: Access, kind: str, number: Any, what: str) -> Any:
    """The item ``number`` of ``kind`` in the caller's application; NotFound ("no {what} N") for
    an id that is not a number, does not exist, or belongs to another application."""
    n = item_id(number)
    if n is None:
        raise NotFound(f"no {what} {number!r}")
    item = await engine.items.get(kind, n)
    if item is None or item.application != access.application:
        raise NotFound(f"no {what} {n}")
    return item


class Applications:
    def __init__(self, engine: Engine):
        self.engine = engine

    @property
    def now(self) -> Any:
        return self.engine.clock.now()

    async def create(self, name: str) -> tuple[dict[str, Any], str]:
        if not isinstance(name, str) or not name.strip() or any(c in name for c in "/:\t\r\n"):
            raise PipelineInputError(f"application name {name!r} must be a nonempty name without / : or line breaks")
        item, created = await self.engine.items.put(APPLICATION, "", name, {"name": name}, self.now)
        if not created:
            raise Conflict(f"application {name!r} exists already")
        key = await self.create_key(name, "default", "admin")
        return {"id": item.id, "name": name}, key["apiKey"]

    async def get(self, name: str) -> dict[str, Any]:
        item = await self.engine.items.find(APPLICATION, name, "")
        if item is None:
            raise NotFound(f"no application {name!r}")
        return {"id": item.id, "name": name}

    SETTINGS = {"mcpApproval": ("required", "none")}
    """The settings of an application and the values each takes."""

    async def settings(self, name: str) -> dict[str, Any]:
        """The settings of an application (``mcpApproval``: whether an assistant's writes over MCP
        wait for a person's approval)."""
        item = await self.engine.items.find(APPLICATION, name, "")
        if item is None:
            raise NotFound(f"no application {name!r}")
        return {"mcpApproval": item.body.get("mcpApproval", "none")}

    async def configure(self, name: str, **values: Any) -> dict[str, Any]:
        item = await self.engine.items.find(APPLICATION, name, "")
        if item is None:
            raise NotFound(f"no application {name!r}")
        for key, value in values.items():
            allowed = self.SETTINGS.get(key)
            if allowed is None or value not in allowed:
                raise PipelineInputError(f"{key} must be one of {', '.join(allowed or ())}, got {value!r}")
        await self.engine.items.update(APPLICATION, item.id, {**item.body, **values}, self.now)
        return await self.settings(name)

    async def list(self) -> builtins.list[dict[str, Any]]:
        return [{"id": i.id, "name": i.key} for i in await self.engine.items.list(APPLICATION, "")]

    async def create_key(self, application: str, name: str | None = None, role: str = "operator") -> dict[str, Any]:
        if role not in ROLES:
            raise PipelineInputError(f"role must be admin, operator or viewer, got {role!r}")
        app = await self.get(application)
        secret = f"flk_{secrets.token_urlsafe(32)}"
        name = name or f"key-{secret[4:10]}"
        body = {"name": name, "role": role, "applicationId": app["id"], "disabled": False, "prefix": secret[:8]}
        item, _ = await self.engine.items.put(KEY, application, digest(secret), body, self.now)
        return {"id": item.id, "name": name, "role": role, "apiKey": secret}

    async def keys(self, application: str) -> builtins.list[dict[str, Any]]:
        await self.get(application)
        return [{"id": i.id, "name": i.body["name"], "role": i.body["role"], "disabled": i.body["disabled"],
                 "prefix": i.body["prefix"], "createdAt": i.at.isoformat()}
                for i in await self.engine.items.list(KEY, application)]

    async def disable_key(self, key_id: int) -> dict[str, Any]:
        item = await self.engine.items.get(KEY, key_id)
        if item is None:
            raise NotFound(f"no API key {key_id}")
        await self.engine.items.update(KEY, item.id, {**item.body, "disabled": True}, self.now)
        return {"id": item.id, "name": item.body["name"], "disabled": True}

    async def authenticate(self, secret: str | None) -> Access:
        if not secret:
            raise Unauthorized("no credential: send X-API-Key (or Authorization: Bearer <key>)")
        item = await self.engine.items.find(KEY, digest(secret))
        if item is None or item.body.get("disabled"):
            raise Unauthorized("the API key is unknown or disabled")
        return Access(item.application, item.body["applicationId"], item.body["role"], item.body["name"], item.id)

    async def create_user(self, email: str, password: str, role: str, applications: builtins.list[str]) -> dict[str, Any]:
        if not isinstance(email, str) or "@" not in email:
            raise PipelineInputError(f"user email {email!r} is not an email address")
        if role not in ROLES:
            raise PipelineInputError(f"role must be admin, operator or viewer, got {role!r}")
        if not password:
            raise PipelineInputError("the password is empty")
        for a in applications:
            await self.get(a)
        salt = secrets.token_hex(16)
        hashed = hashlib.scrypt(password.encode(), salt=bytes.fromhex(salt), n=2**14, r=8, p=1).hex()
        body = {"email": email, "role": role, "applications": applications, "salt": salt, "password": hashed}
        item, created = await self.engine.items.put(USER, "", email.lower(), body, self.now)
        if not created:
            raise Conflict(f"user {email!r} exists already")
        return {"id": item.id, "email": email, "role": role, "applications": applications}

    async def verify_user(self, email: Any, password: Any) -> dict[str, Any] | None:
        """The user whose email and password these are, or None: an unknown email costs the same
        hash as a wrong password, so the answer tells nothing of which users exist."""
        email = email if isinstance(email, str) else ""
        password = password if isinstance(password, str) else ""
        item = await self.engine.items.find(USER, email.strip().lower(), "") if email else None
        salt = bytes.fromhex(item.body["salt"]) if item is not None else b"\0" * 16
        hashed = (await asyncio.to_thread(hashlib.scrypt, password.encode(), salt=salt, n=2**14, r=8, p=1)).hex()
        if item is None or not password or not hmac.compare_digest(hashed, item.body["password"]):
            return None
        return {"email": item.body["email"], "role": item.body["role"], "applications": list(item.body["applications"])}
