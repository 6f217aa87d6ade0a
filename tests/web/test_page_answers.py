"""Web addresses answer with a page, whatever the client accepts (QA 2026-12-07: /p/<id>?rank=0, -1 or abc was the
API's JSON 422 where ?rank=50 was the HTML not-found page; GET /whatif, a what-if reloaded or bookmarked, was the
API's JSON 405); the JSON API keeps its JSON errors."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.api.conftest import SMALL


@pytest.mark.parametrize(("rank", "status"), [("0", 404), ("-1", 404), ("50", 404), ("abc", 422), ("1.5", 422)])
def test_a_rank_that_is_no_ranked_plan_is_a_page(web: Any, rank: str, status: int) -> None:
    """Out of range: the not-found page (as rank 50 was); no number: the bad-address page."""
    created = web.post("/plans", json=SMALL).json()
    count = len(created["result"]["plans"])
    page = web.get(f"/p/{created['id']}", params={"rank": rank}, headers={"accept": "*/*"})
    assert page.status_code == status and page.headers["content-type"].startswith("text/html"), page.text[:200]
    assert f"ranks 1..{count}" in page.text
    assert web.get(f"/p/{created['id']}", params={"rank": "+1"}).status_code == 200
    api = web.get(f"/plans/{created['id']}/artifacts", params={"rank": rank}, headers={"accept": "*/*"})
    assert api.headers["content-type"].startswith("application/json") and api.status_code in (404, 422)


def test_a_what_if_address_opened_again_goes_to_its_plan(web: Any) -> None:
    created = web.post("/plans", json=SMALL).json()
    page = web.get(f"/p/{created['id']}").text
    assert f'action="/whatif?from={created["id"]}"' in page  # the what-if's address names its plan
    again = web.get("/whatif", params={"from": created["id"]}, headers={"accept": "*/*"}, follow_redirects=False)
    assert again.status_code == 303 and again.headers["location"] == f"/p/{created['id']}#whatif"
    for query in ({}, {"from": "0123456789abcdef"}, {"from": "nope"}):
        bare = web.get("/whatif", params=query, headers={"accept": "*/*"})
        assert bare.status_code == 404 and bare.headers["content-type"].startswith("text/html"), bare.text[:200]
        assert re.search(r"A what-if is made from a plan&#39;s page", bare.text)
    # the what-if itself still posts there and plans
    r = web.post(f"/whatif?from={created['id']}", data={"whatif.from": created["id"]}, follow_redirects=False)
    assert r.status_code == 303, r.text[:300]
