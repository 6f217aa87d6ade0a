"""Accounts: users with a role, API tokens (stored hashed), web sessions, and the audit log.

A token reads `tp_<id>_<secret>`: the id finds the row, the SHA-256 of the secret must match. Tokens and
sessions of a disabled user stop working at once (every request looks them up).
"""

from __future__ import annotations

import hmac
import json
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any, Literal

from sqlalchemy import Engine, delete, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.store.hashing import hash_password, sha256_hex, verify_password
from app.store.models import AuditRow, SessionRow, TokenRow, UserRow

Role = Literal["admin", "user", "read-only"]
ROLES: tuple[Role, ...] = ("admin", "user", "read-only")
USER_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
TOKEN = re.compile(r"^tp_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$")


class AccountError(ValueError):
    """A bad account request (unknown user, duplicate name, bad role): the message names the field."""


@dataclass(frozen=True)
class User:
    name: str
    role: Role
    created_at: datetime
    disabled: bool = False
    has_password: bool = False


@dataclass(frozen=True)
class TokenInfo:
    id: str
    user: str
    label: str
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True)
class AuditEvent:
    id: int
    at: datetime
    actor: str
    action: str
    target: str
    detail: dict[str, Any]


def utc(ts: datetime) -> datetime:
    """SQLite hands timestamps back without a zone; they were written in UTC."""
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


def audit_row(actor: str, action: str, target: str, **detail: Any) -> AuditRow:
    """An audit entry, to be added in the transaction that makes the change it records."""
    return AuditRow(
        at=datetime.now(UTC),
        actor=actor,
        action=action,
        target=target,
        detail=json.dumps(detail, sort_keys=True, default=str),
    )


def check_user_name(name: str) -> str:
    if not USER_NAME.fullmatch(name):
        raise AccountError(
            f"name: {name!r} is not a user name (1-64 of a-z, 0-9, '.', '_', '-'; starting with a letter or digit)"
        )
    return name


def check_role(role: str) -> Role:
    if role not in ROLES:
        raise AccountError(f"role: {role!r} is not one of {', '.join(ROLES)}")
    return role  # type: ignore[return-value]


def _user(row: UserRow) -> User:
    return User(row.name, check_role(row.role), utc(row.created_at), row.disabled, row.password_hash is not None)


def _token(row: TokenRow) -> TokenInfo:
    return TokenInfo(row.id, row.user, row.label, utc(row.created_at), utc(row.revoked_at) if row.revoked_at else None)


class AccountStore:
    """Users, tokens, sessions and audit entries on the plan store's engine (SQLite or PostgreSQL)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    # users ------------------------------------------------------------------------------------------
    def add_user(self, name: str, role: str, password: str | None, actor: str = "cli") -> User:
        row = UserRow(
            name=check_user_name(name),
            role=check_role(role),
            created_at=datetime.now(UTC),
            password_hash=hash_password(password) if password is not None else None,
        )
        try:
            with Session(self.engine, expire_on_commit=False) as session, session.begin():
                session.add(row)
                session.flush()
                session.add(audit_row(actor, "user.create", name, role=role))
        except IntegrityError:
            raise AccountError(f"name: a user named {name!r} exists already") from None
        return _user(row)

    def user(self, name: str) -> User | None:
        with Session(self.engine) as session:
            row = session.get(UserRow, name)
            return _user(row) if row else None

    def users(self) -> list[User]:
        with Session(self.engine) as session:
            return [_user(r) for r in session.scalars(select(UserRow).order_by(UserRow.name))]

    def count_users(self) -> int:
        with Session(self.engine) as session:
            return session.scalar(select(func.count()).select_from(UserRow)) or 0

    def _change_user(self, name: str, actor: str, action: str, **values: Any) -> None:
        with Session(self.engine) as session, session.begin():
            before = session.get(UserRow, name)
            was_admin = before is not None and before.role == "admin" and not before.disabled
            changed = session.execute(update(UserRow).where(UserRow.name == name).values(**values))
            if changed.rowcount != 1:  # type: ignore[attr-defined]
                raise AccountError(f"name: no user named {name!r}")
            admins = select(func.count()).select_from(UserRow).where(UserRow.role == "admin", ~UserRow.disabled)
            if was_admin and not session.scalar(admins):
                # the change took the last enabled admin away (checked in its transaction, rolled back): nobody could
                # manage accounts or others' plans on the web any more (the CLI could still mend it)
                raise AccountError(f"name: {name!r} is the last enabled admin; make another user admin first")
            if values.get("disabled") or "password_hash" in values:
                # a new password ends every open browser session of the user: a stolen cookie kept working for the
                # session's lifetime after it (QA 2026-12-07); API tokens are credentials of their own (revoke them)
                session.execute(delete(SessionRow).where(SessionRow.user == name))
            session.add(audit_row(actor, action, name, **{k: v for k, v in values.items() if k != "password_hash"}))

    def set_password(self, name: str, password: str, actor: str = "cli") -> None:
        self._change_user(name, actor, "user.password", password_hash=hash_password(password))

    def set_disabled(self, name: str, disabled: bool, actor: str = "cli") -> None:
        self._change_user(name, actor, "user.disable" if disabled else "user.enable", disabled=disabled)

    def set_role(self, name: str, role: str, actor: str = "cli") -> None:
        self._change_user(name, actor, "user.role", role=check_role(role))

    def check_login(self, name: str, password: str) -> User | None:
        """The user, if the password is theirs and the account is enabled (same work for unknown names, and for
        text that is no user name: a NUL in it was a PostgreSQL DataError and a 500, QA 2026-12-07)."""
        if not USER_NAME.fullmatch(name):
            verify_password(password, _dummy_hash())
            return None
        with Session(self.engine) as session:
            row = session.get(UserRow, name)
        if row is None or row.password_hash is None:
            verify_password(password, _dummy_hash())  # the same work as a real check: names cannot be probed
            return None
        if not verify_password(password, row.password_hash) or row.disabled:
            return None
        return _user(row)

    # tokens -----------------------------------------------------------------------------------------
    def create_token(self, user: str, label: str = "", actor: str = "cli") -> tuple[str, TokenInfo]:
        """A new token for `user`: the full token is returned once and never stored."""
        if len(label) > 100:
            raise AccountError(f"label: {len(label)} characters; at most 100")
        if any(not ch.isprintable() for ch in label):  # a newline or an escape code would forge `tokens list` lines
            raise AccountError(f"label: {label!r} has control characters (newlines, escapes); printable text only")
        token_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
        row = TokenRow(
            id=token_id, user=user, label=label, secret_sha256=sha256_hex(secret), created_at=datetime.now(UTC)
        )
        with Session(self.engine, expire_on_commit=False) as session, session.begin():
            owner = session.get(UserRow, user)
            if owner is None:
                raise AccountError(f"user: no user named {user!r}")
            session.add(row)
            session.add(audit_row(actor, "token.create", token_id, user=user, label=label))
        return f"tp_{token_id}_{secret}", _token(row)

    def tokens(self, user: str | None = None) -> list[TokenInfo]:
        query = select(TokenRow).order_by(TokenRow.created_at)
        if user is not None:
            query = query.where(TokenRow.user == user)
        with Session(self.engine) as session:
            if user is not None and session.get(UserRow, user) is None:
                raise AccountError(f"name: no user named {user!r}")  # as every other verb says (QA, 2026-12-06)
            return [_token(r) for r in session.scalars(query)]

    def revoke_token(self, token_id: str, actor: str = "cli") -> None:
        with Session(self.engine) as session, session.begin():
            changed = session.execute(
                update(TokenRow)
                .where(TokenRow.id == token_id, TokenRow.revoked_at.is_(None))
                .values(revoked_at=datetime.now(UTC))
            )
            if changed.rowcount != 1:  # type: ignore[attr-defined]
                raise AccountError(f"token: no active token with id {token_id!r}")
            session.add(audit_row(actor, "token.revoke", token_id))

    def token_user(self, token: str) -> tuple[User, str] | None:
        """(user, token id) of a valid, unrevoked token of an enabled user; None otherwise."""
        match = TOKEN.fullmatch(token)
        if match is None:
            return None
        token_id, secret = match.groups()
        query = select(TokenRow, UserRow).join(UserRow, UserRow.name == TokenRow.user).where(TokenRow.id == token_id)
        with Session(self.engine) as session:
            found = session.execute(query).first()
        if found is None:
            return None
        row, user = found
        if not hmac.compare_digest(row.secret_sha256, sha256_hex(secret)) or row.revoked_at or user.disabled:
            return None
        return _user(user), token_id

    # sessions ---------------------------------------------------------------------------------------
    def create_session(self, user: str, hours: float) -> str:
        secret, now = secrets.token_urlsafe(32), datetime.now(UTC)
        with Session(self.engine) as session, session.begin():
            session.execute(delete(SessionRow).where(SessionRow.expires_at < now))
            session.add(
                SessionRow(
                    secret_sha256=sha256_hex(secret), user=user, created_at=now, expires_at=now + timedelta(hours=hours)
                )
            )
        return secret

    def session_user(self, secret: str) -> User | None:
        if not 20 <= len(secret) <= 100:
            return None
        query = (
            select(SessionRow, UserRow)
            .join(UserRow, UserRow.name == SessionRow.user)
            .where(SessionRow.secret_sha256 == sha256_hex(secret))
        )
        with Session(self.engine) as session:
            found = session.execute(query).first()
        if found is None:
            return None
        row, user = found
        if utc(row.expires_at) < datetime.now(UTC) or user.disabled:
            return None
        return _user(user)

    def end_session(self, secret: str) -> None:
        with Session(self.engine) as session, session.begin():
            session.execute(delete(SessionRow).where(SessionRow.secret_sha256 == sha256_hex(secret)))

    # audit ------------------------------------------------------------------------------------------
    def audit(self, limit: int, offset: int) -> tuple[list[AuditEvent], int]:
        query = select(AuditRow).order_by(AuditRow.id.desc()).limit(limit).offset(offset)
        with Session(self.engine) as session:
            total = session.scalar(select(func.count()).select_from(AuditRow)) or 0
            rows = list(session.scalars(query))
        return [AuditEvent(r.id, utc(r.at), r.actor, r.action, r.target, json.loads(r.detail)) for r in rows], total


@cache
def _dummy_hash() -> str:
    """Checked against when the user does not exist, so that a wrong name costs what a wrong password does."""
    return hash_password(secrets.token_urlsafe(16))
