"""The plan store: add, get, list (newest first), delete plans; freeze rendered artifacts per rank."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, delete, func, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.planner.explain import describe
from app.planner.results import PlanResult
from app.store.db import init_db, make_engine
from app.store.models import ArtifactRow, PlanRow

ID_BYTES = 8  # 16 hex characters: short enough for a permalink, 2^64 ids


def new_id() -> str:
    return secrets.token_hex(ID_BYTES)


@dataclass(frozen=True)
class PlanSummaryRecord:
    """What a listing shows, read from the summary columns only."""

    id: str
    created_at: datetime
    planner_version: str
    model_name: str
    num_parameters: int
    gpu_name: str
    num_gpus: int
    num_plans: int
    best_summary: str | None
    best_tokens_per_s: float | None
    truncated: bool


@dataclass(frozen=True)
class PlanRecord:
    """A stored plan: the request as sent, the planner's result, notices about what the service changed."""

    id: str
    created_at: datetime
    planner_version: str
    request: dict[str, Any]
    result: PlanResult
    notices: list[str] = field(default_factory=list)


def _utc(ts: datetime) -> datetime:
    """SQLite hands timestamps back without a zone; they were written in UTC."""
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


def _summary_columns(result: PlanResult) -> dict[str, Any]:
    best = result.best
    return {
        "model_name": result.model.name,
        "num_parameters": result.num_parameters,
        "gpu_name": result.cluster.gpu.name,
        "num_gpus": result.cluster.world_size,
        "num_plans": len(result.plans),
        "best_summary": describe(best.parallel) if best else None,
        "best_tokens_per_s": best.estimate.time.tokens_per_s if best else None,
        "truncated": result.stats.truncated,
    }


class PlanStore:
    """Thread-safe (a session per call); works the same on SQLite and PostgreSQL."""

    def __init__(self, url: str) -> None:
        self.engine: Engine = make_engine(url)

    def init(self) -> None:
        init_db(self.engine)

    def close(self) -> None:
        self.engine.dispose()

    def ping(self) -> None:
        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    def add(self, request: dict[str, Any], result: PlanResult, notices: list[str],
            artifacts: dict[str, str] | None = None, renderer_version: str = "") -> PlanRecord:
        """Store a new plan (and the rank-1 artifacts, in the same transaction)."""
        record = PlanRecord(id=new_id(), created_at=datetime.now(UTC), planner_version=result.planner_version,
                            request=request, result=result, notices=list(notices))
        row = PlanRow(id=record.id, created_at=record.created_at, planner_version=record.planner_version,
                      request_json=json.dumps(request, separators=(",", ":")), result_json=result.model_dump_json(),
                      notices_json=json.dumps(record.notices), **_summary_columns(result))
        row.artifacts = [ArtifactRow(rank=1, name=name, content=content, renderer_version=renderer_version)
                         for name, content in (artifacts or {}).items()]
        with Session(self.engine) as session, session.begin():
            session.add(row)
        return record

    def get(self, plan_id: str) -> PlanRecord | None:
        with Session(self.engine) as session:
            row = session.get(PlanRow, plan_id)
            if row is None:
                return None
            return PlanRecord(id=row.id, created_at=_utc(row.created_at), planner_version=row.planner_version,
                              request=json.loads(row.request_json),
                              result=PlanResult.model_validate_json(row.result_json),
                              notices=json.loads(row.notices_json))

    def exists(self, plan_id: str) -> bool:
        with Session(self.engine) as session:
            return session.scalar(select(func.count()).where(PlanRow.id == plan_id)) == 1

    def page(self, limit: int, offset: int) -> tuple[list[PlanSummaryRecord], int]:
        """A page of summaries, newest first (ties broken by id), and the total count."""
        columns = [PlanRow.id, PlanRow.created_at, PlanRow.planner_version, PlanRow.model_name,
                   PlanRow.num_parameters, PlanRow.gpu_name, PlanRow.num_gpus, PlanRow.num_plans,
                   PlanRow.best_summary, PlanRow.best_tokens_per_s, PlanRow.truncated]
        query = select(*columns).order_by(PlanRow.created_at.desc(), PlanRow.id.desc()).limit(limit).offset(offset)
        with Session(self.engine) as session:
            total = session.scalar(select(func.count()).select_from(PlanRow)) or 0
            rows = session.execute(query).all()
        return [PlanSummaryRecord(**{**row._asdict(), "created_at": _utc(row.created_at)}) for row in rows], total

    def delete(self, plan_id: str) -> bool:
        with Session(self.engine) as session, session.begin():
            session.execute(delete(ArtifactRow).where(ArtifactRow.plan_id == plan_id))
            return session.execute(delete(PlanRow).where(PlanRow.id == plan_id)).rowcount == 1  # type: ignore[attr-defined]

    def artifacts(self, plan_id: str, rank: int) -> dict[str, str] | None:
        """The frozen files of one rank (None if that rank was never rendered)."""
        query = select(ArtifactRow.name, ArtifactRow.content).where(
            ArtifactRow.plan_id == plan_id, ArtifactRow.rank == rank).order_by(ArtifactRow.name)
        with Session(self.engine) as session:
            rows = session.execute(query).all()
        return {name: content for name, content in rows} if rows else None

    def rendered_ranks(self, plan_id: str) -> list[int]:
        query = select(ArtifactRow.rank).where(ArtifactRow.plan_id == plan_id).distinct().order_by(ArtifactRow.rank)
        with Session(self.engine) as session:
            return list(session.scalars(query))

    def put_artifacts(self, plan_id: str, rank: int, files: dict[str, str],
                      renderer_version: str = "") -> dict[str, str]:
        """Freeze a rank's files; if another request froze them first, theirs win and are returned."""
        rows = [ArtifactRow(plan_id=plan_id, rank=rank, name=n, content=c, renderer_version=renderer_version)
                for n, c in files.items()]
        try:
            with Session(self.engine) as session, session.begin():
                session.add_all(rows)
        except IntegrityError:
            pass  # rendered concurrently by another request: keep the first copy
        return self.artifacts(plan_id, rank) or {}
