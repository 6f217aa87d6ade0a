"""Every rendered Megatron argument set constructs megatron-core's TransformerConfig / ModelParallelConfig (or
MLATransformerConfig), passes Megatron-LM's own validate_args rules, and uses only flags the project defines."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from megatron_check import Flags, args_file_words, build_core_config, known_flags
from megatron_rules import megatron_rules

from app.planner import PlanRequest, plan
from app.render import Artifacts, render

LM_FLAGS = known_flags("megatron_lm_flags.txt")
MDS_FLAGS = known_flags("megatron_deepspeed_flags.txt")


def world_and_env(arts: Artifacts) -> tuple[int, dict[str, str]]:
    """From the PyTorchJob, not from the plan: replicas x nprocPerNode, and the container's environment."""
    job = list(yaml.safe_load_all(arts.files["pytorchjob.yaml"]))[-1]["spec"]
    replicas = sum(r["replicas"] for r in job["pytorchReplicaSpecs"].values())
    container = next(iter(job["pytorchReplicaSpecs"].values()))["template"]["spec"]["containers"][0]
    return replicas * int(job["nprocPerNode"]), {e["name"]: e["value"] for e in container.get("env", [])}


def _blackwell(header: str) -> bool:
    """A Blackwell GPU named in train.sh's header: B200, B300, GB200, GB300 (it read "B200" only, QA 2026-12-07)."""
    return re.search(r"\bG?B[23]00\b", header) is not None


def check_megatron(arts: Artifacts) -> Flags:
    fl = Flags(args_file_words(arts.files["megatron_args.txt"]))
    known = MDS_FLAGS if fl.has("--deepspeed") else LM_FLAGS
    unknown = sorted(set(fl.items) - known)
    assert not unknown, f"flags the project does not define: {unknown}"
    build_core_config(fl)
    world, env = world_and_env(arts)
    zero = None
    if "ds_config.json" in arts.files:
        zero = json.loads(arts.files["ds_config.json"])["zero_optimization"]["stage"]
    ds = json.loads(arts.files["ds_config.json"]) if "ds_config.json" in arts.files else None
    errors = megatron_rules(
        fl, world, env, zero, blackwell=_blackwell(arts.files["train.sh"].splitlines()[1]), ds_config=ds
    )
    assert not errors, errors
    return fl


def test_every_rendered_argument_set_is_accepted(megatron_core, all_rendered) -> None:
    checked = [label for label, _r, _k, arts in all_rendered if "megatron_args.txt" in arts.files]
    assert len(checked) >= 30
    for label, _result, _rank, arts in all_rendered:
        if "megatron_args.txt" in arts.files:
            try:
                check_megatron(arts)
            except Exception as exc:
                raise AssertionError(f"{label}: {exc}") from exc


def test_issue7_flags_are_rendered_where_the_plan_has_them(golden_rendered) -> None:
    moe = Flags(args_file_words(golden_rendered["h100x32-mixtral-8x7b-megatron-moe"][2].files["megatron_args.txt"]))
    assert moe.int("--num-experts") == 8 and moe.int("--moe-router-topk") == 2
    assert moe.int("--expert-model-parallel-size") == 4 and moe.int("--expert-tensor-parallel-size") == 2
    ds3 = Flags(
        args_file_words(golden_rendered["h100x64-deepseek-v3-like-fp8-uneven-pp"][2].files["megatron_args.txt"])
    )
    assert ds3.one("--fp8-format") == "hybrid" and ds3.has("--bf16") and ds3.one("--fp8-recipe") == "tensorwise"
    assert not ds3.has("--fp8-amax-history-len")  # current scaling keeps no amax history (delayed does)
    assert ds3.int("--decoder-first-pipeline-num-layers") == 3 and ds3.int("--decoder-last-pipeline-num-layers") == 3
    assert ds3.has("--multi-latent-attention") and ds3.int("--moe-shared-expert-intermediate-size") == 2048
    assert ds3.one("--moe-layer-freq") == "[0]*3+[1]*13" and ds3.int("--expert-tensor-parallel-size") == 1
    cp = Flags(args_file_words(golden_rendered["h100x32-llama3-8b-128k-megatron-cp"][2].files["megatron_args.txt"]))
    assert cp.int("--context-parallel-size") == 8 and cp.int("--num-layers-per-virtual-pipeline-stage") == 8


def test_megatron_core_rejects_what_megatron_rejects(megatron_core, golden_rendered) -> None:
    """The checks can fail: the same flags with one rule broken are refused by megatron-core or the rules."""
    arts = golden_rendered["h100x64-llama2-70b-megatron-ib"][2]
    words = args_file_words(arts.files["megatron_args.txt"])
    broken = Flags(words)
    broken.items["--num-attention-heads"] = ("66",)  # not a multiple of tp 4
    with pytest.raises(ValueError, match="num_attention_heads"):
        build_core_config(broken)
    world, env = world_and_env(arts)
    assert megatron_rules(Flags(words), world, {}, None)  # no CUDA_DEVICE_MAX_CONNECTIONS with TP 4
    assert megatron_rules(Flags(words), world - 8, env, None)  # world 56 is not a multiple of tp*pp = 16


@st.composite
def megatron_requests(draw: st.DrawFn) -> dict:
    model = draw(
        st.sampled_from(
            (
                "llama-2-7b",
                "llama-3-8b",
                "mixtral-8x7b",
                "qwen3-30b-a3b",
                "gpt3-175b",
                "llama-3-8b-128k",
                "deepseek-v3-like",
            )
        )
    )
    nodes = draw(st.sampled_from((1, 2, 4, 8, 16) if model != "deepseek-v3-like" else (32, 64)))
    precision = draw(st.sampled_from(("bf16", "fp16", "fp8")))
    return {
        "model": model,
        "cluster": {"num_nodes": nodes, "gpus_per_node": 8, "gpu": "H100-SXM"},
        "training": {
            "global_batch_size": draw(st.sampled_from((64, 256, 1024))),
            "precision": precision,
            "framework": "megatron",
            "max_plans": 5,
            "search_time_limit_s": 5,
        },
    }


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=megatron_requests())
def test_megatron_core_accepts_what_the_search_returns(megatron_core, request: dict) -> None:
    """Fails if megatron-core (or Megatron-LM's rules) rejects a combination the planner produced."""
    result = plan(PlanRequest(**request))
    event(f"{len(result.plans)} plans")
    for p in result.plans:
        check_megatron(render(result, p.rank))
