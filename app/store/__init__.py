"""Stored plans and accounts (SQLAlchemy 2): SQLite by default, PostgreSQL when DATABASE_URL points at one."""

from app.store.accounts import ROLES, AccountError, AccountStore, AuditEvent, Role, TokenInfo, User
from app.store.clusters import ClusterExists, ClusterRecord, ClusterStore, ClusterSummary, VersionConflict
from app.store.plans import (
    IdempotencyKey,
    KeyReused,
    NotOwner,
    PlanFilters,
    PlanRecord,
    PlanStore,
    PlanSummaryRecord,
)

__all__ = [
    "ROLES",
    "AccountError",
    "AccountStore",
    "AuditEvent",
    "ClusterExists",
    "ClusterRecord",
    "ClusterStore",
    "ClusterSummary",
    "IdempotencyKey",
    "KeyReused",
    "NotOwner",
    "PlanFilters",
    "PlanRecord",
    "PlanStore",
    "PlanSummaryRecord",
    "Role",
    "TokenInfo",
    "User",
    "VersionConflict",
]
