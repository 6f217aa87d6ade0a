"""A Hugging Face MoE model planned under DeepSpeed through the service: stored, its page shown, its files rendered
with the sparse blocks as ZeRO-3 leaf modules and the example trainer told to build transformers' network."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient


def test_a_mixtral_under_deepspeed_zero3_is_stored_shown_and_rendered(client: TestClient) -> None:
    r = client.post(
        "/plans",
        json={
            "model": "mixtral-8x7b",
            "cluster": {"num_nodes": 8, "gpu": "H100-SXM"},
            "training": {"global_batch_size": 256, "framework": "deepspeed", "pinned": {"zero_stage": 3}},
        },
    )
    assert r.status_code == 201, r.text
    plan_id = r.json()["id"]
    page = client.get(f"/p/{plan_id}")
    assert page.status_code == 200
    assert "planned as transformers 5 runs them by default (experts_implementation grouped_mm" in page.text
    ds = client.get(f"/plans/{plan_id}/artifacts/ds_config.json")
    assert ds.status_code == 200, ds.text
    classes = json.loads(ds.text)["zero_optimization"]["leaf_module"]["classes"]
    assert "transformers.models.mixtral.modeling_mixtral.MixtralSparseMoeBlock" in classes
    launch = client.get(f"/plans/{plan_id}/artifacts/torchrun.sh")
    assert launch.status_code == 200 and "--model-impl hf" in launch.text and "--num-experts 8" in launch.text
