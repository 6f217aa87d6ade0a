"""The service's settings, read once from environment variables (no dotfiles, nothing scraped by prefix).

Every setting has one environment variable; `Settings.from_env()` names the variable in its error when a value
does not parse, so a misconfigured container fails at start with a message that says what to fix.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.paths import TEMPLATES_DIR
from app.planner.errors import field_errors

DEFAULT_DATABASE_URL = "sqlite:///var/trainplan.db"  # relative to the working directory: ./var/trainplan.db
KiB = 1024

# Setting name -> environment variable. DATABASE_URL keeps its conventional unprefixed name.
ENV_NAMES: dict[str, str] = {
    "database_url": "DATABASE_URL",
    "host": "TRAINPLAN_HOST",
    "port": "TRAINPLAN_PORT",
    "workers": "TRAINPLAN_WORKERS",
    "log_level": "TRAINPLAN_LOG_LEVEL",
    "max_body_bytes": "TRAINPLAN_MAX_BODY_BYTES",
    "max_upload_bytes": "TRAINPLAN_MAX_UPLOAD_BYTES",
    "max_search_time_s": "TRAINPLAN_MAX_SEARCH_TIME_S",
    "default_page_size": "TRAINPLAN_PAGE_SIZE",
    "max_page_size": "TRAINPLAN_MAX_PAGE_SIZE",
    "plan_cache_size": "TRAINPLAN_PLAN_CACHE_SIZE",
    "templates_dir": "TRAINPLAN_TEMPLATES_DIR",
}


def _default_templates_dir() -> Path:
    """The packaged templates (app/paths.py): a checkout's templates/, or the copy inside an installed wheel."""
    return TEMPLATES_DIR


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    database_url: str = Field(
        DEFAULT_DATABASE_URL,
        description="SQLAlchemy URL of the plan store: sqlite:///path (created on first start, WAL mode) or "
        "postgresql+psycopg://user:password@host:5432/db.",
    )
    host: str = Field("127.0.0.1", description="Address `trainplan serve` binds to (0.0.0.0 in containers).")
    port: int = Field(8000, ge=1, le=65535, description="TCP port of `trainplan serve`.")
    workers: int = Field(1, ge=1, le=64, description="uvicorn worker processes (planning is CPU-bound: ~1 per core).")
    log_level: str = Field("info", pattern="^(critical|error|warning|info|debug|trace)$",
                           description="uvicorn log level.")
    max_body_bytes: int = Field(
        1024 * KiB, ge=1024, description="Largest request body accepted (413 above it), uploads included."
    )
    max_upload_bytes: int = Field(512 * KiB, ge=1, description="Largest config.json upload accepted by the form.")
    max_search_time_s: float = Field(
        10.0, gt=0, le=600, description="Cap on training.search_time_limit_s for every search the service runs."
    )
    default_page_size: int = Field(20, ge=1, le=1000, description="GET /plans page size when `limit` is not given.")
    max_page_size: int = Field(100, ge=1, le=1000, description="Largest `limit` GET /plans accepts.")
    plan_cache_size: int = Field(
        128, ge=0, le=100_000, description="Search results kept in memory, keyed by the full request and the "
        "planner version (0 = off). Truncated searches are never cached.",
    )
    templates_dir: Path = Field(
        default_factory=_default_templates_dir, description="Directory holding templates/web (the HTML form)."
    )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        """Settings from the environment (or `environ`), then `overrides` (e.g. CLI flags)."""
        env = os.environ if environ is None else environ
        values: dict[str, object] = {name: env[var] for name, var in ENV_NAMES.items() if env.get(var, "") != ""}
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls(**values)
        except ValidationError as exc:
            problems = [f"{ENV_NAMES.get(e.field, e.field)}: {e.message}" for e in field_errors(exc)]
            raise ValueError("invalid service settings: " + "; ".join(problems)) from None

    @property
    def database_kind(self) -> str:
        return self.database_url.split(":", 1)[0].split("+", 1)[0]
