"""Tables of the plan store: one row per stored plan, one row per rendered artifact file."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, DateTime, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


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
    best_summary: Mapped[str | None] = mapped_column(String(500), nullable=True)
    best_tokens_per_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    truncated: Mapped[bool] = mapped_column(default=False)

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
