"""Applications, API keys, dashboard users and who calls (``Access``), kept as store items.
Keys are random and shown once; the store holds their SHA-256 digest (a random 256-bit key needs no slow hash: there is
nothing to guess), so a stolen database yields no usable key."""

from __future__ import annotations

import asyncio
import builtins
import hashlib
import hmac
import secrets
import weakref
from dataclasses import dataclass, field
from typing import Any

from flowli.catalog import ApprovalNeeded, Roles, require_approval, roles_of
from flowli.domain import BUILT_IN_ROLES, DEFAULT_APPLICATION, EVERY_CAPABILITY, READ_RUNS, Principal, lacking
from flowli.engine import Engine

from ._errors import Conflict, Forbidden, NotFound, ServiceError, Unauthorized

ROLES = tuple(BUILT_IN_ROLES)
"""The built-in roles' names; an application may declare more (``Registry.role``)."""
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
    assistant: bool = False
    """A key made for an assistant (``flowli keys create APP --assistant``): its writes wait for a
    person's approval, whatever the route (``require_approval``)."""
    roles: Roles = field(default_factory=Roles, compare=False, repr=False)
    """The engine's roles (``roles_of``), which know its custom roles; by default, the built-in
    roles alone."""

    @property
    def principal(self) -> Principal:
        """Who acts, for the engine: the key's name (or the user's email), with its role, in its
        application, and the key it authenticated with."""
        credential = f"{KEY}:{self.key_id}" if self.key_id is not None else None
        return Principal(self.actor, self.actor_kind, (self.role,), self.application, credential=credential,
                         assistant=self.assistant)

    def allows(self, capability: str) -> bool:
        """Whether this caller's role grants ``capability`` (a role nobody declared grants nothing)."""
        return self.roles.role_allows(self.role, capability)

    def require(self, capability: str) -> None:
        """Refuse (Forbidden, naming the capability) a caller whose role lacks ``capability``; then
        an assistant's write, which waits for a person (the one gate of the catalog's RBAC)."""
        if not self.allows(capability):
            who = "the key" if self.actor_kind == "service" else "the user"
            raise Forbidden(f"{who} {self.actor!r} has role {self.role}, which lacks {lacking(capability)[1]}"
                            " this needs")
        if capability != READ_RUNS:
            try:
                require_approval(self.principal, capability, "write")
            except ApprovalNeeded as exc:
                raise Forbidden(str(exc)) from None


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


_BUILT: weakref.WeakKeyDictionary[Engine, Applications] = weakref.WeakKeyDictionary()


class Applications:
    """Applications, their API keys and settings, dashboard users; authentication. One per engine
    (``of``): the service, MCP's approvals and the dashboard share it."""

    @classmethod
    def of(cls, engine: Engine) -> Applications:
        """The applications of ``engine``, built at the first call and shared after."""
        found = _BUILT.get(engine)
        if found is None:
            found = _BUILT[engine] = cls(engine)
        return found

    def __init__(self, engine: Engine):
        self.engine = engine
        self.roles = roles_of(engine)
        """The engine's roles: the built-in ones and those its registry declares."""

    def sees_all(self, role: str) -> bool:
        """Whether a user with ``role`` sees every application (a role that holds every capability)."""
        return self.roles.role_allows(role, EVERY_CAPABILITY)

    def capabilities(self, role: str) -> frozenset[str]:
        """What ``role`` grants (a role the engine does not know grants nothing)."""
        return self.roles.capabilities([role])

    def _role(self, role: Any) -> str:
        """``role`` when the engine knows it; ServiceError naming the roles it knows."""
        if not isinstance(role, str) or not self.roles.knows(role):
            raise ServiceError(f"role must be one of {', '.join(self.roles.names())}, got {role!r}"
                               " (an application declares its own with Registry.role)")
        return role

    @property
    def now(self) -> Any:
        return self.engine.clock.now()

    async def create(self, name: str) -> tuple[dict[str, Any], str]:
        if not isinstance(name, str) or not name.strip() or any(c in name for c in "/:\t\r\n"):
            raise ServiceError(f"application name {name!r} must be a nonempty name without / : or line breaks")
        item, created = await self.engine.items.put(APPLICATION, "", name, {"name": name}, self.now)
        if not created:
            raise Conflict(f"application {name!r} exists already")
        key = await self.create_key(name, "default", "admin")
        return {"id": item.id, "name": name}, key["apiKey"]

    async def get(self, name: str) -> dict[str, Any]:
        item = await self.engine.items.find(APPLICATION, name, "")
        if item is None:
            if name == DEFAULT_APPLICATION:  # the runs started without an application: there always
                return {"id": 0, "name": name}
            raise NotFound(f"no application {name!r}")
        return {"id": item.id, "name": name}

    SETTINGS = {"mcpApproval": ("required", "none")}
    """The settings of an application and the values each takes."""

    async def settings(self, name: str) -> dict[str, Any]:
        """The settings of an application (``mcpApproval``: whether an assistant's writes over MCP
        wait for a person's approval)."""
        item = await self.engine.items.find(APPLICATION, name, "")
        if item is None:
            if name == DEFAULT_APPLICATION:
                return {"mcpApproval": "none"}
            raise NotFound(f"no application {name!r}")
        return {"mcpApproval": item.body.get("mcpApproval", "none")}

    async def configure(self, name: str, **values: Any) -> dict[str, Any]:
        item = await self.engine.items.find(APPLICATION, name, "")
        if item is None:
            raise NotFound(f"no application {name!r}")
        for key, value in values.items():
            allowed = self.SETTINGS.get(key)
            if allowed is None or value not in allowed:
                raise ServiceError(f"{key} must be one of {', '.join(allowed or ())}, got {value!r}")
        await self.engine.items.update(APPLICATION, item.id, {**item.body, **values}, self.now)
        return await self.settings(name)

    async def list(self) -> builtins.list[dict[str, Any]]:
        """The applications, and last the ``default`` one (of the runs started without an
        application) when it was never created as one."""
        listed = [{"id": i.id, "name": i.key} for i in await self.engine.items.list(APPLICATION, "")]
        if not any(a["name"] == DEFAULT_APPLICATION for a in listed):
            listed.append({"id": 0, "name": DEFAULT_APPLICATION})
        return listed

    async def create_key(self, application: str, name: str | None = None, role: str = "operator",
                         assistant: bool = False) -> dict[str, Any]:
        """A new key (its secret shown once). ``assistant``: a key for an AI assistant, whose
        writes wait for a person's approval on every route."""
        self._role(role)
        app = await self.get(application)
        secret = f"flk_{secrets.token_urlsafe(32)}"
        name = name or f"key-{secret[4:10]}"
        body = {"name": name, "role": role, "applicationId": app["id"], "disabled": False, "prefix": secret[:8],
                "assistant": bool(assistant)}
        item, _ = await self.engine.items.put(KEY, application, digest(secret), body, self.now)
        return {"id": item.id, "name": name, "role": role, "assistant": bool(assistant), "apiKey": secret}

    async def keys(self, application: str) -> builtins.list[dict[str, Any]]:
        await self.get(application)
        return [{"id": i.id, "name": i.body["name"], "role": i.body["role"], "disabled": i.body["disabled"],
                 "assistant": bool(i.body.get("assistant")), "prefix": i.body["prefix"],
                 "createdAt": i.at.isoformat()}
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
        found = await self.engine.items.find(KEY, digest(secret))
        return _access(found, "the API key is unknown or disabled", self.roles)

    async def key_access(self, key_id: Any) -> Access:
        """The access of the key ``key_id`` as it is now (its role, whether it is an assistant's);
        Unauthorized once it is disabled or gone. What a worker session and an approval check
        before they act for the key."""
        item = await self.engine.items.get(KEY, key_id) if isinstance(key_id, int) else None
        return _access(item, f"the API key {key_id} is disabled or gone", self.roles)

    async def credential_access(self, credential: str) -> Access:
        """The access of a principal's ``credential`` (``apikey:ID``) as it is now; Unauthorized
        once that key is disabled or gone."""
        kind, _, number = credential.partition(":")
        if kind != KEY or not number.isdecimal():
            raise Unauthorized(f"the credential {credential!r} is not an API key")
        return await self.key_access(int(number))

    async def create_user(self, email: str, password: str, role: str, applications: builtins.list[str]) -> dict[str, Any]:
        if not isinstance(email, str) or "@" not in email:
            raise ServiceError(f"user email {email!r} is not an email address")
        self._role(role)
        if not password:
            raise ServiceError("the password is empty")
        for a in applications:
            await self.get(a)
        body = {"email": email, "role": role, "applications": applications, **self._password(password)}
        item, created = await self.engine.items.put(USER, "", email.lower(), body, self.now)
        if not created:
            raise Conflict(f"user {email!r} exists already")
        return {"id": item.id, "email": email, "role": role, "applications": applications}

    def _password(self, password: str) -> dict[str, Any]:
        """What a user's record keeps of a password: its scrypt hash with a salt of its own, and
        when it was set (a session opened before a change ends: see ``passwordSetAt``)."""
        salt = secrets.token_hex(16)
        hashed = hashlib.scrypt(password.encode(), salt=bytes.fromhex(salt), n=2**14, r=8, p=1).hex()
        return {"salt": salt, "password": hashed, "passwordSetAt": self.now.timestamp()}

    async def set_password(self, email: str, password: str) -> dict[str, Any]:
        """Give a user a new password (a reset by an administrator of the installation): the old
        one is refused from now on, and the sessions opened with it end at once."""
        if not password:
            raise ServiceError("the password is empty")
        item = await self._user_item(email)
        await self.engine.items.update(USER, item.id, {**item.body, **self._password(password)}, self.now)
        return _user(await self._user_item(email))

    async def users(self) -> builtins.list[dict[str, Any]]:
        """The dashboard users (never their password's hash)."""
        return [_user(i) for i in await self.engine.items.list(USER, "")]

    async def user(self, email: Any) -> dict[str, Any] | None:
        """The user ``email`` as it is now, or None (unknown, or disabled)."""
        item = await self.engine.items.find(USER, email.strip().lower(), "") if isinstance(email, str) else None
        if item is None or item.body.get("disabled"):
            return None
        return _user(item)

    async def disable_user(self, email: str) -> dict[str, Any]:
        """Disable a user: their login is refused, and their dashboard sessions end at once."""
        item = await self._user_item(email)
        await self.engine.items.update(USER, item.id, {**item.body, "disabled": True}, self.now)
        return {**_user(item), "disabled": True}

    async def delete_user(self, email: str) -> dict[str, Any]:
        """Delete a user: as a disabled one, and their email may be used again."""
        item = await self._user_item(email)
        await self.engine.items.delete(USER, item.id)
        return _user(item)

    async def grant_user(self, email: str, applications: builtins.list[str]) -> dict[str, Any]:
        """Give a user more applications to see (at once, in their open sessions too)."""
        item = await self._user_item(email)
        for a in applications:
            await self.get(a)
        merged = list(item.body["applications"]) + [a for a in applications if a not in item.body["applications"]]
        await self.engine.items.update(USER, item.id, {**item.body, "applications": merged}, self.now)
        return {**_user(item), "applications": merged}

    async def _user_item(self, email: Any) -> Any:
        item = await self.engine.items.find(USER, email.strip().lower(), "") if isinstance(email, str) else None
        if item is None:
            raise NotFound(f"no user {email!r}")
        return item

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
        if item.body.get("disabled"):
            return None
        return _user(item)


def _access(item: Any, refusal: str, roles: Roles) -> Access:
    """The access of a key's item; Unauthorized (``refusal``) for none or a disabled one."""
    if item is None or item.body.get("disabled"):
        raise Unauthorized(refusal)
    return Access(item.application, item.body["applicationId"], item.body["role"], item.body["name"], item.id,
                  assistant=bool(item.body.get("assistant")), roles=roles)


def _user(item: Any) -> dict[str, Any]:
    return {"id": item.id, "email": item.body["email"], "role": item.body["role"],
            "applications": list(item.body["applications"]),
            "disabled": bool(item.body.get("disabled")), "passwordSetAt": item.body.get("passwordSetAt", 0)}
