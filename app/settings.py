"""The service's settings, read once from environment variables (no dotfiles, nothing scraped by prefix).

Every setting has one environment variable; `Settings.from_env()` names the variable in its error when a value
does not parse, so a misconfigured container fails at start with a message that says what to fix.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from app.paths import TEMPLATES_DIR
from app.planner.errors import field_errors

DEFAULT_DATABASE_URL = "sqlite:///var/trainplan.db"  # relative to the working directory: ./var/trainplan.db
KiB = 1024

# an allowed host: a name or IPv4 address, `*.` and a domain, or a bracketed IPv6 address
HOST_PATTERN = re.compile(r"(\*\.)?[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?|\[[0-9a-f:.]+\]")


def _host_entry(text: str) -> str:
    """An allowed host as the Host header is compared: lower case, without the root's dot (`*.` stays invalid)."""
    host = text.strip().lower()
    return host[:-1] if host.endswith(".") and not host.endswith("*.") else host


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
    "sqlite_synchronous": "TRAINPLAN_SQLITE_SYNCHRONOUS",
    "anonymous_read": "TRAINPLAN_ANONYMOUS_READ",
    "rate_limit_per_minute": "TRAINPLAN_RATE_LIMIT_PER_MINUTE",
    "rate_limit_burst": "TRAINPLAN_RATE_LIMIT_BURST",
    "session_hours": "TRAINPLAN_SESSION_HOURS",
    "trusted_origins": "TRAINPLAN_TRUSTED_ORIGINS",
    "allowed_hosts": "TRAINPLAN_ALLOWED_HOSTS",
    "planner_processes": "TRAINPLAN_PLANNER_PROCESSES",
    "planner_memory_mib": "TRAINPLAN_PLANNER_MEMORY_MIB",
    "max_estimate_time_s": "TRAINPLAN_MAX_ESTIMATE_TIME_S",
    "max_deadline_time_s": "TRAINPLAN_MAX_DEADLINE_TIME_S",
    "max_result_bytes": "TRAINPLAN_MAX_RESULT_BYTES",
    "idempotency_hours": "TRAINPLAN_IDEMPOTENCY_HOURS",
}


def _default_planner_processes() -> int:
    """One planner process per core (planning is CPU-bound), at most 8."""
    return max(1, min(8, os.cpu_count() or 1))


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
    log_level: str = Field(
        "info", pattern="^(critical|error|warning|info|debug|trace)$", description="uvicorn log level."
    )
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
        128,
        ge=0,
        le=100_000,
        description="Search results kept in memory, keyed by the full request and the "
        "planner version (0 = off). Truncated searches are never cached.",
    )
    templates_dir: Path = Field(
        default_factory=_default_templates_dir, description="Directory holding templates/web (the HTML form)."
    )
    sqlite_synchronous: Literal["FULL", "NORMAL"] = Field(
        "FULL",
        description="SQLite's synchronous setting (WAL mode): FULL fsyncs the log at every commit, so an "
        "acknowledged plan survives a power loss; NORMAL may lose the last commits before a checkpoint.",
    )
    anonymous_read: bool = Field(
        False,
        description="Let requests without a token or login read plans, the catalogue and the pages "
        "(read-only); off: everything but /healthz and the login page needs an account.",
    )
    rate_limit_per_minute: int = Field(
        600,
        ge=0,
        le=1_000_000,
        description="Requests per minute per token, login session or (anonymous) client "
        "address, per server process (0 = no limit); 429 with Retry-After above it.",
    )
    rate_limit_burst: int = Field(60, ge=1, le=1_000_000, description="Requests allowed at once above that rate.")
    session_hours: float = Field(12.0, gt=0, le=24 * 90, description="Lifetime of a web login.")
    trusted_origins: tuple[str, ...] = Field(
        (),
        description="Origins (scheme://host:port) besides the service's own whose browser POSTs are accepted; "
        "comma-separated. Cross-origin form posts from anywhere else are refused (403).",
    )
    allowed_hosts: tuple[str, ...] = Field(
        ("*",),
        description="Host names (the Host header, without its port) the service answers; comma-separated, "
        "`*.example.com` for a domain's subdomains, `*` for any (the default). Others get a 400: a page that "
        "rebinds its own DNS name to this service's address reads nothing through it.",
    )
    planner_processes: int = Field(
        default_factory=_default_planner_processes,
        ge=1,
        le=64,
        description="Processes that run searches and estimates (default: one per core, at most 8). A request "
        "that runs past its time cap, or whose client goes away, has its process stopped.",
    )
    planner_memory_mib: int = Field(
        2048,
        ge=64,
        le=1_048_576,
        description="Address-space limit of each planner process, MiB.",
    )
    max_estimate_time_s: float = Field(5.0, gt=0, le=600, description="Time cap of one POST /estimate.")
    max_deadline_time_s: float = Field(
        30.0, gt=0, le=3600, description="Time budget of one cheapest-within-a-deadline search (POST /deadline)."
    )
    max_result_bytes: int = Field(
        16 * 1024 * KiB,
        ge=64 * KiB,
        le=1024 * 1024 * KiB,
        description="Largest search or estimate result (JSON bytes) the service returns or stores.",
    )
    idempotency_hours: float = Field(
        24.0,
        gt=0,
        le=24 * 365,
        description="How long an Idempotency-Key keeps answering with the plan it made.",
    )

    @field_validator("database_url")
    @classmethod
    def _a_database_url(cls, value: str) -> str:
        """A URL SQLAlchemy can read, of a database this service ships a driver for (it was a traceback from
        SQLAlchemy at the first query)."""
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            url = make_url(value)
        except ArgumentError:
            raise ValueError(
                f"{value!r} is not a database URL (sqlite:///path or postgresql+psycopg://user:password@host:5432/db)"
            ) from None
        kind = url.get_backend_name()
        if kind not in ("sqlite", "postgresql", "postgres"):
            raise ValueError(f"{kind!r} databases are not supported: sqlite or postgresql")
        if kind == "sqlite" and (url.database or ":memory:") == ":memory:":
            # sqlite:// and sqlite:/// are a database in memory, one per connection: the service started, printed an
            # admin password no connection could use, then answered 503 to every /plans (QA)
            raise ValueError(
                f"{value!r} names no database file (an in-memory SQLite database is lost at exit and not shared "
                "between connections): give a path, e.g. sqlite:///var/trainplan.db or sqlite:////srv/trainplan.db"
            )
        return value

    @field_validator("trusted_origins", mode="before")
    @classmethod
    def _split_origins(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(o.strip().rstrip("/") for o in value.split(",") if o.strip())
        return value

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _split_hosts(cls, value: object) -> object:
        if isinstance(value, str):
            value = tuple(h for h in value.split(",") if h.strip())
        if isinstance(value, (tuple, list)):  # as the Host header is compared: any case, a root dot or not
            value = tuple(_host_entry(h) if isinstance(h, str) else h for h in value)
        return value

    @field_validator("allowed_hosts")
    @classmethod
    def _host_patterns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        """Names, or `*.` and a domain, or `*`: a port or a scheme in an entry never matched a Host header, so every
        request was refused."""
        if not value:
            raise ValueError("names no host: give host names, or * for any")
        for host in value:
            if host != "*" and not HOST_PATTERN.fullmatch(host):
                raise ValueError(
                    f"{host!r} is not a host name: give names without scheme or port (trainplan.example.com, "
                    "*.example.com, 10.0.0.5, [::1]) or *"
                )
        return value

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        override_names: Mapping[str, str] | None = None,
        **overrides: object,
    ) -> Settings:
        """Settings from the environment (or `environ`), then `overrides` (e.g. CLI flags; None = not given). An
        error names where the value came from: its variable, or for an override its name in `override_names` (the
        CLI's `--port` said TRAINPLAN_PORT, QA)."""
        env = os.environ if environ is None else environ
        values: dict[str, object] = {name: env[var] for name, var in ENV_NAMES.items() if env.get(var, "") != ""}
        given = {k: v for k, v in overrides.items() if v is not None}
        values.update(given)
        names = {**ENV_NAMES, **{k: (override_names or {}).get(k, k) for k in given}}
        try:
            return cls(**values)
        except ValidationError as exc:
            problems = [f"{names.get(e.field, e.field)}: {e.message}" for e in field_errors(exc)]
            raise ValueError("invalid service settings: " + "; ".join(problems)) from None

    @property
    def database_kind(self) -> str:
        return self.database_url.split(":", 1)[0].split("+", 1)[0]
