"""What every verb shares: reading the request (a file or stdin), the saved clusters it may name, and bad input
reported field by field with exit code 2."""

from __future__ import annotations

import json
import sys
from typing import Any

from pydantic import ValidationError

from app.planner.errors import FieldError, field_errors, value_error


class RequestError(ValueError):
    """The request file cannot be read or parsed."""


def read_request(path: str) -> dict[str, Any]:
    try:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()  # noqa: SIM115
    except OSError as exc:
        raise RequestError(f"cannot read request {path!r}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:  # JSON is UTF-8 text: name the file and the first byte that is not
        byte = exc.object[exc.start]
        raise RequestError(
            f"cannot read request {path!r}: not UTF-8 text (byte 0x{byte:02x} at offset {exc.start})"
        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RequestError(f"request is not valid JSON: line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    if not isinstance(data, dict):
        raise RequestError("the request must be a JSON object with keys model, cluster, training")
    return data


def fail(errors: list[FieldError]) -> int:
    for e in errors:
        print(f"error: {e}", file=sys.stderr)
    return 2


def input_error(exc: ValueError, field: str = "") -> int:
    """Report bad input (pydantic's errors field by field, the planner's InputError with its field); exit code 2."""
    return fail(field_errors(exc) if isinstance(exc, ValidationError) else value_error(exc, field))


def saved_clusters(name: str) -> Any:
    """A saved cluster from the service's database (DATABASE_URL), for requests that name one."""
    from app.service.clusters import lookup
    from app.settings import Settings
    from app.store import ClusterStore, PlanStore

    settings = Settings.from_env()
    store = PlanStore(settings.database_url, settings.sqlite_synchronous)
    store.init()
    try:
        return lookup(ClusterStore(store.engine))(name)
    finally:
        store.close()
