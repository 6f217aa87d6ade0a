"""A config.json model planned at a longer sequence than its max_position_embeddings says so in a notice (QA
2026-12-07: it planned with no word); at or below it, nothing is said."""

from __future__ import annotations

from typing import Any

from tests.api.conftest import SMALL
from tests.web.test_forms import LLAMA_CONFIG


def _notices(web: Any, seq_length: int) -> list[str]:
    body = {**SMALL, "model": {"hf_config": LLAMA_CONFIG, "seq_length": seq_length}}
    r = web.post("/plans", json=body)
    assert r.status_code == 201, r.text
    return [n for n in r.json()["notices"] if n.startswith("model.seq_length")]


def test_a_sequence_longer_than_the_config_supports_is_said(web: Any) -> None:
    longest = LLAMA_CONFIG["max_position_embeddings"]
    assert _notices(web, 2 * longest) == [
        f"model.seq_length: {2 * longest:,} is longer than config.json's max_position_embeddings ({longest:,}), the "
        "longest context the model supports: planned as asked; training at it extends the model's context"
    ]
    assert _notices(web, longest) == []
