"""Random requests through what the service does with them (parse, plan, render the top plans, estimate a layout):
each ends in an answer or in an input error that names its field, never in another exception. The two bugs a fuzz
like this found (2026-12-05) are pinned by their own tests (tests/planner/test_mtp.py, tests/api/test_misc.py);
this keeps the search for the next one running. Every plan.json rendered must load in the launcher."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from app.planner import plan
from app.planner.api import estimate
from app.planner.errors import InputError
from app.render.options import RenderOptions
from app.render.render import render
from app.service.errors import Refused
from app.service.requests import parse_estimate_request, parse_plan_request
from launcher import spec as launcher_spec

PRESETS = ["tiny-gpt", "llama-2-7b", "llama-3-8b", "llama-3-8b-128k", "mixtral-8x7b", "qwen3-30b-a3b",
           "deepseek-v3-like", "bloom-176b", "gpt3-175b"]  # fmt: skip
GPUS = ["A100-40GB", "A100-80GB", "H100-SXM", "H200", "B200", "GB200", "L40S", "MI300X"]
FIELD_FIRST = re.compile(r"^[a-z_][a-z_0-9.\[\]]*: ")  # a render refusal starts with the field it is about


@st.composite
def custom_models(draw: st.DrawFn) -> dict[str, Any]:
    heads = draw(st.sampled_from([1, 2, 8, 16, 32]))
    model: dict[str, Any] = {
        "num_layers": draw(st.sampled_from([1, 2, 3, 7, 12, 61])),
        "hidden_size": draw(st.sampled_from([64, 256, 1000, 2048])),
        "num_attention_heads": heads,
        "vocab_size": draw(st.sampled_from([1, 100, 32000])),
        "seq_length": draw(st.sampled_from([1, 16, 512, 4096, 65536])),
        "swiglu": draw(st.booleans()),
        "num_query_groups": draw(st.sampled_from([1, heads])),
    }
    if draw(st.booleans()):
        model.update(num_experts=draw(st.sampled_from([2, 8, 64])), moe_router_topk=draw(st.sampled_from([1, 2, 8])),
                     moe_ffn_hidden_size=draw(st.sampled_from([64, 768])),
                     mtp_num_layers=draw(st.sampled_from([0, 1, 2])))  # fmt: skip
    return model


def models() -> st.SearchStrategy[Any]:
    preset = st.builds(lambda p, s: {"preset": p} | ({"seq_length": s} if s else {}), st.sampled_from(PRESETS),
                       st.sampled_from([None, 1, 128, 8192, 131072]))  # fmt: skip
    return st.one_of(preset, custom_models())


PINS = {
    "tp": [1, 2, 3, 8], "pp": [1, 2, 4], "cp": [1, 2], "vpp": [1, 2, 3], "dp": [1, 2, 4], "ep": [1, 2, 8],
    "etp": [1, 2],
    "micro_batch_size": [1, 2, 3], "recompute": ["none", "selective", "full"], "zero_stage": [0, 1, 2, 3],
    "offload_optimizer": ["none", "cpu", "nvme"], "offload_param": ["none", "cpu"], "num_nodes": [1, 2],
    "recompute_modules": [["mlp"], ["core_attn"], ["moe_act", "layernorm"]], "recompute_num_layers": [1, 2, 7],
    "moe_token_dispatcher": ["alltoall", "flex"], "cpu_offloading_num_layers": [1, 100],
    "megatron_fsdp": ["optim", "optim_grads", "optim_grads_params"], "distributed_optimizer": [True, False],
    "sequence_parallel": [True, False], "cp_comm_type": ["p2p", "all_gather", "a2a", "a2a+p2p"],
    "tp_comm_overlap": [True, False], "fp8_param_gather": [True, False],
}  # fmt: skip


def assert_finite(value: Any) -> None:
    """Every number in a JSON document is finite."""
    if isinstance(value, float):
        assert math.isfinite(value), value
    for item in value.values() if isinstance(value, dict) else value if isinstance(value, list) else ():
        assert_finite(item)


def some_of(choices: dict[str, list[Any]], most: int) -> st.SearchStrategy[dict[str, Any]]:
    """A few of the fields (at most `most`), each with one of its values."""
    keys = st.dictionaries(st.sampled_from(sorted(choices)), st.none(), max_size=most)
    return keys.flatmap(lambda ks: st.fixed_dictionaries({k: st.sampled_from(choices[k]) for k in ks}))


@st.composite
def trainings(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "global_batch_size": draw(st.sampled_from([1, 3, 8, 64, 256])),
        "framework": draw(st.sampled_from(["megatron", "deepspeed", "megatron-deepspeed", "pytorch-fsdp"])),
        "precision": draw(st.sampled_from(["bf16", "fp16", "fp8"])),
        "objective": draw(st.sampled_from(["throughput", "min_gpus", "headroom"])),
        "memory_headroom": draw(st.sampled_from([0.0, 0.1, 0.5])),
        "optimizer_states": draw(st.sampled_from(["fp32", "bf16"])),
        "flash_attention": draw(st.booleans()),
        "pinned": draw(some_of(PINS, 2)),
        "search_time_limit_s": 2.0,
    }


def clusters() -> st.SearchStrategy[dict[str, Any]]:
    nodes, per_node = st.sampled_from([1, 2, 3, 5]), st.sampled_from([1, 2, 4, 6, 8])
    return st.builds(
        lambda n, g, gpu: {"num_nodes": n, "gpus_per_node": g, "gpu": gpu}, nodes, per_node, st.sampled_from(GPUS)
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=models(), cluster=clusters(), training=trainings())
def test_a_random_plan_request_is_answered_or_names_its_field(
    model: dict[str, Any], cluster: dict[str, Any], training: dict[str, Any]
) -> None:
    raw = {"model": model, "cluster": cluster, "training": training}
    try:
        result = plan(parse_plan_request(raw).request)
    except (Refused, InputError, ValidationError):
        return
    assert all(group.message for group in result.rejected)
    assert_finite(json.loads(result.model_dump_json()))  # a NaN or infinity would fail the service's JSON response
    for rank in range(1, min(2, len(result.plans)) + 1):
        try:
            arts = render(result, rank, RenderOptions(master_addr="10.0.0.1"))
        except ValueError as exc:  # the renderer's refusals name their field first
            assert FIELD_FIRST.match(str(exc)), str(exc)
            continue
        # the launcher takes every plan the planner makes (its plan.json checks agree with the planner's rules)
        assert not [n for n in arts.notes if "launcher/spec.py refuses" in n], arts.notes
        if "plan.json" in arts.files:
            assert (
                launcher_spec.loads(arts.files["plan.json"]).parallel.world_size
                == result.plans[rank - 1].layout.world_size
            )


PARALLEL = {
    "tp": [1, 2, 3, 8], "pp": [1, 2, 3, 4], "vpp": [1, 2, 3], "dp": [1, 2, 8], "cp": [1, 2], "ep": [1, 2, 8],
    "etp": [1, 2], "zero_stage": [0, 1, 3], "distributed_optimizer": [True, False], "micro_batch_size": [1, 2, 3],
    "recompute": ["none", "selective", "full"], "recompute_method": ["uniform", "block"],
    "recompute_num_layers": [1, 2, 40], "first_stage_layers": [0, 1, 5], "last_stage_layers": [1, 5],
    "account_for_embedding_in_pipeline_split": [True], "sequence_parallel": [True, False],
    "pipeline_layout": ["Et|(t*2|)*15t|L", "Et*16|t*16L", "E|t*80|L", "t|E|L", "EL"],
    "cp_comm_type": ["p2p", "a2a", "a2a+p2p"], "offload_optimizer": ["none", "cpu"],
    "cpu_offloading_num_layers": [1, 500],
    "moe_ep_overlap": [True, False], "moe_token_dispatcher": ["alltoall", "flex"], "fp8_param_gather": [True, False],
    "megatron_fsdp": ["optim_grads", "optim_grads_params"], "schedule": ["1f1b", "interleaved"],
}  # fmt: skip


def _training(framework: str, precision: str) -> dict[str, Any]:
    return {"global_batch_size": 64, "framework": framework, "precision": precision}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    model=st.sampled_from(["llama-2-7b", "mixtral-8x7b", "deepseek-v3-like", "tiny-gpt"]),
    cluster=clusters(),
    training=st.builds(
        _training, st.sampled_from(["megatron", "deepspeed", "pytorch-fsdp"]), st.sampled_from(["bf16", "fp8"])
    ),
    parallel=some_of(PARALLEL, 6),
)
def test_a_random_estimate_is_answered_or_names_its_field(
    model: str, cluster: dict[str, Any], training: dict[str, Any], parallel: dict[str, Any]
) -> None:
    raw = {"model": model, "cluster": cluster, "training": training, "parallel": parallel}
    try:
        est = estimate(parse_estimate_request(raw))
    except (Refused, ValidationError):
        return
    except InputError as exc:
        assert exc.field and exc.message
        return
    assert est.feasible == (not est.reasons)
    assert_finite(json.loads(est.model_dump_json()))
