"""Who is asking, and may they: API tokens (`Authorization: Bearer tp_...`), web sessions (a cookie, with a CSRF
token for every change), anonymous reading when the operator allows it; and a rate limit per token.

Roles: `admin` (everything, deletes any plan, reads the audit log), `user` (creates and reads plans, deletes
its own), `read-only` (reads). Anonymous requests read only, and only with TRAINPLAN_ANONYMOUS_READ on.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from fastapi import Request

from app.planner.errors import FieldError
from app.settings import Settings
from app.store import AccountStore, Role

SESSION_COOKIE = "trainplan_session"
LOGIN_CSRF_COOKIE = "trainplan_login_csrf"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})  # what never changes anything (no CSRF token, no origin check)
Access = Literal["read", "write", "admin"]
_LEVELS: dict[str, tuple[Access, ...]] = {
    "admin": ("read", "write", "admin"),
    "user": ("read", "write"),
    "read-only": ("read",),
    "anonymous": ("read",),
}


class AuthError(Exception):
    """401 (who are you?), 403 (not allowed) or 429 (too many requests), naming the field at fault."""

    def __init__(
        self, status_code: int, message: str, field: str = "authorization", retry_after_s: int | None = None
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.error = FieldError(field, message)
        self.retry_after_s = retry_after_s


class LoginRequired(Exception):
    """A page for people was asked for without a login: the answer is a redirect to /login."""

    def __init__(self, next_url: str) -> None:
        super().__init__(next_url)
        self.next_url = next_url


@dataclass(frozen=True)
class Principal:
    name: str  # the user's name, or "anonymous"
    role: Role | Literal["anonymous"]
    via: Literal["token", "session", "anonymous"]
    limit_key: str  # what the rate limit counts: the token, the session's user, or the client address
    session_secret: str | None = None

    def may(self, access: Access) -> bool:
        return access in _LEVELS[self.role]

    @property
    def csrf_token(self) -> str:
        """The form's CSRF token: derived from the session secret (HttpOnly: another site cannot read it)."""
        return csrf_for(self.session_secret or "")


def csrf_for(secret: str) -> str:
    return hmac.new(secret.encode(), b"trainplan csrf v1", hashlib.sha256).hexdigest()


def csrf_ok(principal: Principal, sent: str | None) -> bool:
    """Token clients need no CSRF token; a session's change must carry the token of that session."""
    if principal.via != "session":
        return True
    return sent is not None and hmac.compare_digest(sent, principal.csrf_token)


def client_address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if header is None:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthError(
            401, "send an API token as 'Authorization: Bearer tp_...' (create one with `trainplan tokens create USER`)"
        )
    return token.strip()


def authenticate(request: Request, accounts: AccountStore) -> Principal:
    """The token's or the session's user, or anonymous. A token that does not verify is a 401, never anonymous."""
    token = _bearer(request)
    if token is not None:
        found = accounts.token_user(token)
        if found is None:
            raise AuthError(401, "the API token is not valid (unknown, revoked, or its user is disabled)")
        user, token_id = found
        return Principal(user.name, user.role, "token", f"token:{token_id}")
    secret = request.cookies.get(SESSION_COOKIE)
    if secret:
        session_user = accounts.session_user(secret)
        if session_user is not None:
            return Principal(session_user.name, session_user.role, "session", f"user:{session_user.name}", secret)
    return Principal("anonymous", "anonymous", "anonymous", f"address:{client_address(request)}")


def require(principal: Principal, access: Access, settings: Settings) -> Principal:
    if principal.via == "anonymous" and not (access == "read" and settings.anonymous_read):
        raise AuthError(401, "this needs an account: send 'Authorization: Bearer tp_...' or log in at /login")
    if not principal.may(access):
        wanted = {"read": "an account", "write": "the user or admin role", "admin": "the admin role"}[access]
        raise AuthError(403, f"{principal.name} has the {principal.role} role; this needs {wanted}")
    return principal


class RateLimiter:
    """A token bucket per key (per server process): `burst` requests at once, refilled at `per_minute`."""

    MAX_KEYS = 100_000

    def __init__(self, per_minute: int, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = per_minute / 60.0
        self.burst = float(burst)
        self.clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def check(self, key: str, spend: bool = True) -> None:
        """Refuse (429) when `key`'s bucket is empty; else take one request from it, or (spend False) only look:
        the login form spends on failed attempts only (`spend`), so real logins behind one proxy address do not
        lock each other out (QA 2026-12-07)."""
        if self.rate <= 0:
            return
        tokens = self._take(key, 1.0 if spend else 0.0)
        if tokens < 1.0:
            wait = math.ceil((1.0 - tokens) / self.rate)
            raise AuthError(
                429,
                f"rate limit: {self.burst:g} requests at once, then {60 * self.rate:g} per minute "
                f"for {key.split(':', 1)[0]}; retry in {wait} s",
                field="",
                retry_after_s=wait,
            )

    def spend(self, key: str) -> None:
        """Take one request from `key`'s bucket without refusing (a failed login, after `check(key, spend=False)`)."""
        if self.rate > 0:
            self._take(key, 1.0, floor=True)

    def _take(self, key: str, cost: float, floor: bool = False) -> float:
        """The bucket's tokens once refilled; `cost` taken from it when there is a whole one (or, `floor`, always,
        down to empty)."""
        now = self.clock()
        with self._lock:
            tokens, last = self._buckets.pop(key, (self.burst, now))
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            left = max(0.0, tokens - cost) if floor else (tokens - cost if tokens >= 1.0 else tokens)
            self._buckets[key] = (left, now)
            while len(self._buckets) > self.MAX_KEYS:
                self._buckets.popitem(last=False)
        return tokens
