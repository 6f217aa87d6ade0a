"""Cheapest within a deadline (POST /deadline): each (GPU, node count) planned, ranked by cost, the deadline judged,
a bounded time, errors that name the field."""

from __future__ import annotations

from typing import Any

from app.service.deadline import node_counts, spread_order

BODY: dict[str, Any] = {
    "model": "llama-2-7b",
    "training": {"global_batch_size": 256, "train_tokens": 2e11},
    "deadline_days": 10,
    "gpus": [{"gpu": "H100-SXM", "price_per_gpu_hour": 2.5}, {"gpu": "A100-80GB", "price_per_gpu_hour": 1.3}],
    "nodes_min": 1,
    "nodes_max": 8,
    "node_counts": 4,
    "time_budget_s": 30,
}


def test_node_counts_and_their_order() -> None:
    assert node_counts(1, 4, 12) == [1, 2, 3, 4]
    assert node_counts(1, 64, 7) == [1, 2, 4, 8, 16, 32, 64]
    # as many counts as asked where the range has them: rounding made 1..100 try 11 of 12, and 41 of 64 (QA)
    assert node_counts(1, 100, 12) == [1, 2, 3, 4, 5, 8, 12, 19, 28, 43, 66, 100]
    assert len(node_counts(1, 100, 64)) == 64 and len(set(node_counts(1, 100, 64))) == 64
    assert spread_order([1, 2, 4, 8, 16]) == [1, 16, 4, 2, 8]


def test_the_cheapest_that_meets_the_deadline(sqlite_client: Any) -> None:
    r = sqlite_client.post("/deadline", json=BODY)
    assert r.status_code == 200, r.text
    d = r.json()
    costs = [o["cost"] for o in d["options"]]
    assert costs == sorted(costs) and [o["rank"] for o in d["options"]] == list(range(1, len(costs) + 1))
    assert d["node_counts"] == [1, 2, 4, 8] and len(d["options"]) + len(d["nothing_fits"]) + len(d["not_tried"]) == 8
    meets = [o for o in d["options"] if o["meets_deadline"]]
    assert d["best"] == meets[0]  # the cheapest of those meeting the deadline
    for o in d["options"]:
        assert o["num_gpus"] == 8 * o["num_nodes"]
        days = o["wall_days"] or o["days"]
        assert o["meets_deadline"] == (days <= 10)
        hours = days * 24 * o["num_gpus"]
        assert abs(o["cost"] - hours * o["price_per_gpu_hour"]) <= 1e-6 * o["cost"]
        assert abs(o["days"] - 2e11 / o["tokens_per_s"] / 86400) <= 1e-9 * o["days"]
    best = d["best"]["request"]
    stored = sqlite_client.post("/plans", json=best)  # every option carries the request that plans it
    assert stored.status_code == 201 and stored.json()["result"]["cluster"]["num_nodes"] == d["best"]["num_nodes"]


def test_an_options_request_plans_the_layout_it_priced(sqlite_client: Any) -> None:
    """Each option is planned for throughput on its node count; with the caller's objective headroom, its request
    kept headroom and POST /plans of it gave another layout (TP8 CP2 at a quarter of the tokens/s; QA, 2026-12-06)."""
    body = {**BODY, "training": {**BODY["training"], "objective": "headroom"}, "gpus": BODY["gpus"][:1]}
    body.update(nodes_min=2, nodes_max=2, node_counts=1)
    (option,) = sqlite_client.post("/deadline", json=body).json()["options"]
    assert option["request"]["training"]["objective"] == "throughput"
    planned = sqlite_client.post("/plans", json=option["request"]).json()["result"]["plans"][0]
    assert planned["estimate"]["time"]["tokens_per_s"] == option["tokens_per_s"]


def test_a_deadline_nothing_meets_says_so(sqlite_client: Any) -> None:
    d = sqlite_client.post("/deadline", json={**BODY, "deadline_days": 0.001}).json()
    assert d["best"] is None and d["options"] and not any(o["meets_deadline"] for o in d["options"])
    assert any("no plan meets 0.001 days" in n for n in d["notes"])


def test_the_time_budget_bounds_the_search_and_says_what_was_not_tried(sqlite_client: Any) -> None:
    big = {**BODY, "model": "llama-2-70b", "nodes_max": 64, "node_counts": 40, "time_budget_s": 0.3}
    d = sqlite_client.post("/deadline", json=big).json()
    assert d["time_budget_s"] == 0.3 and d["not_tried"], d
    # each says what this request can change (it named training.search_time_limit_s, which the page does not have)
    assert {m["reason"] for m in d["not_tried"]} <= {
        "the time budget ran out first",
        "its search ran out of the time left: a larger time_budget_s reaches it",
    }, d["not_tried"]
    assert len(d["options"]) + len(d["nothing_fits"]) + len(d["not_tried"]) == 2 * len(d["node_counts"])
    capped = sqlite_client.post("/deadline", json={**BODY, "time_budget_s": 3600}).json()
    assert capped["time_budget_s"] == 30 and any("capped at" in n for n in capped["notes"])


def test_bad_deadline_requests_name_the_field(sqlite_client: Any) -> None:
    cases = [
        ({**BODY, "nodes_min": 9}, "nodes_max", "nodes_max(8) < nodes_min(9)"),
        ({**BODY, "gpus": [BODY["gpus"][0], BODY["gpus"][0]]}, "gpus", "H100-SXM listed more than once"),
        # the catalogue reads names in any case: both were planned (QA, 2026-12-07)
        (
            {**BODY, "gpus": [BODY["gpus"][0], {"gpu": "h100-sxm", "price_per_gpu_hour": 2}]},
            "gpus",
            "H100-SXM, h100-sxm listed more than once",
        ),
        # under one step's tokens: every option trained in no time at all (QA, 2026-12-07)
        (
            {**BODY, "training": {**BODY["training"], "train_tokens": 5e-324}},
            "training.train_tokens",
            "is less than one step's 1,048,576 tokens (global_batch_size 256 x seq_length 4096)",
        ),
        ({**BODY, "gpus": [{"gpu": "H900", "price_per_gpu_hour": 1}]}, "gpus.0.gpu", "unknown gpu"),
        ({**BODY, "gpus": [{"gpu": "H100-SXM", "price_per_gpu_hour": -1}]}, "gpus.0.price_per_gpu_hour", "(got -1)"),
        ({**BODY, "training": {"global_batch_size": 256}}, "training.train_tokens", "tokens to train"),
        ({**BODY, "deadline_days": "soon"}, "deadline_days", "(got 'soon')"),
        # numbers as strings were read as numbers, though the schema says number (QA, 2026-12-06)
        ({**BODY, "deadline_days": "10"}, "deadline_days", "expected a number, not a string (got '10')"),
        ({**BODY, "gpus": [{"gpu": "H100-SXM", "price_per_gpu_hour": "2.5"}]}, "gpus.0.price_per_gpu_hour", "string"),
        ({**BODY, "nodes_max": True}, "nodes_max", "expected a number, got true"),
        # said in pydantic's words, and a pin silently replaced per candidate (QA, 2026-12-06)
        ({**BODY, "gpus": []}, "gpus", "give at least one GPU type with its price per GPU-hour"),
        (
            {**BODY, "training": {**BODY["training"], "pinned": {"num_nodes": 3}}},
            "training.pinned.num_nodes",
            "plans each node count from nodes_min to nodes_max itself",
        ),
    ]
    for body, field, words in cases:
        r = sqlite_client.post("/deadline", json=body)
        assert r.status_code == 422, (field, r.text)
        errors = {e["field"]: e["message"] for e in r.json()["errors"]}
        assert field in errors and words in errors[field], (field, errors)


def test_each_gpu_type_plans_on_its_own_node_size(sqlite_client: Any) -> None:
    """Without `gpus_per_node` an H100 option is 8 GPUs a node and a GB200 one a 4-GPU tray (all were 8); the
    option's request leaves the size to the GPU, as the caller did (stating it kept 8 GPUs a node through a what-if
    to GB200, QA 2026-12-07), and planning it gives the option's GPUs."""
    body = {**BODY, "gpus": [{"gpu": "H100-SXM", "price_per_gpu_hour": 2.5}, {"gpu": "GB200", "price_per_gpu_hour": 6}]}
    d = sqlite_client.post("/deadline", json={**body, "nodes_max": 4, "node_counts": 2}).json()
    sizes = {(o["gpu"], o["num_gpus"] // o["num_nodes"]) for o in d["options"]}
    assert sizes == {("H100-SXM", 8), ("GB200", 4)}, d
    assert not any("gpus_per_node" in o["request"]["cluster"] for o in d["options"])
    option = d["options"][0]
    planned = sqlite_client.post("/plans", json=option["request"]).json()
    assert planned["result"]["cluster"]["gpus_per_node"] * option["num_nodes"] == option["num_gpus"]
    assert any("each GPU type's own GPUs per node" in n for n in d["notes"])
    said = sqlite_client.post("/deadline", json={**body, "nodes_max": 4, "node_counts": 2, "gpus_per_node": 2}).json()
    assert {o["request"]["cluster"]["gpus_per_node"] for o in said["options"]} == {2}
