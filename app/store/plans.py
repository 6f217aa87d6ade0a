"""The plan store: add (once per Idempotency-Key), get, list (newest first), delete (audited) plans; freeze
rendered artifacts per rank."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Row,
    Select,
    and_,
    delete,
    false,
    func,
    insert,
    or_,
    select,
    text,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.planner.explain import describe
from app.planner.results import PlanResult
from app.store.accounts import audit_row, utc
from app.store.db import init_db, make_engine
from app.store.models import SUMMARY_MAX, ArtifactRow, IdempotencyRow, PlanRow

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
    owner: str | None
    cluster_name: str | None = None  # the saved cluster the request named


@dataclass(frozen=True)
class PlanRecord:
    """A stored plan: the request as sent, the planner's result, notices about what the service changed."""

    id: str
    created_at: datetime
    planner_version: str
    request: dict[str, Any]
    result: PlanResult
    notices: list[str] = field(default_factory=list)
    owner: str | None = None
    cluster_name: str | None = None  # the saved cluster the request named


@dataclass(frozen=True)
class IdempotencyKey:
    """A client's key for one creation, and the SHA-256 of the request it was first sent with."""

    owner: str
    key: str
    request_sha256: str


class KeyReused(ValueError):
    """The Idempotency-Key was first used with a different request body."""


class NotOwner(PermissionError):
    """The plan (or saved cluster) belongs to someone else."""

    def __init__(self, ident: str, owner: str | None, kind: str = "plan") -> None:
        super().__init__(f"{kind} {ident} belongs to {owner or 'nobody (made before accounts)'}")
        self.owner = owner
        self.kind = kind


@dataclass(frozen=True)
class PlanFilters:
    """The plan list's search: every word of `q` in the id, model, GPU, chosen layout, owner or saved cluster (any
    case), and exact model, GPU and owner, and the saved cluster in any case."""

    q: str = ""
    model: str = ""
    gpu: str = ""
    owner: str = ""
    cluster: str = ""

    def conditions(self) -> list[ColumnElement[bool]]:
        if any("\x00" in v for v in (self.q, self.model, self.gpu, self.owner, self.cluster)):
            # no stored text holds a NUL (PostgreSQL refuses one in a text parameter): such a filter matches nothing
            return [false()]
        out: list[ColumnElement[bool]] = []
        # each word is a LIKE over five columns of every row: the same word once, and no more than 8 (fifty one-letter
        # words took 2.7 s on 30,000 plans, QA 2026-12-07)
        for word in list(dict.fromkeys(self.q.lower().split()))[:MAX_SEARCH_WORDS]:
            out.append(or_(*(func.lower(c).contains(word, autoescape=True) for c in _SEARCHED)))
        for column, value in (
            (PlanRow.model_name, self.model),
            (PlanRow.gpu_name, self.gpu),
            (PlanRow.owner, self.owner),
        ):
            if value:
                out.append(column == value)
        if self.cluster:  # saved cluster names are one name in any case (clusters.py, the lower(name) index)
            out.append(func.lower(PlanRow.cluster_name) == self.cluster.lower())
        return out


MAX_SEARCH_WORDS = 8
_SEARCHED = (
    PlanRow.id,
    PlanRow.model_name,
    PlanRow.gpu_name,
    PlanRow.best_summary,
    PlanRow.owner,
    PlanRow.cluster_name,
)
_SUMMARY = (
    PlanRow.id,
    PlanRow.created_at,
    PlanRow.planner_version,
    PlanRow.model_name,
    PlanRow.num_parameters,
    PlanRow.gpu_name,
    PlanRow.num_gpus,
    PlanRow.num_plans,
    PlanRow.best_summary,
    PlanRow.best_tokens_per_s,
    PlanRow.truncated,
    PlanRow.owner,
    PlanRow.cluster_name,
)


def _newest_first() -> Select[*tuple[Any, ...]]:
    """The listing's summary columns, newest first (ties broken by id)."""
    return select(*_SUMMARY).order_by(PlanRow.created_at.desc(), PlanRow.id.desc())


def _summary(row: Row[Any]) -> PlanSummaryRecord:
    return PlanSummaryRecord(**{**row._asdict(), "created_at": utc(row.created_at)})


def _clip(text: str, limit: int) -> str:
    """`text` within `limit` characters, an ellipsis marking a cut (PostgreSQL refuses a longer VARCHAR, SQLite
    stores it: a PP256 layout string made a 903-character summary and a 500 on PostgreSQL, QA 2026-12-07)."""
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _summary_columns(result: PlanResult) -> dict[str, Any]:
    best = result.best
    return {
        "model_name": result.model.name,
        "num_parameters": result.num_parameters,
        "gpu_name": result.cluster.gpu.name,
        # the GPUs the best plan uses (a min_gpus plan or one on fewer nodes leaves some idle), else the cluster's
        "num_gpus": best.parallel.world_size if best else result.cluster.world_size,
        "num_plans": len(result.plans),
        "best_summary": _clip(describe(best.parallel), SUMMARY_MAX) if best else None,
        "best_tokens_per_s": best.estimate.time.tokens_per_s if best else None,
        "truncated": result.stats.truncated,
    }


class PlanStore:
    """Thread-safe (a session per call); works the same on SQLite and PostgreSQL."""

    def __init__(self, url: str, sqlite_synchronous: str = "FULL", idempotency_hours: float = 24.0) -> None:
        self.engine: Engine = make_engine(url, sqlite_synchronous)
        self.idempotency_window = timedelta(hours=idempotency_hours)

    def init(self) -> None:
        init_db(self.engine)

    def close(self) -> None:
        self.engine.dispose()

    def ping(self) -> None:
        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    def add(
        self,
        request: dict[str, Any],
        result: PlanResult,
        notices: list[str],
        artifacts: dict[str, str] | None = None,
        renderer_version: str = "",
        owner: str | None = None,
        idempotency: IdempotencyKey | None = None,
        result_json: str | None = None,
        cluster_name: str | None = None,
    ) -> tuple[PlanRecord, bool]:
        """Store a new plan (and the rank-1 artifacts, in the same transaction). With an Idempotency-Key that
        already made a plan (a retry, or a concurrent twin that committed first), that plan instead: the second
        value says so. `result_json` is the result as already serialised (and checked to read back)."""
        record = PlanRecord(
            id=new_id(),
            created_at=datetime.now(UTC),
            planner_version=result.planner_version,
            request=request,
            result=result,
            notices=list(notices),
            owner=owner,
            cluster_name=cluster_name,
        )
        row = {
            "id": record.id,
            "created_at": record.created_at,
            "planner_version": record.planner_version,
            "request_json": json.dumps(request, separators=(",", ":")),
            "result_json": result_json or result.model_dump_json(),
            "notices_json": json.dumps(record.notices),
            "owner": owner,
            "cluster_name": cluster_name,
            **_summary_columns(result),
        }
        files = [
            {"plan_id": record.id, "rank": 1, "name": name, "content": content, "renderer_version": renderer_version}
            for name, content in (artifacts or {}).items()
        ]
        try:
            # plain inserts in one transaction (the ORM's unit of work took 2 ms of a POST /plans for the same rows)
            with self.engine.begin() as conn:
                conn.execute(insert(PlanRow), [row])
                if files:
                    conn.execute(insert(ArtifactRow), files)
                if idempotency is not None:
                    self._purge_expired_keys(conn)
                    conn.execute(
                        insert(IdempotencyRow),
                        [
                            {
                                "owner": idempotency.owner,
                                "key": idempotency.key,
                                "plan_id": record.id,
                                "request_sha256": idempotency.request_sha256,
                                "created_at": record.created_at,
                            }
                        ],
                    )
        except IntegrityError:
            earlier = self.idempotent_plan(idempotency) if idempotency else None
            if earlier is None:
                raise
            return earlier, True
        return record, False

    def _purge_expired_keys(self, conn: Connection) -> None:
        cutoff = datetime.now(UTC) - self.idempotency_window
        conn.execute(delete(IdempotencyRow).where(IdempotencyRow.created_at < cutoff))

    def idempotent_plan(self, key: IdempotencyKey) -> PlanRecord | None:
        """The plan this key made within the window; KeyReused if the key came with another request then."""
        cutoff = datetime.now(UTC) - self.idempotency_window
        with Session(self.engine) as session:
            row = session.get(IdempotencyRow, (key.owner, key.key))
        if row is None or utc(row.created_at) < cutoff:
            return None
        if row.request_sha256 != key.request_sha256:
            raise KeyReused(
                f"Idempotency-Key {key.key!r} was used for a different request (plan {row.plan_id}); "
                "use a new key for a new request"
            )
        return self.get(row.plan_id)

    def get(self, plan_id: str) -> PlanRecord | None:
        with Session(self.engine) as session:
            row = session.get(PlanRow, plan_id)
            if row is None:
                return None
            return PlanRecord(
                id=row.id,
                created_at=utc(row.created_at),
                planner_version=row.planner_version,
                request=json.loads(row.request_json),
                result=PlanResult.model_validate_json(row.result_json),
                notices=json.loads(row.notices_json),
                owner=row.owner,
                cluster_name=row.cluster_name,
            )

    def exists(self, plan_id: str) -> bool:
        with Session(self.engine) as session:
            return session.scalar(select(func.count()).where(PlanRow.id == plan_id)) == 1

    def page(
        self, limit: int, offset: int, owner: str | None = None, filters: PlanFilters | None = None
    ) -> tuple[list[PlanSummaryRecord], int]:
        """A page of summaries, newest first (ties broken by id), and how many match; `owner`'s plans only, and
        those `filters` keep (in SQL: the listing never loads more rows than it shows)."""
        query = _newest_first().limit(limit).offset(offset)
        count = select(func.count()).select_from(PlanRow)
        conditions = (filters or PlanFilters()).conditions()
        if owner is not None:
            conditions.append(PlanRow.owner == owner)
        if conditions:
            query, count = query.where(*conditions), count.where(*conditions)
        with Session(self.engine) as session:
            total = session.scalar(count) or 0
            rows = session.execute(query).all()
        return [_summary(row) for row in rows], total

    def summaries(
        self, filters: PlanFilters | None = None, limit: int | None = None, batch: int = 1000
    ) -> Iterator[list[PlanSummaryRecord]]:
        """Every summary `filters` keep, newest first, `batch` at a time: each batch a query of its own that
        starts after the last row of the one before (no OFFSET to rescan, and no more than a batch in memory)."""
        conditions = (filters or PlanFilters()).conditions()
        left = limit
        after: tuple[datetime, str] | None = None
        while left is None or left > 0:
            size = batch if left is None else min(batch, left)
            query = _newest_first().limit(size)
            where = list(conditions)
            if after is not None:
                when, last = after
                where.append(or_(PlanRow.created_at < when, and_(PlanRow.created_at == when, PlanRow.id < last)))
            if where:
                query = query.where(*where)
            with Session(self.engine) as session:
                rows = session.execute(query).all()
            if not rows:
                return
            after = (rows[-1].created_at, rows[-1].id)  # as stored (naive on SQLite): compared as stored
            yield [_summary(row) for row in rows]
            if len(rows) < size:
                return
            if left is not None:
                left -= len(rows)

    def facets(self, limit: int = 200) -> dict[str, list[str]]:
        """The distinct models, GPUs and owners of the stored plans (the list's filter choices), `limit` each."""
        out = {}
        with Session(self.engine) as session:
            for name, column in (
                ("models", PlanRow.model_name),
                ("gpus", PlanRow.gpu_name),
                ("owners", PlanRow.owner),
                ("clusters", PlanRow.cluster_name),
            ):
                query = select(column).where(column.is_not(None)).distinct().order_by(column).limit(limit)
                values = [str(v) for v in session.scalars(query)]
                if name == "clusters":  # one choice per name in any case (a cluster deleted and saved again as lab-a)
                    folded: dict[str, str] = {}
                    for v in values:
                        folded.setdefault(v.lower(), v)
                    values = list(folded.values())
                out[name] = values
        return out

    def delete(self, plan_id: str, actor: str = "cli", only_owner: str | None = None) -> bool:
        """Delete a plan and its files, with an audit entry in the same transaction. False if there is no such
        plan; NotOwner if `only_owner` is given and the plan is someone else's (nothing is deleted)."""
        with Session(self.engine) as session, session.begin():
            found = session.execute(select(PlanRow.owner, PlanRow.model_name).where(PlanRow.id == plan_id)).first()
            if found is None:
                return False
            owner, model_name = found
            if only_owner is not None and owner != only_owner:
                raise NotOwner(plan_id, owner)
            gone = session.execute(delete(PlanRow).where(PlanRow.id == plan_id)).rowcount  # type: ignore[attr-defined]
            if not gone:  # a concurrent delete removed it after this one read it: that one deleted and audited it
                return False
            session.execute(delete(ArtifactRow).where(ArtifactRow.plan_id == plan_id))
            session.execute(delete(IdempotencyRow).where(IdempotencyRow.plan_id == plan_id))
            session.add(audit_row(actor, "plan.delete", plan_id, owner=owner, model=model_name))
        return True

    def artifacts(self, plan_id: str, rank: int) -> dict[str, str] | None:
        """The frozen files of one rank (None if that rank was never rendered)."""
        query = (
            select(ArtifactRow.name, ArtifactRow.content)
            .where(ArtifactRow.plan_id == plan_id, ArtifactRow.rank == rank)
            .order_by(ArtifactRow.name)
        )
        with Session(self.engine) as session:
            rows = session.execute(query).all()
        return {name: content for name, content in rows} if rows else None

    def artifact_names(self, plan_id: str, rank: int) -> list[str]:
        """The names of one rank's frozen files, sorted (empty if that rank was never rendered), without reading
        the files."""
        query = select(ArtifactRow.name).where(ArtifactRow.plan_id == plan_id, ArtifactRow.rank == rank)
        with Session(self.engine) as session:
            return sorted(session.scalars(query))

    def rendered_ranks(self, plan_id: str) -> list[int]:
        query = select(ArtifactRow.rank).where(ArtifactRow.plan_id == plan_id).distinct().order_by(ArtifactRow.rank)
        with Session(self.engine) as session:
            return list(session.scalars(query))

    def put_artifacts(
        self, plan_id: str, rank: int, files: dict[str, str], renderer_version: str = ""
    ) -> dict[str, str]:
        """Freeze a rank's files; if another request froze them first, theirs win and are returned."""
        rows = [
            ArtifactRow(plan_id=plan_id, rank=rank, name=n, content=c, renderer_version=renderer_version)
            for n, c in files.items()
        ]
        try:
            with Session(self.engine) as session, session.begin():
                session.add_all(rows)
        except IntegrityError:
            pass  # rendered concurrently by another request: keep the first copy
        return self.artifacts(plan_id, rank) or {}
