"""Hostile input (issue 15, items 3-5): each case that once was a 500 or a stored plan that could not be read back
is a 4xx naming the field and the numbers; the estimate is bounded; security headers are on every response."""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import pytest

from app.planner.results import PlanResult
from app.service.compute import PlannerPool
from app.service.errors import Refused
from app.service.planning import PlanCache, Work, create_plan
from app.service.requests import parse_plan_request
from app.settings import Settings
from app.store import PlanStore
from tests.api.conftest import SMALL, TINY, make_sqlite_client


def _with(path: str, value: Any, base: dict[str, Any] = TINY) -> dict[str, Any]:
    body = copy.deepcopy(base)
    *parents, leaf = path.split(".")
    target = body
    for p in parents:
        target = target.setdefault(p, {}) if isinstance(target.get(p, {}), dict) else target
    target[leaf] = value
    return body


def _errors(r: Any) -> dict[str, str]:
    return {e["field"]: e["message"] for e in r.json()["errors"]}


H100 = {"preset": "H100-SXM"}
# (path, value, field named, words in the message): each of these was accepted once (201, then 500 on every read)
UNREADABLE = [
    ("cluster.gpu", {**H100, "bf16_TFLOPs": 1e300}, "cluster.gpu.bf16_TFLOPs", "100000"),
    ("cluster.gpu", {**H100, "bf16_TFLOPs": 5e-324}, "cluster.gpu.bf16_TFLOPs", "0.1"),
    ("cluster.gpu", {**H100, "network_GBps": 1.7e308}, "cluster.gpu.network_GBps", "10000"),
    ("cluster.gpu", {**H100, "nvlink_GBps": 3e-206}, "cluster.gpu.nvlink_GBps", "0.01"),
    ("cluster.gpu", {**H100, "hbm_TBps": 6.5e307}, "cluster.gpu.hbm_TBps", "1000"),
    ("cluster.inter_node_GBps", 1e308, "cluster.inter_node_GBps", "10000"),
    ("cluster.intra_node_GBps", 5e-324, "cluster.intra_node_GBps", "0.01"),
    ("cluster.cpu_adam_params_per_s", 6.4e307, "cluster.cpu_adam_params_per_s", "1000000000000000"),
    ("cluster.nvme_GBps", 5e-324, "cluster.nvme_GBps", "0.01"),
    ("cluster.cpu_memory_GiB", 1e308, "cluster.cpu_memory_GiB", "1048576"),
    ("training.train_tokens", 1e300, "training.train_tokens", "less than or equal to"),
    ("training.train_tokens", 5e-324, "training.train_tokens", "is less than one step's"),  # QA 2026-12-07
]


@pytest.mark.parametrize(("path", "value", "field", "words"), UNREADABLE)
def test_numbers_outside_physical_ranges_are_refused_with_the_range(
    sqlite_client: Any, path: str, value: Any, field: str, words: str
) -> None:
    r = sqlite_client.post("/plans", json=_with(path, value))
    assert r.status_code == 422, r.text
    errors = _errors(r)
    assert field in errors and words in errors[field], errors
    assert sqlite_client.get("/plans").json()["total"] == 0


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (
            b'{"model": "tiny-gpt", "cluster": {"num_nodes": 1, "gpu": "H100-SXM", "cpu_memory_GiB": Infinity}}',
            "Infinity is not a number JSON allows",
        ),
        (b'{"model": "tiny-gpt", "cluster": {"num_nodes": NaN}}', "NaN is not a number JSON allows"),
        (b'{"model": "tiny-gpt", "cluster": {"num_nodes": 1, "inter_node_GBps": 1e400}}', "too large"),
        (b'{"model": "tiny-gpt", "cluster": {"num_nodes": 1' + b"1" * 5000 + b"}}", "more than 4300 digits"),
        (b'{"model": {"preset": "tiny-gpt", "name": "\\ud800x"}}', "lone UTF-16 surrogate"),
        (b'{"model": {"preset": "tiny-gpt", "\\udfff": 1}}', "lone UTF-16 surrogate"),
        (b"[" * 100_000 + b"]" * 100_000, "nested more than 32 levels"),
        (b'{"model": ' + b'{"a": ' * 40 + b"1" + b"}" * 40 + b"}", "nested more than 32 levels"),
        (b'{"model": "tiny-gpt\xff"}', "not valid UTF-8"),
    ],
)
def test_json_the_python_parser_would_take_is_a_422(sqlite_client: Any, text: bytes, words: str) -> None:
    for url in ("/plans", "/estimate"):
        r = sqlite_client.post(url, content=text, headers={"content-type": "application/json"})
        assert r.status_code == 422, (url, r.text[:300])
        assert words in r.json()["detail"], r.json()["detail"][:300]


def test_a_body_that_is_not_json_is_415(sqlite_client: Any) -> None:
    r = sqlite_client.post("/plans", content=json.dumps(TINY), headers={"content-type": "text/plain"})
    assert r.status_code == 415 and "application/json" in r.json()["detail"]


@pytest.mark.parametrize(
    ("model", "field", "words"),
    [
        ({"preset": "llama-2-7b", "kv_channels": -64}, "model.kv_channels", "greater than or equal to 1"),
        ({"preset": "llama-2-7b", "kv_channels": 122405}, "model.kv_channels", "65536"),
        ({"preset": "llama-2-7b", "ffn_hidden_size": 2**62}, "model.ffn_hidden_size", "4194304"),
        ({"preset": "mixtral-8x7b", "num_experts": 18538139019746525184}, "model.num_experts", "65536"),
        (
            {
                "name": "huge",
                "num_layers": 1024,
                "hidden_size": 262144,
                "num_attention_heads": 4096,
                "vocab_size": 32000,
                "seq_length": 2048,
                "ffn_hidden_size": 4_194_304,
            },
            "model",
            "parameters, above the 1e+15",
        ),
    ],
)
def test_model_sizes_past_what_the_store_holds_are_refused(
    sqlite_client: Any, model: dict[str, Any], field: str, words: str
) -> None:
    for url, extra in (("/plans", {}), ("/estimate", {"parallel": {}})):
        r = sqlite_client.post(url, json={**TINY, "model": model, **extra})
        assert r.status_code == 422, r.text
        assert field in _errors(r) and words in _errors(r)[field], _errors(r)


@pytest.mark.parametrize(
    "hf_config",
    [
        {
            "model_type": "llama",
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "intermediate_size": 128,
            "vocab_size": 100,
            "max_position_embeddings": 64,
            "head_dim": [1, 2],
        },
        {
            "model_type": "mixtral",
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "vocab_size": 100,
            "max_position_embeddings": 64,
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
        },
        {
            "model_type": "qwen2_moe",
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "intermediate_size": 128,
            "vocab_size": 100,
            "max_position_embeddings": 64,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "mlp_only_layers": 7,
        },
        {
            "model_type": "llama",
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "intermediate_size": 128,
            "vocab_size": 100,
            "max_position_embeddings": 64,
            "attention_dropout": [0.1],
        },
        {
            "model_type": "gpt2",
            "n_embd": 64,
            "n_layer": 2,
            "n_head": 4,
            "vocab_size": 100,
            "n_positions": 64,
            "resid_pdrop": {"x": 1},
        },
    ],
)
def test_odd_config_json_values_are_a_422_on_the_model(sqlite_client: Any, hf_config: dict[str, Any]) -> None:
    r = sqlite_client.post("/plans", json={**TINY, "model": {"hf_config": hf_config}})
    assert r.status_code == 422, r.text
    assert any(f == "model" or f.startswith("model") for f in _errors(r)), _errors(r)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"offset": 2**63}, "offset"),
        ({"offset": 10**30}, "offset"),
        ({"limit": 2**70}, "limit"),
        ({"owner": "x" * 300}, "owner"),
    ],
)
def test_query_integers_past_the_databases_range_are_422(client: Any, params: dict[str, Any], field: str) -> None:
    r = client.get("/plans", params=params)
    assert r.status_code == 422 and field in _errors(r)


@pytest.mark.parametrize(
    ("parallel", "field", "words"),
    [
        ({"pp": 2_000_000}, "parallel.pp", "parallel.pp(2000000) > model.num_layers(4)"),
        ({"tp": 64}, "parallel.tp", "model.num_attention_heads"),
        ({"pp": 2, "vpp": 4}, "parallel.pp * parallel.vpp", "parallel.pp * parallel.vpp(8) > model.num_layers(4)"),
        ({"cp": 10**6}, "parallel.cp", "model.seq_length"),
        ({"ep": 8}, "parallel.ep", "model.num_experts(1)"),
        ({"dp": 10**7}, "parallel.dp", "training.global_batch_size(8)"),
        ({"micro_batch_size": 9}, "parallel.micro_batch_size", "training.global_batch_size(8)"),
    ],
)
def test_impossible_layouts_are_refused_before_any_work(
    sqlite_client: Any, parallel: dict[str, Any], field: str, words: str
) -> None:
    start = time.perf_counter()
    r = sqlite_client.post("/estimate", json={**TINY, "parallel": parallel})
    assert time.perf_counter() - start < 2.0
    assert r.status_code == 422, r.text
    errors = _errors(r)
    assert (field if "*" not in field else "parallel") in errors and words in r.json()["detail"], errors


@pytest.mark.parametrize(
    ("pinned", "field", "words"),
    [
        ({"cp": 137110}, "training.pinned.cp", "training.pinned.cp(137110) > the cluster's GPUs(2)"),
        ({"tp": 2, "pp": 2}, "training.pinned", "tp(2) * pp(2) = 4 > the cluster's GPUs(2)"),
        ({"num_nodes": 1, "dp": 4}, "training.pinned.dp", "training.pinned.num_nodes x cluster.gpus_per_node(2)"),
    ],
)
def test_pins_larger_than_the_cluster_are_refused(
    sqlite_client: Any, pinned: dict[str, Any], field: str, words: str
) -> None:
    """A pinned cp of 137,110 on a small cluster once crashed the search (ZeroDivisionError, a 500)."""
    r = sqlite_client.post("/plans", json=_with("training.pinned", pinned))
    assert r.status_code == 422 and field in _errors(r) and words in r.json()["detail"], r.text[:400]


BIG_PIPELINE = {
    "model": {
        "name": "deep",
        "num_layers": 1024,
        "hidden_size": 1024,
        "num_attention_heads": 16,
        "vocab_size": 32000,
        "seq_length": 2048,
    },
    "cluster": {"num_nodes": 128, "gpu": "H100-SXM"},
    "training": {"global_batch_size": 1_000_000},
    "parallel": {"pp": 1024},
}


def test_the_largest_layout_allowed_is_answered_within_the_caps(sqlite_client: Any) -> None:
    start = time.perf_counter()
    r = sqlite_client.post("/estimate", json=BIG_PIPELINE)
    assert r.status_code == 200 and len(r.json()["memory"]["stages"]) == 1024
    assert time.perf_counter() - start < 5.0 and len(r.content) < 2_000_000


def test_estimate_time_and_output_caps(sqlite_url: str) -> None:
    with make_sqlite_client(sqlite_url, max_estimate_time_s=0.001) as client:
        r = client.post("/estimate", json=BIG_PIPELINE)
        assert r.status_code == 422 and "time cap of 0.001 s" in r.json()["detail"]
        assert client.post("/estimate", json={**TINY, "parallel": {}}).status_code in (200, 422)  # still serving
    with make_sqlite_client(sqlite_url, max_result_bytes=65536) as client:
        r = client.post("/estimate", json=BIG_PIPELINE)
        assert r.status_code == 422 and "above this service's cap of 65,536" in r.json()["detail"]
        assert client.post("/estimate", json={**TINY, "parallel": {}}).status_code == 200


# Planner processes fork from a forkserver that imports the planner only (not the web stack), so a small search
# fits in 64 MiB: this one keeps 200 ranked plans of a 405B model on 2,048 GPUs.
HUNGRY = {
    "model": "llama-3-405b",
    "cluster": {"num_nodes": 256, "gpus_per_node": 8, "gpu": "H100-SXM"},
    "training": {"global_batch_size": 2048, "max_plans": 200},
}


def test_a_planner_process_out_of_memory_is_a_422_and_the_service_goes_on(sqlite_url: str) -> None:
    with make_sqlite_client(sqlite_url, planner_memory_mib=64, planner_processes=1) as client:
        r = client.post("/plans", json=HUNGRY)
        assert r.status_code == 422, r.text[:500]
        assert "64 MiB" in r.json()["detail"] or "out of memory" in r.json()["detail"], r.text[:500]
        assert client.get("/plans").json()["total"] == 0
        assert client.get("/healthz").status_code == 200


def test_every_accepted_hostile_plan_reads_back(sqlite_client: Any) -> None:
    """Edge values inside every range: whatever is stored (201) reads back (200), file and page included."""
    edges = [
        ("cluster.gpu", {**H100, "bf16_TFLOPs": 0.1, "fp16_TFLOPs": 0.1, "hbm_TBps": 0.01}),
        ("cluster.gpu", {**H100, "bf16_TFLOPs": 100_000, "nvlink_GBps": 100_000}),
        ("cluster.inter_node_GBps", 0.001),
        ("cluster.intra_node_GBps", 100_000),
        ("cluster.cpu_memory_GiB", 1_048_576),
        ("training.train_tokens", 1e17),
        ("cluster.cpu_adam_params_per_s", 1e3),
        ("training.global_batch_size", 10_000_000),
    ]
    stored = []
    for path, value in edges:
        r = sqlite_client.post("/plans", json=_with(path, value))
        assert r.status_code in (201, 422), r.text
        if r.status_code == 201:
            stored.append(r.json()["id"])
    assert stored
    for pid in stored:
        assert sqlite_client.get(f"/plans/{pid}").status_code == 200
        assert sqlite_client.get(f"/p/{pid}").status_code == 200


class OverflowingPool(PlannerPool):
    """The real planner processes; the answer then carries an infinity, as an overflowing formula would make it
    (pydantic writes an infinite float as JSON null)."""

    def run(self, kind: str, payload: Any, timeout_s: float, client_gone: Any) -> str:
        result = PlanResult.model_validate_json(super().run(kind, payload, timeout_s, client_gone))
        stats = result.stats.model_copy(update={"seconds": float("inf")})
        return result.model_copy(update={"stats": stats}).model_dump_json()


def test_a_result_that_does_not_read_back_is_never_stored(sqlite_url: str) -> None:
    store = PlanStore(sqlite_url)
    store.init()
    pool = OverflowingPool(1, 2048, Settings().max_result_bytes)
    try:
        with pytest.raises(Refused) as exc:
            create_plan(
                store,
                TINY,
                lambda: parse_plan_request(TINY),
                Work(pool, Settings(), lambda: False),
                PlanCache(0),
                "alice",
            )
    finally:
        pool.close()
    assert exc.value.status_code == 422 and "does not read back" in str(exc.value)
    assert "stats.seconds" in str(exc.value)
    assert store.page(10, 0) == ([], 0)


SECURITY = {
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cross-origin-opener-policy": "same-origin",
}


def test_security_headers_on_every_kind_of_response(sqlite_url: str) -> None:
    with make_sqlite_client(sqlite_url, max_body_bytes=4096) as client:
        pid = client.post("/plans", json=SMALL).json()["id"]
        nobody = type(client)(client.app, raise_server_exceptions=False)
        answers = {
            "json 201": client.post("/plans", json=TINY),
            "json 200": client.get(f"/plans/{pid}"),
            "file": client.get(f"/plans/{pid}/artifacts/megatron_args.txt"),
            "zip": client.get(f"/plans/{pid}/bundle.zip"),
            "html": client.get(f"/p/{pid}"),
            "svg": client.get(f"/p/{pid}/memory.svg"),
            "css": client.get("/static/style.css"),
            "404": client.get("/plans/0123456789abcdef"),
            "422": client.post("/plans", json={}),
            "413": client.post(
                "/plans", content=b"{" + b" " * 5000 + b"}", headers={"content-type": "application/json"}
            ),
            "401": nobody.get("/plans"),
            "403 origin": client.post("/plans", json=TINY, headers={"Origin": "https://evil.example"}),
            "405": client.put("/plans"),
            "openapi": client.get("/openapi.json"),
            "docs": client.get("/docs"),
            "login": nobody.get("/login"),
            "redirect": nobody.get("/", follow_redirects=False),
            "healthz": client.get("/healthz"),
        }
        for name, r in answers.items():
            for header, value in SECURITY.items():
                assert r.headers.get(header) == value, (name, header, r.status_code)
            assert "frame-ancestors 'none'" in r.headers["content-security-policy"], name
        assert answers["json 200"].headers["cache-control"] == "no-store"
        assert answers["css"].headers["cache-control"].startswith("public")  # the route's own header is kept
        assert "script-src" not in answers["html"].headers["content-security-policy"]
        docs_csp = answers["docs"].headers["content-security-policy"]
        assert "script-src 'self';" in docs_csp and "http" not in docs_csp  # Swagger UI from this origin only
        assert answers["405"].status_code == 405 and answers["405"].headers["allow"] == "GET, POST, HEAD"
        # the body names what was refused and what is allowed (it had an empty error list)
        assert answers["405"].json()["errors"] == [
            {"field": "method", "message": "PUT is not allowed on /plans; allowed: GET, POST, HEAD"}
        ]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested more than 32 levels"),
        ('{"model_type": "llama", "hidden_size": NaN}', "NaN is not a number JSON allows"),
        ('{"model_type": "llama", "hidden_size": 1e400}', "too large"),
    ],
)
def test_the_forms_config_json_is_read_as_strictly(sqlite_client: Any, text: str, words: str) -> None:
    """Deeply nested form input was a RecursionError (500); it is the form again with the message at its field."""
    from app.web import forms
    from app.web.pages import SECTIONS

    values = forms.defaults(SECTIONS) | {"model_mode": "hf", "hf.config_text": text}
    r = sqlite_client.post("/", data=values, files={"hf.config": ("", b"")})  # multipart, as the page sends it
    assert r.status_code == 422 and words in r.text
    urlencoded = sqlite_client.post("/", data=values)  # a body the form parser refuses is still named, never a 400
    if urlencoded.status_code == 413:  # a field over the parser's part size: a JSON error that says so
        assert "the form could not be read" in urlencoded.json()["detail"]
    else:
        assert urlencoded.status_code == 422 and words in urlencoded.text
    assert sqlite_client.get("/plans").json()["total"] == 0


def test_head_is_answered_wherever_get_is(sqlite_client: Any) -> None:
    """HEAD /healthz (a load balancer's check) and every other GET route got a 405 listing GET (QA 2026-12-07):
    HEAD now gets GET's status and headers, no body, and the same authentication."""
    created = sqlite_client.post("/plans", json=TINY)
    assert created.status_code == 201
    plan_id = created.json()["id"]
    for path in ("/healthz", "/plans", f"/plans/{plan_id}", "/catalog/gpus", f"/p/{plan_id}"):
        get, head = sqlite_client.get(path), sqlite_client.head(path)
        assert (head.status_code, head.content) == (get.status_code, b""), path
        assert head.headers["content-type"] == get.headers["content-type"], path
    anonymous = sqlite_client.head(f"/plans/{plan_id}", headers={"Authorization": ""})
    assert anonymous.status_code == sqlite_client.get(f"/plans/{plan_id}", headers={"Authorization": ""}).status_code
    assert anonymous.status_code == 401
    refused = sqlite_client.put("/healthz")
    assert refused.status_code == 405 and refused.headers["allow"] == "GET, HEAD"  # the methods the path answers
    assert refused.json()["errors"][0]["message"].endswith("allowed: GET, HEAD")  # and its message says the same


class CappedPool(PlannerPool):
    """A planner process whose search stopped at its time cap, with the plans it found or none."""

    keep_plans = True

    def run(self, kind: str, payload: Any, timeout_s: float, client_gone: Any) -> str:
        result = PlanResult.model_validate_json(super().run(kind, payload, timeout_s, client_gone))
        stats = result.stats.model_copy(update={"truncated": True, "evaluated": 0})
        plans = result.plans if self.keep_plans else []
        return result.model_copy(update={"stats": stats, "plans": plans}).model_dump_json()


@pytest.mark.parametrize("keep_plans", [True, False])
def test_the_time_cap_notice_counts_what_the_page_counts_and_only_with_plans(keep_plans: bool) -> None:
    """The notice said "after 0 of its candidates" (full evaluations) beside "Examined 4,056 candidates", and said
    "these are the best plans found so far" of none, twice over with the suggestions (QA 2026-12-07)."""
    from app.service.planning import search

    pool = CappedPool(1, 2048, Settings().max_result_bytes)
    pool.keep_plans = keep_plans
    try:
        out = search(parse_plan_request(TINY).request, Work(pool, Settings(), lambda: False), PlanCache(0))
    finally:
        pool.close()
    capped = [n for n in out.notices if "time cap" in n]
    if keep_plans:
        assert capped == [
            f"the search hit its time cap ({out.result.training.search_time_limit_s:g} s) after examining "
            f"{out.result.stats.candidates:,} candidates: these are the best plans found so far"
        ]
    else:
        assert capped == []
