"""Stored plans (SQLAlchemy 2): SQLite by default, PostgreSQL when DATABASE_URL points at one."""

from app.store.plans import PlanRecord, PlanStore, PlanSummaryRecord

__all__ = ["PlanRecord", "PlanStore", "PlanSummaryRecord"]
