"""The result page's cost panel refuses fewer tokens than one step, as POST /deadline refuses train_tokens, beside
the field with the value kept (QA 2026-12-07: tokens=1 showed "0.0 s" in every row, and 5e-324 blank cells)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.conftest import SMALL
from tests.web.html_dom import element


@pytest.mark.parametrize("tokens", ["1", "5e-324", "262143"])
def test_tokens_below_one_step_are_refused_beside_the_field(web: Any, tokens: str) -> None:
    created = web.post("/plans", json=SMALL).json()
    training, model = created["result"]["training"], created["result"]["model"]
    step = training["global_batch_size"] * model["seq_length"]
    page = web.get(f"/p/{created['id']}", params={"tokens": str(step - 1) if tokens == "262143" else tokens})
    assert page.status_code == 200
    said = element(page.text, "field-tokens")[0]
    assert f"is less than one step's {step:,} tokens (global_batch_size {training['global_batch_size']} x " in said
    assert '<table class="cost">' not in page.text  # no rows of another token count under the typed one
    training_1 = {**SMALL["training"], "train_tokens": 1}  # the API's own refusal says the same
    assert "1 is less than one step's" in web.post("/plans", json={**SMALL, "training": training_1}).text


def test_one_step_of_tokens_is_priced(web: Any) -> None:
    created = web.post("/plans", json=SMALL).json()
    step = created["result"]["training"]["global_batch_size"] * created["result"]["model"]["seq_length"]
    page = web.get(f"/p/{created['id']}", params={"tokens": str(step)})
    assert '<table class="cost">' in page.text and "is less than one step" not in page.text


@pytest.mark.parametrize("train_tokens", [123_456_789, 1e12, 2.5e11 + 1])
def test_the_requests_token_count_is_prefilled_as_it_is(web: Any, train_tokens: float) -> None:
    """The panel's input was filled with f"{train_tokens:g}" (six digits): a request's 123,456,789 tokens read
    1.23457e+08, and pressing "Show time and cost" (to add a price) priced 123,457,000 tokens; the note under the
    table said the same rounded number."""
    created = web.post("/plans", json={**SMALL, "training": {**SMALL["training"], "train_tokens": train_tokens}})
    assert created.status_code == 201, created.text
    page = web.get(f"/p/{created.json()['id']}").text
    value = next(a.get("value") for tag, a in element(page, "field-tokens")[1] if a.get("name") == "tokens")
    assert value is not None and float(value) == train_tokens
    assert f"{train_tokens:,.0f} tokens at each plan's predicted tokens/s" in page
    again = web.get(f"/p/{created.json()['id']}", params={"tokens": value, "price": "2"}).text
    assert f"{train_tokens:,.0f} tokens at each plan's predicted tokens/s" in again
