"""Tables of the plan store: plans and their rendered files; saved cluster descriptions; accounts (users, API
tokens, web sessions), the audit log of deletions and account changes, and the Idempotency-Keys of plan creations."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, DateTime, Float, ForeignKey, Index, Integer, String, Text, func
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

# the plan list's one-line summary of the best plan (the whole plan is in result_json)
SUMMARY_MAX = 500


class Base(DeclarativeBase):
    pass


class PlanRow(Base):
    """A search as it was made: the request as sent, the result, and the planner version that produced it.

    The summary columns (model, GPUs, best plan) are copies of values inside `result_json`, kept so that a
    listing never has to load and parse the result.
    """

    __tablename__ = "plans"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    planner_version: Mapped[str] = mapped_column(String(32))
    request_json: Mapped[str] = mapped_column(Text)
    result_json: Mapped[str] = mapped_column(Text)
    notices_json: Mapped[str] = mapped_column(Text, default="[]")
    model_name: Mapped[str] = mapped_column(String(200))
    num_parameters: Mapped[int] = mapped_column(BigInteger)
    gpu_name: Mapped[str] = mapped_column(String(200))
    num_gpus: Mapped[int] = mapped_column(Integer)
    num_plans: Mapped[int] = mapped_column(Integer)
    best_summary: Mapped[str | None] = mapped_column(String(SUMMARY_MAX), nullable=True)
    best_tokens_per_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    truncated: Mapped[bool] = mapped_column(default=False)
    owner: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)  # the user who made it
    # the saved cluster the request named, as saved then (its description is written out in request_json)
    cluster_name: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)

    artifacts: Mapped[list[ArtifactRow]] = relationship(
        back_populates="plan", cascade="all, delete-orphan", passive_deletes=True
    )

    __table_args__ = (Index("ix_plans_created_id", "created_at", "id"),)


class ArtifactRow(Base):
    """One rendered file of one ranked plan, frozen once written."""

    __tablename__ = "artifacts"

    plan_id: Mapped[str] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"), primary_key=True)
    rank: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    content: Mapped[str] = mapped_column(Text)
    renderer_version: Mapped[str] = mapped_column(String(32), default="")

    plan: Mapped[PlanRow] = relationship(back_populates="artifacts")


class UserRow(Base):
    """An account: a role, and a password hash for the web login (API clients use tokens)."""

    __tablename__ = "users"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    role: Mapped[str] = mapped_column(String(16))  # admin | user | read-only
    password_hash: Mapped[str | None] = mapped_column(String(200), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    disabled: Mapped[bool] = mapped_column(default=False)


class TokenRow(Base):
    """An API token: `tp_<id>_<secret>`; only the SHA-256 of the secret is kept."""

    __tablename__ = "tokens"

    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    user: Mapped[str] = mapped_column(ForeignKey("users.name", ondelete="CASCADE"), index=True)
    label: Mapped[str] = mapped_column(String(100), default="")
    secret_sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class SessionRow(Base):
    """A web login: the cookie holds the secret, the table its SHA-256."""

    __tablename__ = "sessions"

    secret_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    user: Mapped[str] = mapped_column(ForeignKey("users.name", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)


class AuditRow(Base):
    """Who did what to which plan or account, written in the same transaction as the change."""

    __tablename__ = "audit"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    actor: Mapped[str] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(32))
    target: Mapped[str] = mapped_column(String(64))
    detail: Mapped[str] = mapped_column(Text, default="{}")


class IdempotencyRow(Base):
    """A `POST /plans` made with an Idempotency-Key: a retry with the same key and body gets the same plan."""

    __tablename__ = "idempotency_keys"

    owner: Mapped[str] = mapped_column(String(64), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    request_sha256: Mapped[str] = mapped_column(String(64))
    plan_id: Mapped[str] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)


CLUSTER_NAME_INDEX = "ux_clusters_lower_name"  # names unique without case (app/store/db.py adds it to older databases)


class ClusterRow(Base):
    """A saved cluster description (nodes, GPU, NICs, hosts, measured profile): the JSON as it was sent, checked
    against ClusterSpec when saved; `version` counts its saves (an edit must name the version it changes)."""

    __tablename__ = "clusters"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    description: Mapped[str] = mapped_column(String(500), default="")
    spec_json: Mapped[str] = mapped_column(Text)
    version: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    gpu_name: Mapped[str] = mapped_column(String(200))
    num_nodes: Mapped[int] = mapped_column(Integer)
    gpus_per_node: Mapped[int] = mapped_column(Integer)

    # PostgreSQL's lower() and the one the SQLite engine registers (app/store/db.py) both fold Unicode
    __table_args__ = (Index(CLUSTER_NAME_INDEX, func.lower(name), unique=True),)
