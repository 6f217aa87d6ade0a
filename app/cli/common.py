"""What every verb shares: reading the request (a file or stdin), the saved clusters it may name, and bad input
reported field by field with exit code 2."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from app.planner.errors import FieldError, field_errors, value_error


class RequestError(ValueError):
    """The request file cannot be read or parsed."""


def read_request(path: str) -> dict[str, Any]:
    """The request object in a file (or stdin), read as strictly as the service reads a body (app/service/jsonbody):
    nesting, NaN, numbers past range and keys given twice are errors naming their place, never a traceback."""
    from app.service.errors import Refused
    from app.service.jsonbody import BodyError, parse_json

    try:
        raw = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        raise RequestError(f"cannot read request {path!r}: {exc.strerror}") from None
    try:  # JSON is UTF-8 text; a byte-order mark in front (Windows editors write one) is not part of it
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:  # name the file and the first byte that is not UTF-8
        byte = raw[exc.start]
        raise RequestError(
            f"cannot read request {path!r}: not UTF-8 text (byte 0x{byte:02x} at offset {exc.start})"
        ) from None
    try:
        data = parse_json(text)
    except BodyError as exc:
        first = exc.errors[0]
        if first.field:  # a value at a path (cluster.num_nodes: NaN ...): named as the service names it
            raise Refused(exc.errors) from None
        syntax = first.message.startswith("not valid JSON")
        raise RequestError(f"request is {first.message}" if syntax else f"request: {first.message}") from None
    if not isinstance(data, dict):
        raise RequestError("the request must be a JSON object with keys model, cluster, training")
    return data


def fail(errors: list[FieldError]) -> int:
    for e in errors:
        print(f"error: {e}", file=sys.stderr)
    return 2


def notify(notices: list[str]) -> None:
    """What the service says about how it read a request (a plan's `notices`: a config.json model trained past its
    context, a saved cluster's hosts cut to the node count), on stderr so that `--json` stays JSON. The CLI dropped
    them and planned in silence (QA 2026-12-08)."""
    for notice in notices:
        print(f"note: {notice}", file=sys.stderr)


def input_error(exc: ValueError, field: str = "") -> int:
    """Report bad input (pydantic's errors field by field, the planner's InputError with its field); exit code 2."""
    return fail(field_errors(exc) if isinstance(exc, ValidationError) else value_error(exc, field))


def database_error(exc: Exception) -> FieldError:
    """An unreachable or unreadable DATABASE_URL (SQLAlchemy's error) in one line: its driver's first line."""
    first = str(getattr(exc, "orig", None) or exc).splitlines()[0]
    return FieldError("", f"DATABASE_URL: cannot open the database: {first}")


def saved_clusters(name: str) -> Any:
    """A saved cluster from the service's database (DATABASE_URL), for requests that name one. A database that cannot
    be opened is refused in a line, as the account verbs say it (it was SQLAlchemy's traceback, exit 1: QA)."""
    from sqlalchemy.exc import SQLAlchemyError

    from app.service.clusters import lookup
    from app.service.errors import Refused
    from app.settings import Settings
    from app.store import ClusterStore, PlanStore

    settings = Settings.from_env()
    try:
        store = PlanStore(settings.database_url, settings.sqlite_synchronous)
        store.init()
        try:
            return lookup(ClusterStore(store.engine))(name)
        finally:
            store.close()
    except SQLAlchemyError as exc:
        raise Refused([database_error(exc)], status_code=503) from None
