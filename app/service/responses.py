"""Answers the API and the pages share: a body gzipped when the client takes it."""

from __future__ import annotations

import gzip

from fastapi import Request
from fastapi.responses import Response

MIN_GZIP_BYTES = 1024


def accepts_gzip(request: Request) -> bool:
    """Whether Accept-Encoding takes gzip (any case) at a weight above 0 (`gzip;q=0.5` does, `gzip;Q=0` does not)."""
    for part in request.headers.get("accept-encoding", "").lower().split(","):
        coding, *params = (p.strip() for p in part.split(";"))
        if coding != "gzip":
            continue
        weight = next((p.removeprefix("q=").strip() for p in params if p.replace(" ", "").startswith("q=")), "1")
        try:
            return float(weight) > 0
        except ValueError:
            return False
    return False


def compressed(
    request: Request, body: bytes, media_type: str, status_code: int = 200, headers: dict[str, str] | None = None
) -> Response:
    """The body as is, or gzipped when the client accepts it and it is worth it (a result page: ~10x smaller)."""
    out = {"X-Content-Type-Options": "nosniff", "Vary": "Accept-Encoding", **(headers or {})}
    if len(body) >= MIN_GZIP_BYTES and accepts_gzip(request):
        body = gzip.compress(body, compresslevel=6)
        out["Content-Encoding"] = "gzip"
    return Response(body, status_code=status_code, media_type=media_type, headers=out)
