"""A MaxText plan (framework jax) through the service: stored and shown with its stack and interval basis, and its
files refused by name, not a 500."""

from __future__ import annotations

from fastapi.testclient import TestClient


def test_a_maxtext_plan_is_stored_and_shown(client: TestClient) -> None:
    body = {
        "model": "llama-2-70b",
        "cluster": {"num_nodes": 8, "gpu": "H100-SXM"},
        "training": {"global_batch_size": 128, "framework": "jax", "precision": "fp8"},
    }
    r = client.post("/plans", json=body)
    assert r.status_code == 201, r.text
    page = client.get(f"/p/{r.json()['id']}")
    assert page.status_code == 200
    assert "MaxText (JAX/XLA)" in page.text
    assert "from 12 measured runs" in page.text  # its interval comes from its own validation rows
    assert "jax is not rendered" in page.text
