"""Dashboard sessions: a login with a dashboard user (``flowli users create``) makes a session,
kept as a store item under the digest of its token (the cookie holds the token, HttpOnly,
SameSite=Lax); each session has its own CSRF token, which every form sends back. A form before
login (the login form itself) carries a token from a cookie of its own (double submit)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from flowli.engine import Engine
from flowli.pipelines import Applications

SESSION_COOKIE = "flowli_session"
LOGIN_CSRF_COOKIE = "flowli_login_csrf"
SESSION_KIND = "dashboard-session"
SESSION_TTL = timedelta(hours=12)
FAILED_LOGIN_DELAY = 0.5
"""Seconds a wrong password waits before its answer (a guess costs time)."""


@dataclass(frozen=True)
class User:
    """Who is logged in: their email, role and the applications they may see."""

    email: str
    role: str
    applications: tuple[str, ...]
    csrf: str

    @property
    def can_act(self) -> bool:
        return self.role in ("operator", "admin")


class Sessions:
    def __init__(self, engine: Engine):
        self.engine = engine
        self.apps = Applications(engine)

    async def login(self, email: Any, password: Any) -> str | None:
        """A new session's token, or None (after a delay) for a wrong email or password."""
        user = await self.apps.verify_user(email, password)
        if user is None:
            await asyncio.sleep(FAILED_LOGIN_DELAY)
            return None
        token = secrets.token_urlsafe(32)
        body = {"email": user["email"], "userId": user["id"], "csrf": secrets.token_urlsafe(24),
                "expires": time.time() + SESSION_TTL.total_seconds()}
        await self.engine.items.put(SESSION_KIND, "", digest(token), body, self.engine.clock.now())
        return token

    async def user(self, token: str | None) -> User | None:
        """The user of a live session, or None (no session, an unknown or expired one, one whose
        user was disabled or deleted since: it ends at once). The role and the applications are
        the user's as they are now: an admin sees every application, another user those assigned
        to them (none until given one)."""
        if not token:
            return None
        item = await self.engine.items.find(SESSION_KIND, digest(token), "")
        if item is None or item.body.get("expires", 0) < time.time():
            return None
        b = item.body
        user = await self.apps.user(b["email"])
        if user is None or user["id"] != b.get("userId"):  # disabled, deleted (or made again: another user)
            await self.engine.items.delete(SESSION_KIND, item.id)
            return None
        if user["role"] == "admin":
            applications = tuple(a["name"] for a in await self.apps.list())
        else:
            applications = tuple(user["applications"])
        return User(user["email"], user["role"], applications, b["csrf"])

    async def logout(self, token: str | None) -> None:
        if token:
            item = await self.engine.items.find(SESSION_KIND, digest(token), "")
            if item is not None:
                await self.engine.items.delete(SESSION_KIND, item.id)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def same(a: Any, b: Any) -> bool:
    """Whether two CSRF tokens are the same (both present), in constant time."""
    return isinstance(a, str) and isinstance(b, str) and bool(a) and hmac.compare_digest(a, b)
