"""Engines: an embedded SQLite file (WAL mode, created on first start) or PostgreSQL through psycopg 3."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

from app.store.models import Base

log = logging.getLogger("trainplan.store")


def normalize_url(url: str) -> URL:
    """`postgres://` and driverless `postgresql://` mean psycopg 3 here (the only PostgreSQL driver we ship)."""
    parsed = make_url(url)
    if parsed.drivername in ("postgres", "postgresql"):
        log.info("DATABASE_URL has no driver: using postgresql+psycopg")
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")  # readers never block the writer; survives restarts (file-level)
    cur.execute("PRAGMA synchronous=NORMAL")  # durable at checkpoints; the usual pairing with WAL
    cur.execute("PRAGMA busy_timeout=10000")  # wait for a concurrent writer (another worker) instead of failing
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def make_engine(url: str) -> Engine:
    parsed = normalize_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(parsed, pool_pre_ping=True, pool_size=10, max_overflow=20)
    engine = create_engine(parsed, connect_args={"check_same_thread": False})
    event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def init_db(engine: Engine) -> None:
    """Create the SQLite file's directory and the tables that are missing (no migrations: schema version 1)."""
    url = engine.url
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(3):  # several workers or replicas start at once: the loser of a CREATE race retries
        try:
            Base.metadata.create_all(engine)
            return
        except (OperationalError, ProgrammingError, IntegrityError):
            if attempt == 2:
                raise
            time.sleep(0.2 * (attempt + 1))
