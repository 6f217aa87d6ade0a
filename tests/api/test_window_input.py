"""Bad sliding-window input through POST /plans: a 422 naming the field and the number, never a 500."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient


def request(**model: Any) -> dict[str, Any]:
    return {
        "model": {"preset": "llama-2-7b", "num_layers": 4, **model},
        "cluster": {"num_nodes": 1, "gpu": "H100-SXM"},
        "training": {"global_batch_size": 8},
    }


@pytest.mark.parametrize(
    ("model", "named"),
    [
        ({"sliding_window": 0}, "sliding_window"),
        ({"sliding_window": "wide"}, "sliding_window"),
        ({"sliding_window": 128, "window_attn_skip_freq": 1}, "window_attn_skip_freq"),
        ({"window_attn_skip_freq": 2}, "window_attn_skip_freq(2) is set but sliding_window is not"),
    ],
)
def test_bad_windows_are_named(client: TestClient, model: dict[str, Any], named: str) -> None:
    r = client.post("/plans", json=request(**model))
    assert r.status_code == 422, r.text
    assert named in r.text


def test_a_windowed_plan_is_stored_with_its_window(client: TestClient) -> None:
    r = client.post("/plans", json=request(sliding_window=1024, window_attn_skip_freq=2))
    assert r.status_code == 201, r.text
    stored = client.get(f"/plans/{r.json()['id']}").json()
    text = str(stored)
    assert "'sliding_window': 1024" in text and "'window_attn_skip_freq': 2" in text
