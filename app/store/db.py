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

from app.store.models import CLUSTER_NAME_INDEX, Base

log = logging.getLogger("trainplan.store")

SYNCHRONOUS = ("FULL", "NORMAL")
# Columns added after schema version 1; an existing database gets them on start (all nullable, no backfill).
ADDED_COLUMNS: dict[str, dict[str, str]] = {"plans": {"owner": "VARCHAR(64)", "cluster_name": "VARCHAR(64)"}}


class DatabaseFolderError(ValueError):
    """The folder of DATABASE_URL's SQLite file cannot be made (a parent is a file, a read-only or virtual file
    system, no permission): said in one line naming DATABASE_URL and the path (it was a FileNotFoundError traceback
    from `trainplan users list` and `trainplan serve`)."""


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


def _add_cluster_name_index(engine: Engine) -> None:
    """Saved cluster names are unique without case (a request names one cluster): a unique index on lower(name),
    which makes two concurrent saves of Race1 and race1 one 201 and one 409. A database made before the index may
    already hold such twins: it still opens (nothing stored is lost), the log names them, and the index is tried again
    at the next start (rename or delete one of each pair to get it)."""
    ddl = f"CREATE UNIQUE INDEX IF NOT EXISTS {CLUSTER_NAME_INDEX} ON clusters (lower(name))"
    try:
        with engine.begin() as conn:
            conn.execute(text(ddl))
    except IntegrityError:
        with engine.connect() as conn:
            twins = conn.execute(
                text("SELECT lower(name), COUNT(*) FROM clusters GROUP BY lower(name) HAVING COUNT(*) > 1")
            ).all()
        if not twins:  # another worker's CREATE INDEX won a race (PostgreSQL's catalogue): init_db tries again
            raise
        names = ", ".join(f"{name!r} x{count}" for name, count in twins)
        log.warning(
            "saved clusters whose names differ only in case: %s; names are not yet unique without case in this "
            "database (rename or delete one of each to let the next start add index %s)",
            names,
            CLUSTER_NAME_INDEX,
        )


def _sqlite_folder(url: URL) -> None:
    """Make the SQLite file's folder, or say in one line why it cannot be made."""
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return
    folder = Path(url.database).expanduser().parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        if isinstance(exc, FileExistsError):
            why = "a file of that name is in the way"
        raise DatabaseFolderError(
            f"DATABASE_URL: cannot create the folder {str(folder)!r} for the SQLite file {url.database!r}: {why}"
        ) from None


def init_db(engine: Engine) -> None:
    """Create the SQLite file's directory and the tables that are missing, and add columns and indexes that are."""
    _sqlite_folder(engine.url)
    for attempt in range(3):  # several workers or replicas start at once: the loser of a CREATE race retries
        try:
            Base.metadata.create_all(engine)
            _add_missing_columns(engine)
            _add_cluster_name_index(engine)
            return
        except (OperationalError, ProgrammingError, IntegrityError):
            if attempt == 2:
                raise
            time.sleep(0.2 * (attempt + 1))
