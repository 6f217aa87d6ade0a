"""Engines: an embedded SQLite file (WAL mode, created on first start) or PostgreSQL through psycopg 3."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

from app.store.models import Base

log = logging.getLogger("trainplan.store")

SYNCHRONOUS = ("FULL", "NORMAL")
# Columns added after schema version 1; an existing database gets them on start (all nullable, no backfill).
ADDED_COLUMNS: dict[str, dict[str, str]] = {"plans": {"owner": "VARCHAR(64)"}}


def normalize_url(url: str) -> URL:
    """`postgres://` and driverless `postgresql://` mean psycopg 3 here (the only PostgreSQL driver we ship)."""
    parsed = make_url(url)
    if parsed.drivername in ("postgres", "postgresql"):
        log.info("DATABASE_URL has no driver: using postgresql+psycopg")
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def _sqlite_pragmas(synchronous: str) -> Callable[[Any, Any], None]:
    if synchronous not in SYNCHRONOUS:
        raise ValueError(f"sqlite synchronous must be one of {', '.join(SYNCHRONOUS)}, got {synchronous!r}")

    def connect(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")  # readers never block the writer; survives restarts (file-level)
        # FULL: the WAL is fsynced at every commit, so a 201 survives a power loss; NORMAL: only at checkpoints
        cur.execute(f"PRAGMA synchronous={synchronous}")
        cur.execute("PRAGMA busy_timeout=10000")  # wait for a concurrent writer (another worker) instead of failing
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()
        # SQLite's own lower() folds ASCII only: a search for "éclair" never met "ÉCLAIR"; PostgreSQL's is Unicode's
        dbapi_conn.create_function("lower", 1, _lower, deterministic=True)

    return connect


def _lower(value: object) -> object:
    return value.lower() if isinstance(value, str) else value


def make_engine(url: str, sqlite_synchronous: str = "FULL") -> Engine:
    parsed = normalize_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(parsed, pool_pre_ping=True, pool_size=10, max_overflow=20)
    engine = create_engine(parsed, connect_args={"check_same_thread": False})
    event.listen(engine, "connect", _sqlite_pragmas(sqlite_synchronous))
    return engine


def _add_missing_columns(engine: Engine) -> None:
    """The one migration so far: columns later versions added to existing tables."""
    inspector = inspect(engine)
    for table, columns in ADDED_COLUMNS.items():
        present = {c["name"] for c in inspector.get_columns(table)}
        for name, kind in columns.items():
            if name not in present:
                log.info("adding column %s.%s to an existing database", table, name)
                with engine.begin() as conn:
                    conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {name} {kind}"))
                    conn.execute(text(f"CREATE INDEX IF NOT EXISTS ix_{table}_{name} ON {table} ({name})"))


def init_db(engine: Engine) -> None:
    """Create the SQLite file's directory and the tables that are missing, and add columns that are."""
    url = engine.url
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(3):  # several workers or replicas start at once: the loser of a CREATE race retries
        try:
            Base.metadata.create_all(engine)
            _add_missing_columns(engine)
            return
        except (OperationalError, ProgrammingError, IntegrityError):
            if attempt == 2:
                raise
            time.sleep(0.2 * (attempt + 1))
