"""Bad input: every malformed or out-of-range request gets a 4xx naming the field and the reason, never a 500."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from app.planner import PlanRequest
from app.planner.errors import field_errors
from tests.api.conftest import TINY, make_sqlite_client


def _errors(r: Any) -> dict[str, str]:
    body = r.json()
    assert body["detail"], body
    return {e["field"]: e["message"] for e in body["errors"]}


def _with(path: str, value: Any, base: dict[str, Any] = TINY) -> dict[str, Any]:
    body = copy.deepcopy(base)
    *parents, leaf = path.split(".")
    target = body
    for p in parents:
        if not isinstance(target.get(p), dict):
            target[p] = {}
        target = target[p]
    target[leaf] = value
    return body


@pytest.mark.parametrize(
    ("path", "value", "field", "words"),
    [
        ("cluster.num_nodes", 0, "cluster.num_nodes", "greater than or equal to 1"),
        ("cluster.num_nodes", "many", "cluster.num_nodes", "expected a number (got 'many')"),
        ("cluster.num_nodes", "2", "cluster.num_nodes", "expected a number, not a string (got '2')"),  # QA 12-06
        ("training.pinned.tp", "2", "training.pinned.tp", "not a string"),
        ("render.master_port", "29500", "render.master_port", "not a string"),
        ("cluster.gpus_per_node", 1000, "cluster.gpus_per_node", "less than or equal to 256"),
        ("cluster.gpu", "H900", "cluster.gpu", "unknown gpu"),
        ("cluster.nics", ["mlx5_0; rm -rf /"], "cluster.nics", "not a plain name"),
        ("model", "llama-9", "model", "unknown model preset"),
        ("training.global_batch_size", -1, "training.global_batch_size", "greater than or equal to 1"),
        ("training.precision", "fp4", "training.precision", "bf16"),
        ("training.pinned.tp", 0, "training.pinned.tp", "greater than or equal to 1"),
        ("training.surprise", 1, "training.surprise", "unknown field"),
        ("training.memory_headroom", 0.9, "training.memory_headroom", "less than or equal to 0.5"),
        ("render.job_name", "Bad Name!", "render.job_name", "not a job name"),
        ("render.master_port", 80, "render.master_port", "greater than or equal to 1024"),
        ("model", {"preset": "llama-2-7b", "name": "n" * 300}, "model.name", "300 characters, at most 100"),
        # pydantic said "Unable to parse input string as an integer" of the number 1e30 (QA 2026-12-08)
        ("training.global_batch_size", 1e30, "training.global_batch_size", "too large for this whole-number field"),
    ],
)
def test_bad_field_is_named_with_its_reason(sqlite_client: Any, path: str, value: Any, field: str, words: str) -> None:
    r = sqlite_client.post("/plans", json=_with(path, value))
    assert r.status_code == 422
    errors = _errors(r)
    assert field in errors, errors
    assert words.lower() in errors[field].lower()
    # the field is named once: "render.job_name: job_name: ..." read twice (QA, 2026-12-06)
    assert not errors[field].startswith(field.rsplit(".", 1)[-1] + ": "), errors[field]
    assert not errors[field].startswith(field + ": "), errors[field]  # "model.name: model.name: 300 ..." (QA)


def test_api_reports_the_same_errors_as_the_cli(sqlite_client: Any) -> None:
    bad = _with("cluster.num_nodes", 0, _with("training.global_batch_size", "x"))
    with pytest.raises(ValidationError) as exc:
        PlanRequest(**bad)
    expected = [{"field": e.field, "message": e.message} for e in field_errors(exc.value)]
    assert sqlite_client.post("/plans", json=bad).json()["errors"] == expected


def test_missing_sections_are_each_named(sqlite_client: Any) -> None:
    errors = _errors(sqlite_client.post("/plans", json={"model": "tiny-gpt"}))
    assert set(errors) == {"cluster", "training"}
    assert all("required" in m.lower() for m in errors.values())


def test_every_bad_field_is_reported_at_once(sqlite_client: Any) -> None:
    body = _with("render.job_name", "BAD", _with("cluster.num_nodes", 0))
    assert {"render.job_name", "cluster.num_nodes"} <= set(_errors(sqlite_client.post("/plans", json=body)))


def test_a_planner_value_error_after_validation_is_a_422(sqlite_client: Any) -> None:
    r = sqlite_client.post("/plans", json=_with("training.pinned.num_nodes", 5))  # the cluster has 1 node
    assert r.status_code == 422
    assert "training.pinned.num_nodes" in _errors(r)


def test_pins_that_divide_no_gpu_count_searched_are_a_422_naming_the_numbers(sqlite_client: Any) -> None:
    """tp 3 on one node of 8 GPUs: no world the search tries holds it, which is the user's input to fix, not an
    empty search ("searched 0 candidates")."""
    r = sqlite_client.post("/plans", json=_with("training.pinned.tp", 3, _with("cluster.gpus_per_node", 8)))
    assert r.status_code == 422
    assert _errors(r)["training.pinned.tp"].endswith("3 divides none of the GPU counts the search tries (8)")
    both = _with("training.pinned.pp", 3, _with("training.pinned.tp", 2, _with("cluster.gpus_per_node", 8)))
    r = sqlite_client.post("/plans", json=both)
    assert r.status_code == 422
    expected = "tp(2) x pp(3) = 6 divides none of the GPU counts the search tries (8)"
    assert _errors(r)["training.pinned"].endswith(expected)


def test_settings_no_layout_can_meet_are_a_422_naming_the_field(sqlite_client: Any) -> None:
    """Expert parallelism pinned on a dense model, FP8 on a GPU without FP8 tensor cores: every candidate fails one
    rule, so the search stored a plan of nothing ("9885 of 9885 candidates fail ep_needs_moe"), with no advice
    (QA, 2026-12-07). They are the user's input to fix."""
    ep = sqlite_client.post("/plans", json=_with("training.pinned.ep", 2, _with("cluster.gpus_per_node", 8)))
    assert ep.status_code == 422, ep.text
    assert (
        _errors(ep)["training.pinned.ep"] == "2 > 1 but tiny-gpt has no experts: expert parallelism needs an MoE model"
    )
    fp8 = sqlite_client.post(
        "/plans",
        json=_with("training.precision", "fp8", _with("cluster.gpu", "A100-80GB", _with("cluster.gpus_per_node", 8))),
    )
    assert fp8.status_code == 422, fp8.text
    assert _errors(fp8)["training.precision"] == "fp8 needs FP8 tensor cores, which A100-80GB has not: plan bf16"
    assert sqlite_client.get("/plans").json()["total"] == 0  # nothing stored


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "valid dictionary"),
        (b'"llama"', "valid dictionary"),
        (b"", "required"),
    ],
)
def test_malformed_bodies(sqlite_client: Any, content: bytes, words: str) -> None:
    r = sqlite_client.post("/plans", content=content, headers={"content-type": "application/json"})
    assert r.status_code == 422
    assert words.lower() in r.json()["detail"].lower()


def test_query_and_path_parameters(sqlite_client: Any) -> None:
    assert "limit" in _errors(sqlite_client.get("/plans", params={"limit": 0}))
    assert "offset" in _errors(sqlite_client.get("/plans", params={"offset": -1}))
    assert "plan_id" in _errors(sqlite_client.get("/plans/NOT-AN-ID"))
    assert sqlite_client.get("/plans/0123456789abcdef").status_code == 404
    created = sqlite_client.post("/plans", json=TINY).json()
    assert "rank" in _errors(sqlite_client.get(f"/plans/{created['id']}/bundle.zip", params={"rank": 0}))


def test_body_over_the_limit_is_413(sqlite_url: str) -> None:
    with make_sqlite_client(sqlite_url, max_body_bytes=4096) as client:
        big = _with("model", {"preset": "tiny-gpt", "name": "x" * 5000})
        r = client.post("/plans", json=big)
        assert r.status_code == 413 and "4096 bytes" in r.json()["detail"]

        def chunks() -> Any:  # no Content-Length: the limit is counted as the body streams in
            yield json.dumps(big).encode()

        r = client.post("/plans", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413
        assert client.get("/plans").json()["total"] == 0
        assert client.post("/plans", json=TINY).status_code == 201  # small bodies still pass


def test_estimate_errors_name_the_parallel_field(sqlite_client: Any) -> None:
    r = sqlite_client.post("/estimate", json={**TINY, "parallel": {"tp": 0}})
    assert r.status_code == 422 and "parallel.tp" in _errors(r)
    # a layout that does not fit the cluster is evaluated all the same, and says why it is not feasible
    r = sqlite_client.post("/estimate", json={**TINY, "parallel": {"tp": 4, "dp": 4}})  # 16 GPUs on a 2-GPU cluster
    assert r.status_code == 200 and r.json()["feasible"] is False
    assert any("GPUs available(2)" in reason for reason in r.json()["reasons"])


# Any JSON value at any place in a valid request: the answer is a stored plan or a 4xx that names a field.
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**9)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=6,
)
PATHS = [
    "model",
    "model.preset",
    "cluster",
    "cluster.num_nodes",
    "cluster.gpus_per_node",
    "cluster.gpu",
    "cluster.gpu.memory_bytes",
    "cluster.nics",
    "cluster.hosts",
    "cluster.inter_node_GBps",
    "training",
    "training.global_batch_size",
    "training.precision",
    "training.framework",
    "training.objective",
    "training.pinned",
    "training.pinned.tp",
    "training.pinned.pp",
    "training.pinned.zero_stage",
    "training.pinned.micro_batch_size",
    "training.max_plans",
    "training.search_time_limit_s",
    "render",
    "render.job_name",
    "render.master_addr",
    "parallel",
]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.lists(st.tuples(st.sampled_from(PATHS), json_values), min_size=1, max_size=3))
def test_fuzzed_requests_never_get_a_500(sqlite_client: Any, changes: list[tuple[str, Any]]) -> None:
    body = _with("cluster.gpu", {"preset": "H100-SXM"}, {**TINY, "model": {"preset": "tiny-gpt"}})
    for path, value in changes:
        body = _with(path, value, body)
    r = sqlite_client.post("/plans", json=body)
    assert r.status_code in (201, 413, 422), r.text
    if r.status_code == 422:
        errors = r.json()["errors"]
        assert errors and all(e["message"] for e in errors)


@st.composite
def plausible_requests(draw: st.DrawFn) -> dict[str, Any]:
    """Requests within every spec's ranges: the planner and the renderer must answer all of them."""
    heads = draw(st.sampled_from([1, 2, 4, 8, 12, 16, 32]))
    model = {
        "name": "fuzz",
        "num_layers": draw(st.integers(1, 48)),
        "hidden_size": heads * draw(st.sampled_from([8, 64, 128])),
        "num_attention_heads": heads,
        "vocab_size": draw(st.integers(1, 64000)),
        "seq_length": draw(st.sampled_from([1, 128, 2048, 4096, 32768])),
        "swiglu": draw(st.booleans()),
    }
    cluster = {
        "num_nodes": draw(st.integers(1, 4)),
        "gpus_per_node": draw(st.sampled_from([1, 2, 4, 8])),
        "gpu": draw(st.sampled_from(["A100-40GB", "H100-SXM", "L40S", "MI300X"])),
    }
    training = {
        "global_batch_size": draw(st.integers(1, 512)),
        "framework": draw(st.sampled_from(["megatron", "deepspeed", "megatron-deepspeed"])),
        "precision": draw(st.sampled_from(["bf16", "fp16", "fp8"])),
        "objective": draw(st.sampled_from(["throughput", "min_gpus", "headroom"])),
    }
    return {"model": model, "cluster": cluster, "training": training}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=plausible_requests())
def test_plausible_requests_are_planned_or_refused_never_a_500(sqlite_url: str, body: dict[str, Any]) -> None:
    with make_sqlite_client(sqlite_url, max_search_time_s=1.0) as client:
        r = client.post("/plans", json=body)
        assert r.status_code in (201, 422), r.text
        if r.status_code == 201 and r.json()["chosen"]:
            pid = r.json()["id"]
            assert client.get(f"/p/{pid}").status_code == 200  # the page (and its charts) draw every plan
            assert client.get(f"/plans/{pid}/bundle.zip").status_code == 200
