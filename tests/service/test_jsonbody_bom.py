"""A leading UTF-8 byte order mark is ignored (RFC 8259 section 8.1 lets a parser do so) by the one strict reader the
form, the API and the CLI share; anywhere else U+FEFF is text, or not JSON (QA 2026-12-07)."""

from __future__ import annotations

from typing import Any

import pytest

from app.service.jsonbody import BodyError, parse_json, parse_json_object
from tests.api.conftest import SMALL


def test_a_leading_bom_is_ignored() -> None:
    assert parse_json('\ufeff{"a": 1}', "hf.config") == {"a": 1}
    assert parse_json_object('\ufeff{"a": 1}'.encode(), "application/json") == {"a": 1}
    assert parse_json('{"a": "\ufeff"}') == {"a": "\ufeff"}  # inside a string it is text
    with pytest.raises(BodyError, match="not valid JSON"):
        parse_json('\ufeff\ufeff{"a": 1}')  # one mark, at the start, is all RFC 8259 lets go


def test_the_api_takes_a_body_with_a_bom(web: Any) -> None:
    import json

    body = b"\xef\xbb\xbf" + json.dumps(SMALL).encode()
    r = web.post("/plans", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 201, r.text
    assert r.json()["request"] == SMALL
