"""Saved cluster descriptions: add, get, list, update (naming the version it changes), delete; every change audited
with what was there before, so nothing a user saved is ever lost (an overwritten or deleted description is in the
audit log, and a plan made from one stores the description as it was then)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, delete, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.store.accounts import audit_row, utc
from app.store.models import ClusterRow
from app.store.plans import NotOwner


@dataclass(frozen=True)
class ClusterSummary:
    """The listing columns, computed by the service from the validated description."""

    gpu_name: str
    num_nodes: int
    gpus_per_node: int


@dataclass(frozen=True)
class ClusterRecord:
    name: str
    owner: str | None
    description: str
    spec: dict[str, Any]  # the description as it was sent
    version: int
    created_at: datetime
    updated_at: datetime
    gpu_name: str
    num_nodes: int
    gpus_per_node: int


class ClusterExists(ValueError):
    """A saved cluster of that name exists already (names are unique: requests use them)."""


class VersionConflict(ValueError):
    """An edit named another version than the stored one: someone saved in between."""

    def __init__(self, name: str, given: int, current: int) -> None:
        super().__init__(
            f"version({given}) != the stored version({current}) of cluster {name!r}: it was saved since you read "
            f"it; read it again (GET /clusters/{name}) and make your change on that version"
        )
        self.current = current


def _record(row: ClusterRow) -> ClusterRecord:
    return ClusterRecord(
        name=row.name,
        owner=row.owner,
        description=row.description,
        spec=json.loads(row.spec_json),
        version=row.version,
        created_at=utc(row.created_at),
        updated_at=utc(row.updated_at),
        gpu_name=row.gpu_name,
        num_nodes=row.num_nodes,
        gpus_per_node=row.gpus_per_node,
    )


class ClusterStore:
    """Thread-safe (a session per call), on the plan store's engine; SQLite and PostgreSQL alike."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def add(
        self, name: str, spec: dict[str, Any], summary: ClusterSummary, description: str, owner: str
    ) -> ClusterRecord:
        now = datetime.now(UTC)
        row = ClusterRow(
            name=name,
            owner=owner,
            description=description,
            spec_json=json.dumps(spec, separators=(",", ":")),
            version=1,
            created_at=now,
            updated_at=now,
            **vars(summary),
        )
        try:
            with Session(self.engine) as session, session.begin():
                taken = session.scalar(select(ClusterRow.name).where(func.lower(ClusterRow.name) == name.lower()))
                if taken is not None:  # names are told apart without case: a request names one cluster (QA)
                    raise _exists(taken)
                session.add(row)
                session.flush()
                session.add(audit_row(owner, "cluster.create", name, spec=spec))
                record = _record(row)
        except IntegrityError:  # a concurrent twin (Race1 and race1) took the name first: the unique index on
            # lower(name) refuses the second; nothing is replaced
            twin = self.get(name)
            raise _exists(twin.name if twin is not None else name) from None
        return record

    def get(self, name: str) -> ClusterRecord | None:
        """The saved cluster of that name, compared without case (`add` keeps names unique that way)."""
        with Session(self.engine) as session:
            row = session.get(ClusterRow, name) or session.scalar(
                select(ClusterRow).where(func.lower(ClusterRow.name) == name.lower()).limit(1)
            )
            return _record(row) if row is not None else None

    def page(self, limit: int, offset: int, owner: str | None = None) -> tuple[list[ClusterRecord], int]:
        """Saved clusters by name; `owner`'s only."""
        query = select(ClusterRow).order_by(ClusterRow.name).limit(limit).offset(offset)
        count = select(func.count()).select_from(ClusterRow)
        if owner is not None:
            query, count = query.where(ClusterRow.owner == owner), count.where(ClusterRow.owner == owner)
        with Session(self.engine) as session:
            total = session.scalar(count) or 0
            rows = [_record(r) for r in session.scalars(query)]
        return rows, total

    def update(
        self,
        name: str,
        spec: dict[str, Any],
        summary: ClusterSummary,
        description: str,
        version: int,
        actor: str,
        only_owner: str | None = None,
    ) -> ClusterRecord | None:
        """Replace a description if `version` is the stored one (VersionConflict otherwise; NotOwner when
        `only_owner` is given and it is someone else's). None if there is no such cluster. The write is one
        conditional UPDATE (name and version), so of two concurrent edits of one version exactly one wins."""
        before = self.get(name)
        if before is None:
            return None
        name = before.name  # as stored
        if only_owner is not None and before.owner != only_owner:
            raise NotOwner(name, before.owner, kind="cluster")
        if before.version != version:
            raise VersionConflict(name, version, before.version)
        now = datetime.now(UTC)
        change = (
            update(ClusterRow)
            .where(ClusterRow.name == name, ClusterRow.version == version)
            .values(
                spec_json=json.dumps(spec, separators=(",", ":")),
                description=description,
                version=version + 1,
                updated_at=now,
                **vars(summary),
            )
        )
        with Session(self.engine) as session, session.begin():
            if session.execute(change).rowcount != 1:  # type: ignore[attr-defined]
                current = self.get(name)
                if current is None:
                    return None
                raise VersionConflict(name, version, current.version)
            session.add(audit_row(actor, "cluster.update", name, owner=before.owner, previous=_previous(before)))
        return self.get(name)

    def delete(self, name: str, actor: str, only_owner: str | None = None) -> bool:
        """Delete a saved cluster (plans made from it keep their own copy); the audit entry keeps the description
        that was deleted (the version read is the version deleted: a save in between makes it try again)."""
        attempts = 5
        for _attempt in range(attempts):
            before = self.get(name)
            if before is None:
                return False
            name = before.name  # as stored
            if only_owner is not None and before.owner != only_owner:
                raise NotOwner(name, before.owner, kind="cluster")
            with Session(self.engine) as session, session.begin():
                gone = session.execute(
                    delete(ClusterRow).where(ClusterRow.name == name, ClusterRow.version == before.version)
                )
                if gone.rowcount == 1:  # type: ignore[attr-defined]
                    session.add(
                        audit_row(actor, "cluster.delete", name, owner=before.owner, previous=_previous(before))
                    )
                    return True
        latest = self.get(name)
        raise VersionConflict(name, before.version if before else 0, latest.version if latest else 0)


def _exists(taken: str) -> ClusterExists:
    return ClusterExists(
        f"a saved cluster named {taken!r} exists already (names are compared without case); choose another name, "
        f"or change that one with PUT /clusters/{taken}"
    )


def _previous(record: ClusterRecord) -> dict[str, Any]:
    return {"version": record.version, "description": record.description, "spec": record.spec}
