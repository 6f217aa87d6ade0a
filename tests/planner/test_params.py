"""Derived parameter counts against published sizes and the closed-form GPT count."""

from __future__ import annotations

import pytest

from app.planner import catalog, params
from app.planner.specs import ModelSpec

from .conftest import preset

EXACT = [
    "bloom-176b",
    "llama-2-7b",
    "llama-2-13b",
    "llama-2-70b",
    "llama-3-8b",
    "llama-3-70b",
    "llama-3-405b",
    "mixtral-8x7b",
    "mixtral-8x22b",
]


@pytest.mark.parametrize("name", EXACT)
def test_exact_published_counts(name: str) -> None:
    row = next(r for r in catalog.model_presets() if r["name"] == name)
    assert preset(name).num_parameters == int(row["published_params"])


@pytest.mark.parametrize("row", catalog.model_presets(), ids=lambda r: r["name"])
def test_every_preset_within_one_percent_of_its_published_size(row: dict[str, object]) -> None:
    m = preset(str(row["name"])).model_copy(update={"mtp_num_layers": 0})  # published sizes: the main model's
    rounding = float(row.get("published_precision", 0.0))  # type: ignore[arg-type]  # "1T" is a rounded figure
    assert m.num_parameters == pytest.approx(float(row["published_params"]), rel=max(0.01, rounding))  # type: ignore[arg-type]
    if "published_active_params" in row:
        assert m.num_active_parameters == pytest.approx(
            float(row["published_active_params"]),  # type: ignore[arg-type]
            rel=max(0.02, rounding),
        )


def test_gpt_count_matches_narayanan_closed_form() -> None:
    """Narayanan et al. 2021 eq. (2): P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)), plus the final LayerNorm."""
    m = preset("gpt3-175b")
    L, h, V, s = m.num_layers, m.hidden_size, m.vocab_size, m.seq_length
    closed = 12 * L * h**2 * (1 + 13 / (12 * h) + (V + s) / (12 * L * h))
    assert m.num_parameters == round(closed) + 2 * h


def test_deepseek_v3_mla_attention_by_hand() -> None:
    """MLA: q down 7168x1536 + q norm + q up 1536x(128*192) + kv down 7168x576 + kv norm + kv up 512x(128*256)
    + out 16384x7168 = 187.1M per layer (DeepSeek-V3 report: 671B total, 37B active)."""
    m = preset("deepseek-v3-like").model_copy(update={"mtp_num_layers": 0})  # the report counts MTP apart
    expected = 7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256 + 128 * 128 * 7168
    assert params.attention_params(m) == expected
    assert m.num_parameters == pytest.approx(671e9, rel=0.001)


def test_mixtral_active_parameters_by_hand() -> None:
    m = preset("mixtral-8x7b")
    expert = 3 * 4096 * 14336  # gate, up, down
    assert m.num_parameters - m.num_active_parameters == 32 * (8 - 2) * expert


def test_tp_shards_split_matrices_but_not_norms() -> None:
    m = preset("llama-2-7b")
    whole = params.layer_shard(m, tp=1, ep=1, etp=1, moe=False).dense
    quarter = params.layer_shard(m, tp=4, ep=1, etp=1, moe=False).dense
    norms = 2 * params.norm_params(m)
    assert quarter == (whole - norms) // 4 + norms


def test_expert_shard_by_ep_and_etp() -> None:
    m = preset("mixtral-8x7b")
    shard = params.layer_shard(m, tp=2, ep=4, etp=1, moe=True)
    assert shard.expert == 2 * params.expert_params(m)  # 8 experts / EP 4, not split by TP


def test_tied_output_lives_on_last_stage_only_with_pp() -> None:
    m = ModelSpec(num_layers=4, hidden_size=64, num_attention_heads=4, vocab_size=1000, seq_length=16)
    assert params.output_shard(m, tp=1, pp=1) == params.norm_params(m)
    assert params.output_shard(m, tp=2, pp=2) == params.norm_params(m) + 1000 * 64 // 2
