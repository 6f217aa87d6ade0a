"""A torchtitan plan through the service: stored, its page shown with the stack and its op-level recomputation,
its files refused by name (no torchtitan config is rendered), and a stack that does not run the framework refused on
its field."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient


def request(stack: str, framework: str = "pytorch-fsdp") -> dict[str, Any]:
    return {
        "model": "llama-3-8b",
        "cluster": {"num_nodes": 2, "gpu": "H100-SXM"},
        "training": {
            "global_batch_size": 64,
            "framework": framework,
            "stack": stack,
            "pinned": {"recompute": "selective"},
        },
    }


def test_a_torchtitan_plan_is_stored_and_shown(client: TestClient) -> None:
    r = client.post("/plans", json=request("torchtitan-eager"))
    assert r.status_code == 201, r.text
    plan_id = r.json()["id"]
    stored = client.get(f"/plans/{plan_id}").json()
    assert "torchtitan-eager" in str(stored)
    page = client.get(f"/p/{plan_id}")
    assert page.status_code == 200
    assert "torchtitan without torch.compile" in page.text
    assert "recompute=selective" in page.text
    assert "recompute=core_attn" not in page.text


def test_a_torchtitan_stack_needs_its_framework(client: TestClient) -> None:
    r = client.post("/plans", json=request("torchtitan", framework="megatron"))
    assert r.status_code == 422, r.text
    assert "training.stack" in r.text and "pytorch-fsdp" in r.text
