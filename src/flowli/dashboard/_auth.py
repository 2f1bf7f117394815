"""Dashboard sessions: a login with a dashboard user (``flowli users create``) makes a session,
kept as a store item under the digest of its token (the cookie holds the token, HttpOnly,
SameSite=Lax, Secure over HTTPS); each session has its own CSRF token, which every form sends
back. A form before login (the login form itself) carries a token from a cookie of its own
(double submit).

Logins are limited: a password hash costs CPU (scrypt, tens of milliseconds and 16 MiB), so a
burst of wrong logins must slow neither the service's other requests nor the other users. Each
login counts against its account and its client address (``LOGIN_LIMITS``); past a limit it is
refused (429, with the seconds until the next one counts) before anything is hashed, and a
successful login does not count. The hashes run off the event loop, ``HASHES_AT_ONCE`` at a
time: the others wait their turn without using a core."""

from __future__ import annotations

import asyncio
import collections
import hashlib
import hmac
import math
import os
import secrets
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from flowli.access import Applications
from flowli.domain import DECIDE_RUNS, EVERY_CAPABILITY, OPERATE_RUNS, FlowliError, Refusal, grants
from flowli.engine import Engine

SESSION_COOKIE = "flowli_session"
LOGIN_CSRF_COOKIE = "flowli_login_csrf"
SESSION_KIND = "dashboard-session"
SESSION_TTL = timedelta(hours=12)
FAILED_LOGIN_DELAY = 0.5
"""Seconds a wrong password waits before its answer (a guess costs time)."""
LOGIN_WINDOW = 300.0
"""The window of the login limits, in seconds (five minutes, sliding)."""
LOGIN_LIMITS = {"account": 10, "address": 30}
"""The logins that may count in any window: per account (email), per client address (the peer,
or the address a proxy on this machine relays in X-Forwarded-For)."""
HASHES_AT_ONCE = max(1, (os.cpu_count() or 2) // 2)
"""Password hashes running at once in this process: half the cores, one at least."""
_TRACKED = 100_000
"""The accounts and addresses the limits remember at most (the oldest are forgotten first)."""


class TooManyLogins(FlowliError):  # noqa: N818 - a refusal, as the pages name it
    """A login past a limit: ``retry_after`` seconds until one more counts."""

    refusal = Refusal.LIMITED

    def __init__(self, what: str, retry_after: int):
        super().__init__(f"Too many logins for this {what}: try again in {retry_after} s.")
        self.what, self.retry_after = what, retry_after


class Limits:
    """Sliding windows of login attempts, by account and by client address (in this process)."""

    def __init__(self, limits: dict[str, int] | None = None, window: float = LOGIN_WINDOW):
        self.limits = dict(limits or LOGIN_LIMITS)
        self.window = window
        self.seen: dict[tuple[str, str], collections.deque[float]] = {}

    def take(self, account: str, address: str) -> list[tuple[str, str]]:
        """Count one attempt against ``account`` and ``address``, or refuse it (TooManyLogins,
        counting nothing); the keys it counted against, to give back on a success."""
        now = time.monotonic()
        keys = [("account", account), ("address", address)]
        for key in keys:
            times = self._times(key, now)
            if times is not None and len(times) >= self.limits[key[0]]:
                raise TooManyLogins(key[0], max(1, math.ceil(times[0] + self.window - now)))
        for key in keys:
            self.seen.setdefault(key, collections.deque()).append(now)
        if len(self.seen) > _TRACKED:
            self._forget(now)
        return keys

    def give_back(self, keys: list[tuple[str, str]]) -> None:
        """A successful login: its attempt does not count."""
        for key in keys:
            times = self.seen.get(key)
            if times:
                times.pop()

    def _times(self, key: tuple[str, str], now: float) -> collections.deque[float] | None:
        times = self.seen.get(key)
        while times and times[0] <= now - self.window:
            times.popleft()
        return times

    def _forget(self, now: float) -> None:
        for key in [k for k, t in self.seen.items() if not t or t[-1] <= now - self.window]:
            del self.seen[key]
        while len(self.seen) > _TRACKED:
            del self.seen[next(iter(self.seen))]


@dataclass(frozen=True)
class User:
    """Who is logged in: their email, role and the applications they may see."""

    email: str
    role: str
    applications: tuple[str, ...]
    csrf: str
    capabilities: frozenset[str] = frozenset()
    """What their role grants: the pages show them the actions it allows."""

    def holds(self, capability: str) -> bool:
        return grants(self.capabilities, capability)

    @property
    def can_act(self) -> bool:
        """Whether they act on runs (``runs:operate``): cancel, retry, pause, rerun, terminate..."""
        return self.holds(OPERATE_RUNS)

    @property
    def can_decide(self) -> bool:
        """Whether they answer a decision a run waits for (``runs:decide``): approve, reject, resolve."""
        return self.holds(DECIDE_RUNS)

    @property
    def sees_all(self) -> bool:
        """Whether their role holds every capability: every application, the engine's own rows."""
        return EVERY_CAPABILITY in self.capabilities


class Sessions:
    def __init__(self, engine: Engine, apps: Applications):
        self.engine = engine
        self.apps = apps
        self.limits = Limits()
        self.hashing = asyncio.Semaphore(HASHES_AT_ONCE)

    async def login(self, email: Any, password: Any, address: str = "") -> str | None:
        """A new session's token, or None (after a delay) for a wrong email or password;
        TooManyLogins past a limit of the account or of the client ``address``."""
        account = email.strip().lower() if isinstance(email, str) else ""
        counted = self.limits.take(account, address)
        async with self.hashing:
            user = await self.apps.verify_user(email, password)
        if user is None:
            await asyncio.sleep(FAILED_LOGIN_DELAY)
            return None
        self.limits.give_back(counted)
        token = secrets.token_urlsafe(32)
        body = {"email": user["email"], "userId": user["id"], "csrf": secrets.token_urlsafe(24),
                "expires": time.time() + SESSION_TTL.total_seconds(), "passwordSetAt": user["passwordSetAt"]}
        await self.engine.items.put(SESSION_KIND, "", digest(token), body, self.engine.clock.now())
        return token

    async def user(self, token: str | None) -> User | None:
        """The user of a live session, or None (no session, an unknown or expired one, one whose
        user was disabled or deleted since, or given a new password: it ends at once). The role and the applications are
        the user's as they are now: an admin sees every application, another user those assigned
        to them (none until given one)."""
        if not token:
            return None
        item = await self.engine.items.find(SESSION_KIND, digest(token), "")
        if item is None or item.body.get("expires", 0) < time.time():
            return None
        b = item.body
        user = await self.apps.user(b["email"])
        if user is None or user["id"] != b.get("userId") or user["passwordSetAt"] != b.get("passwordSetAt", 0):
            # disabled, deleted (or made again: another user), or its password changed since
            await self.engine.items.delete(SESSION_KIND, item.id)
            return None
        capabilities = self.apps.capabilities(user["role"])
        if EVERY_CAPABILITY in capabilities:
            applications = tuple(a["name"] for a in await self.apps.list())
        else:
            applications = tuple(user["applications"])
        return User(user["email"], user["role"], applications, b["csrf"], capabilities)

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
