"""The form's fields come from the specs; form values become the request POST /plans takes, and back: request ->
form -> request is the identity for every preset, config.json imports and custom GPUs."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from app.planner import PlanRequest, catalog
from app.planner.errors import FieldError
from app.planner.gpu import Efficiency, GPUSpec
from app.planner.specs import ClusterSpec, ModelSpec, ParallelPins, TrainingSpec
from app.render import RenderOptions
from app.web import forms
from app.web.fields import FormField, to_text, to_value
from app.web.pages import SECTIONS
from app.web.presets import cluster_presets
from tests.web.hf_configs import HF_CONFIGS

SPECS = {
    "model": ModelSpec,
    "cluster": ClusterSpec,
    "training": TrainingSpec,
    "training.pinned": ParallelPins,
    "render": RenderOptions,
    "cluster.gpu": GPUSpec,
    "cluster.gpu.efficiency": Efficiency,
}
LLAMA_CONFIG = {
    "model_type": "llama",
    "hidden_size": 2048,
    "num_hidden_layers": 16,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "intermediate_size": 5632,
    "vocab_size": 32000,
    "max_position_embeddings": 2048,
    "hidden_act": "silu",
}


def form(**values: str) -> dict[str, str]:
    base = forms.defaults(SECTIONS)
    base.update({k.replace("__", "."): v for k, v in values.items()})
    return base


def spec_of(raw: dict[str, Any]) -> PlanRequest:
    return PlanRequest.model_validate({k: v for k, v in raw.items() if k != "render"})


def round_trip(raw: dict[str, Any]) -> dict[str, Any]:
    """The request the form gives back after "Edit and re-plan" of `raw`; asserts the specs are the same."""
    resolved = spec_of(raw)
    values = forms.from_request(SECTIONS, raw, resolved)
    again = forms.to_request(SECTIONS, values, None)
    assert spec_of(again).model_dump() == resolved.model_dump()
    assert RenderOptions.model_validate(again.get("render", {})) == RenderOptions.model_validate(raw.get("render", {}))
    return again


def test_every_field_of_every_spec_is_in_the_form() -> None:
    names = {f.name for f in forms.all_fields(SECTIONS)}
    skipped = {"training": {"pinned"}, "cluster.gpu": {"efficiency"}}  # their own sections
    for prefix, spec in SPECS.items():
        for name in spec.model_fields:
            if name not in skipped.get(prefix, set()):
                assert f"{prefix}.{name}" in names, f"{prefix}.{name} is not in the form"


def test_help_text_is_the_spec_description() -> None:
    checked = 0
    for f in forms.all_fields(SECTIONS):
        prefix, _, name = f.name.rpartition(".")
        if prefix in SPECS and f.name != "cluster.gpu":
            description = SPECS[prefix].model_fields[name].description
            # a field shown in GiB says GiB where its spec counts bytes
            assert f.help == (description.replace("bytes", "GiB") if f.scale > 1 else description), f.name
            checked += 1
    assert checked > 150
    memory = next(f for f in forms.all_fields(SECTIONS) if f.name == "cluster.gpu.memory_bytes")
    assert memory.help == "Device memory visible to the job, GiB."


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1e400", "'1e400' is not a number of GiB"),
        ("inf", "'inf' is not a number of GiB"),
        ("nan", "'nan' is not a number of GiB"),
        ("lots", "'lots' is not a number of GiB"),
        ("1e300", "at most 4096 GiB (got 1e+300)"),
        ("5000", "at most 4096 GiB (got 5000)"),
        ("0.1", "at least 0.25 GiB (got 0.1)"),
    ],
)
def test_a_gib_field_checks_its_number_in_gib(text: str, message: str) -> None:
    """The form converts GiB to the spec's bytes: a number with no bytes (infinite, not a number, past the range)
    is refused at its field in GiB, as typed, instead of overflowing or quoting bytes."""
    with pytest.raises(forms.FormError) as exc:
        forms.to_request(SECTIONS, form(cluster_mode="custom", cluster__gpu__memory_bytes=text), None)
    assert [(e.field, e.message) for e in exc.value.errors] == [("cluster.gpu.memory_bytes", message)]


def test_bounds_come_from_the_spec() -> None:
    fields = {f.name: f for f in forms.all_fields(SECTIONS)}
    assert fields["cluster.num_nodes"].attrs["min"] == "1"
    assert fields["cluster.gpus_per_node"].attrs["max"] == "256"
    assert fields["training.memory_headroom"].attrs == {"min": "0", "max": "0.5"}
    assert fields["training.memory_headroom"].hint == "0 – 0.5"
    assert [v for v, _ in fields["training.precision"].options] == ["bf16", "fp16", "fp8"]
    assert fields["training.pinned.sequence_parallel"].kind == "tristate"
    assert fields["training.pinned.recompute"].options[0] == ("", "search")
    assert fields["training.flash_attention"].kind == "bool" and fields["training.flash_attention"].default == "true"
    memory = fields["cluster.gpu.memory_bytes"]  # bytes inside, GiB in the form
    assert memory.scale == 2**30 and memory.label == "Memory (GiB)" and memory.attrs["min"] == "0.25"
    assert fields["model.rope_scaling"].kind == "json" and fields["cluster.profile"].kind == "json"
    assert fields["training.pinned.recompute_modules"].kind == "list"


@pytest.mark.parametrize("value", [0, 7, 2**40, 0.1, 1e-5, 3.3333333333333335, 1e17, 2.5e-7])
def test_numbers_come_back_exactly(value: float) -> None:
    kind = "int" if isinstance(value, int) else "float"
    f = FormField("x", "x", "", kind)  # type: ignore[arg-type]
    assert to_value(f, to_text(kind, value)) == value
    gib = FormField("m", "m", "", "int", scale=2**30)
    assert to_value(gib, to_text("int", 68_719_476_736, 2**30)) == 68_719_476_736  # 64 GiB
    assert to_value(gib, to_text("int", 85_520_809_984, 2**30)) == 85_520_809_984  # not a whole number of GiB


def test_defaults_make_a_valid_request_with_nothing_extra() -> None:
    request = forms.to_request(SECTIONS, form(), None)
    preset = cluster_presets()[0]
    assert request == {
        "model": "llama-2-7b",
        "cluster": {**preset.cluster_fields(), "num_nodes": 2},
        "training": {"global_batch_size": 512},
    }
    spec_of(request)


def test_dimensions_mode_starts_from_a_llama_block() -> None:
    """RoPE + RMSNorm + SwiGLU by default: CodeLlama-34B's shape is 34B (it was 20B without SwiGLU)."""
    values = form(
        model_mode="dims",
        model__name="codellama-34b",
        model__num_layers="48",
        model__hidden_size="8192",
        model__num_attention_heads="64",
        model__num_query_groups="8",
        model__ffn_hidden_size="22016",
        model__vocab_size="32000",
        model__seq_length="16384",
    )
    request = forms.to_request(SECTIONS, values, None)
    assert request["model"]["swiglu"] is True and request["model"]["untie_embeddings_and_output_weights"] is True
    assert 33.5e9 < spec_of(request).model.num_parameters < 34.0e9


def test_dimensions_mode_sends_the_typed_fields() -> None:
    values = form(
        model_mode="dims",
        model__name="mine",
        model__num_layers="12",
        model__hidden_size="768",
        model__num_attention_heads="12",
        model__vocab_size="50304",
        model__seq_length="1024",
        model__swiglu="",
        model__untie_embeddings_and_output_weights="",
        cluster_mode="custom",
        cluster__gpus_per_node="4",
        cluster__gpu="A100-80GB",
        cluster__nics="mlx5_0, mlx5_1 mlx5_2",
        training__flash_attention="",
    )
    request = forms.to_request(SECTIONS, values, None)
    assert request["model"] == {
        "name": "mine",
        "num_layers": 12,
        "hidden_size": 768,
        "num_attention_heads": 12,
        "vocab_size": 50304,
        "seq_length": 1024,
    }
    assert request["cluster"]["nics"] == ["mlx5_0", "mlx5_1", "mlx5_2"]
    assert request["cluster"]["gpu"] == "A100-80GB" and request["cluster"]["gpus_per_node"] == 4
    assert request["training"]["flash_attention"] is False  # unchecked box
    spec = spec_of(request)
    assert spec.model.num_layers == 12 and not spec.model.swiglu and spec.cluster.nics == ("mlx5_0", "mlx5_1", "mlx5_2")


def test_config_json_needs_a_training_sequence_length() -> None:
    """config.json's max_position_embeddings is the longest context, not the training length: the form asks."""
    with pytest.raises(forms.FormError) as exc:
        forms.to_request(SECTIONS, form(model_mode="hf"), json.dumps(HF_CONFIGS["llama-3.1-8b"]).encode())
    error = exc.value.errors[0]
    assert error.field == "hf.seq_length" and "max_position_embeddings = 131072" in error.message
    uploaded = forms.to_request(
        SECTIONS, form(model_mode="hf", hf__seq_length="4096", hf__name="my-llama"), json.dumps(LLAMA_CONFIG).encode()
    )
    assert uploaded["model"] == {"hf_config": LLAMA_CONFIG, "seq_length": 4096, "name": "my-llama"}
    pasted = forms.to_request(
        SECTIONS, form(model_mode="hf", hf__config_text=json.dumps(LLAMA_CONFIG), hf__seq_length="2048"), None
    )
    assert pasted["model"] == {"hf_config": LLAMA_CONFIG, "seq_length": 2048}
    spec = spec_of(uploaded)
    assert (spec.model.num_layers, spec.model.num_query_groups, spec.model.seq_length) == (16, 4, 4096)


@pytest.mark.parametrize(
    ("upload", "text", "words"),
    [
        (None, "", "choose a config.json"),
        (b"{oops", "", "not valid JSON: line 1"),
        (b"[1]", "", "JSON object"),
    ],
)
def test_bad_config_json_is_an_error_on_its_field(upload: bytes | None, text: str, words: str) -> None:
    with pytest.raises(forms.FormError) as exc:
        forms.to_request(SECTIONS, form(model_mode="hf", hf__config_text=text, hf__seq_length="4096"), upload)
    assert exc.value.errors[0].field == "hf.config" and words in exc.value.errors[0].message


def test_bad_json_in_a_json_field_names_it() -> None:
    with pytest.raises(forms.FormError) as exc:
        forms.to_request(SECTIONS, form(cluster_mode="custom", cluster__profile="{not json"), None)
    assert exc.value.errors == [
        FieldError(
            "cluster.profile", "not valid JSON: line 1 column 2: Expecting property name enclosed in double quotes"
        )
    ]


@pytest.mark.parametrize(
    ("values", "error"),
    [
        (  # a RecursionError out of json.loads: a 500 (QA)
            {"cluster_mode": "custom", "cluster__profile": "[" * 1000 + "]" * 1000},
            FieldError("cluster.profile", "nested more than 32 levels deep"),
        ),
        (
            {"model_mode": "dims", "model__rope_scaling": '{"factor": Infinity}'},
            FieldError("model.rope_scaling.factor", "Infinity is not a number JSON allows; send a finite number"),
        ),
        (
            {"model_mode": "hf", "hf__config_text": '{"model_type": "llama", "model_type": "gpt2"}'},
            FieldError(
                "hf.config.model_type",
                "the key 'model_type' is given more than once in one object; give it once (JSON readers differ on "
                "which value counts)",
            ),
        ),
    ],
)
def test_every_json_field_is_read_as_strictly_as_a_request_body(values: dict[str, str], error: FieldError) -> None:
    with pytest.raises(forms.FormError) as exc:
        forms.to_request(SECTIONS, form(**values), None)
    assert exc.value.errors[0] == error


def test_a_mode_error_is_shown_in_the_box_at_the_top() -> None:
    """The mode's radio buttons have no place for a message: it was said nowhere (QA)."""
    with pytest.raises(forms.FormError) as exc:
        forms.to_request(SECTIONS, form(model_mode="zzz"), None)
    assert exc.value.errors == [FieldError("model_mode", "must be one of preset, dims, hf (got 'zzz')")]
    assert forms.error_field(exc.value.errors[0], form(model_mode="zzz")) == ""


def test_text_in_a_number_field_reaches_the_spec_as_typed() -> None:
    """The spec then names the field and the text (the browser does not drop it: inputs are type=text)."""
    request = forms.to_request(SECTIONS, form(cluster__num_nodes="twelve"), None)
    assert request["cluster"]["num_nodes"] == "twelve"
    with pytest.raises(ValueError, match="num_nodes"):
        spec_of(request)


@pytest.mark.parametrize(
    ("text", "kind", "value"),
    [
        ("1,024", int, 1024),
        ("1_000", int, 1000),
        ("12,345.5", float, 12345.5),
        ("2.5", float, 2.5),
        ("12,5", float, "12,5"),  # a decimal comma: no number (it was 125, silently; QA 2026-12-07)
        ("2,50", float, "2,50"),
        ("1,02", int, "1,02"),
        ("10,0000", int, "10,0000"),
    ],
)
def test_commas_are_read_only_as_thousands_separators(text: str, kind: type, value: Any) -> None:
    from app.web.fields import typed_number

    assert typed_number(text, kind) == value
    request = forms.to_request(SECTIONS, form(cluster_mode="custom", cluster__inter_node_GBps="12,5"), None)
    with pytest.raises(ValueError, match=r"(?s)inter_node_GBps.*12,5"):
        spec_of(request)


def test_pins_and_render_options() -> None:
    values = form(
        training__pinned__tp="2",
        training__pinned__sequence_parallel="false",
        training__pinned__recompute="selective",
        training__pinned__recompute_modules="core_attn mlp",
        render__job_name="smoke",
        render__extra_args="--a --b",
    )
    request = forms.to_request(SECTIONS, values, None)
    assert request["training"]["pinned"] == {
        "tp": 2,
        "sequence_parallel": False,
        "recompute": "selective",
        "recompute_modules": ["core_attn", "mlp"],
    }
    assert request["render"] == {"job_name": "smoke", "extra_args": ["--a", "--b"]}
    spec = spec_of(request)
    assert spec.training.pinned.sequence_parallel is False and spec.training.pinned.tp == 2
    assert RenderOptions(**request["render"]).extra_args == ("--a", "--b")


def test_unknown_modes_and_presets_are_refused() -> None:
    with pytest.raises(forms.FormError, match="model_mode"):
        forms.to_request(SECTIONS, form(model_mode="magic"), None)
    with pytest.raises(forms.FormError, match="choose one of"):
        forms.to_request(SECTIONS, form(cluster_preset="cray-1"), None)


@pytest.mark.parametrize(
    ("field", "mode", "shown"),
    [
        ("model.seq_length", {"model_mode": "preset"}, "preset.seq_length"),
        ("model", {"model_mode": "preset"}, "preset.name"),
        ("model.num_layers", {"model_mode": "hf"}, "hf.config"),
        ("model.seq_length", {"model_mode": "hf"}, "hf.seq_length"),
        ("model.num_layers", {"model_mode": "dims"}, "model.num_layers"),
        ("cluster.gpu", {"cluster_mode": "preset"}, "cluster_preset"),
        ("cluster.num_nodes", {"cluster_mode": "preset"}, "cluster.num_nodes"),
        ("cluster.gpu", {"cluster_mode": "custom"}, "cluster.gpu"),
    ],
)
def test_errors_are_shown_where_the_value_was_typed(field: str, mode: dict[str, str], shown: str) -> None:
    assert forms.error_field(FieldError(field, "x"), mode) == shown


# -- the round trip --------------------------------------------------------------------------------------------

CLUSTER = {"num_nodes": 2, "gpu": "H100-SXM"}
TRAINING = {"global_batch_size": 64}


@pytest.mark.parametrize("preset", [p["name"] for p in catalog.model_presets()])
def test_every_preset_comes_back(preset: str) -> None:
    assert round_trip({"model": preset, "cluster": CLUSTER, "training": TRAINING})["model"] == preset
    changed = round_trip(
        {"model": {"preset": preset, "num_layers": 4, "seq_length": 1024}, "cluster": CLUSTER, "training": TRAINING}
    )
    assert changed["model"]["num_layers"] == 4  # written out field by field: nothing of the preset is lost


def test_edit_of_a_preset_plan_keeps_its_dimensions_behind_the_dimensions_tab() -> None:
    """ "Edit and re-plan" of a llama-2-7b plan left the Dimensions panel blank: SwiGLU and untied embeddings
    unticked, LayerNorm, learned positions, so its dimensions typed there planned a GELU/LayerNorm 6.59B model
    (QA 2026-12-07). The panel holds the preset's own dimensions: switching to it plans the same model."""
    raw = {"model": "llama-2-7b", "cluster": CLUSTER, "training": TRAINING}
    values = forms.from_request(SECTIONS, raw, spec_of(raw))
    assert values["model_mode"] == "preset"
    assert (values["model.swiglu"], values["model.untie_embeddings_and_output_weights"]) == ("true", "true")
    assert (values["model.normalization"], values["model.position_embedding_type"]) == ("RMSNorm", "rope")
    typed = {"num_layers": "32", "hidden_size": "4096", "num_attention_heads": "32", "vocab_size": "32000"}
    values.update({"model_mode": "dims", "model.seq_length": "4096", **{f"model.{k}": v for k, v in typed.items()}})
    dims = spec_of(forms.to_request(SECTIONS, values, None)).model
    assert dims.model_dump() == spec_of(raw).model.model_dump()


@pytest.mark.parametrize("name", sorted(HF_CONFIGS))
def test_every_config_json_import_comes_back(name: str) -> None:
    seq = min(4096, HF_CONFIGS[name].get("n_positions", 4096))  # GPT-2 trains within its 1,024 positions
    raw = {"model": {"hf_config": HF_CONFIGS[name], "seq_length": seq}, "cluster": CLUSTER, "training": TRAINING}
    again = round_trip(raw)
    assert spec_of(again).model.num_parameters == spec_of(raw).model.num_parameters
    window = ("sliding_window", "window_attn_skip_freq")  # Mistral-7B-v0.1's 4,096-token window comes back too
    assert [getattr(spec_of(again).model, k) for k in window] == [getattr(spec_of(raw).model, k) for k in window]


def test_qwen3_32b_keeps_its_head_dim() -> None:
    """The defect: a round trip dropped head_dim (kv_channels), so Qwen3-32B came back as 30.50B, not 32.76B."""
    raw = {
        "model": {"hf_config": HF_CONFIGS["qwen3-32b"], "seq_length": 4096},
        "cluster": CLUSTER,
        "training": TRAINING,
    }
    assert spec_of(raw).model.num_parameters == pytest.approx(32.76e9, rel=2e-3)
    assert spec_of(round_trip(raw)).model.num_parameters == spec_of(raw).model.num_parameters


def test_a_custom_64_gib_gpu_stays_64_gib() -> None:
    raw = {
        "model": "llama-2-7b",
        "training": TRAINING,
        "cluster": {"num_nodes": 2, "gpu": {"preset": "H100-SXM", "memory_bytes": 64 * 2**30}},
    }
    again = round_trip(raw)
    assert again["cluster"]["gpu"] == {"preset": "H100-SXM", "memory_bytes": 64 * 2**30}


GPU_NAMES = [g.name for g in catalog.gpus()]
NAME = st.from_regex(r"[a-z][a-z0-9\-]{0,10}", fullmatch=True)


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    """Requests with custom GPU numbers, hosts, NVMe paths, NICs, pins and render options."""
    nodes = draw(st.integers(1, 4))
    gpu: dict[str, Any] = {"preset": draw(st.sampled_from(GPU_NAMES))}
    if draw(st.booleans()):
        gpu["memory_bytes"] = draw(st.integers(2**30, 2**38))
    if draw(st.booleans()):
        gpu["bf16_TFLOPs"] = draw(st.floats(1, 5000, allow_nan=False))
    if draw(st.booleans()):
        gpu["efficiency"] = {
            **catalog.gpu(gpu["preset"]).efficiency.model_dump(),
            "gemm": draw(st.floats(0.1, 1.0, allow_nan=False)),
        }
    cluster: dict[str, Any] = {"num_nodes": nodes, "gpus_per_node": draw(st.sampled_from([1, 2, 4, 8])), "gpu": gpu}
    if draw(st.booleans()):
        cluster["hosts"] = [f"node{i:02d}" for i in range(nodes)]
    if draw(st.booleans()):
        cluster["nvme_path"] = draw(st.sampled_from(["/local_nvme", "/mnt/nvme0"]))
        cluster["nvme_GBps"] = draw(st.floats(0.5, 50, allow_nan=False))
    if draw(st.booleans()):
        cluster["nics"] = [f"mlx5_{i}" for i in range(draw(st.integers(1, 8)))]
    if draw(st.booleans()):
        cluster["mtbf_hours"] = draw(st.floats(0.5, 1e5, allow_nan=False))
    pins = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "tp": st.sampled_from([1, 2, 4]),
                "pp": st.integers(1, 4),
                "zero_stage": st.integers(0, 3),
                "sequence_parallel": st.booleans(),
                "recompute": st.sampled_from(["none", "selective", "full"]),
                "recompute_modules": st.lists(
                    st.sampled_from(["core_attn", "mlp", "layernorm"]), min_size=1, max_size=2, unique=True
                ),
                "offload_optimizer": st.sampled_from(["none", "cpu"]),
                "cp_comm_type": st.sampled_from(["p2p", "a2a"]),
                "tp_comm_overlap": st.booleans(),
            },
        )
    )
    training = {
        "global_batch_size": draw(st.integers(1, 4096)),
        "pinned": pins,
        "precision": draw(st.sampled_from(["bf16", "fp16"])),
        "memory_headroom": draw(st.floats(0, 0.5, allow_nan=False)),
        "flash_attention": draw(st.booleans()),
        "train_tokens": draw(st.none() | st.floats(1e6, 1e15, allow_nan=False)),
    }
    model = draw(
        st.sampled_from(["llama-2-7b", "mixtral-8x7b", {"hf_config": HF_CONFIGS["qwen3-32b"], "seq_length": 8192}])
    )
    raw: dict[str, Any] = {"model": model, "cluster": cluster, "training": training}
    if draw(st.booleans()):
        raw["render"] = {
            "job_name": draw(NAME.filter(lambda s: s[-1] != "-")),
            "train_iters": draw(st.integers(1, 10**6)),
            "lr": draw(st.floats(1e-6, 1e-2, allow_nan=False)),
        }
    return raw


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=requests())
def test_request_form_request_is_the_identity(raw: dict[str, Any]) -> None:
    try:
        spec_of(raw)
    except ValueError:  # pins the spec refuses together: no stored request could hold them
        assume(False)
    round_trip(raw)


@pytest.mark.parametrize(("preset", "gpu", "nic_gbit"), [("gb200-nvl72", "GB200", 400), ("gb300-nvl72", "GB300", 800)])
def test_an_nvl72_tray_preset_is_four_gpus_a_node_in_one_rack_wide_nvlink_domain(
    preset: str, gpu: str, nic_gbit: int
) -> None:
    """The NVL72 presets say what a user otherwise has to know: 4 GPUs per compute tray (the node), one NIC each, and
    18 trays in one NVLink domain, so 16 trays (64 GPUs) run TP and EP over NVLink across trays."""
    request = forms.to_request(SECTIONS, form(cluster_preset=preset, cluster__num_nodes="16"), None)
    cluster = spec_of(request).cluster
    assert (cluster.gpu.name, cluster.gpus_per_node, cluster.world_size) == (gpu, 4, 64)
    assert cluster.inter_node_GBps == nic_gbit / 8 and cluster.nics == ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")
    assert cluster.nvlink_domain == 64 and cluster.gpu.nvlink_spans_nodes


def test_the_grand_teton_preset_plans_on_the_500_w_hbm2e_h100() -> None:
    """Meta's Grand Teton node: its own catalogue H100 (96 GB HBM2e, 500 W), 8 per node, 400 Gb/s per GPU, and no
    NIC names the form would have to guess."""
    request = forms.to_request(SECTIONS, form(cluster_preset="grand-teton-h100", cluster__num_nodes="2"), None)
    cluster = spec_of(request).cluster
    assert (cluster.gpu.name, cluster.gpus_per_node, cluster.world_size) == ("H100-96GB-500W", 8, 16)
    assert cluster.inter_node_GBps == 50 and cluster.gpu.memory_bytes > 95 * 2**30 and not cluster.nics


def test_a_blank_node_size_is_the_gpus_own_and_a_typed_8_is_kept() -> None:
    """Blank GPUs per node on a custom GB200 cluster is its 4-GPU tray; a typed 8 is what the user said (it equalled
    the spec's default and was left out, so it became 4), and round trips as such."""
    custom = {"cluster_mode": "custom", "cluster.gpu": "GB200", "cluster.num_nodes": "16"}
    blank = spec_of(forms.to_request(SECTIONS, {**forms.defaults(SECTIONS), **custom}, None))
    assert (blank.cluster.gpus_per_node, blank.cluster.world_size) == (4, 64)
    typed = forms.to_request(SECTIONS, {**forms.defaults(SECTIONS), **custom, "cluster.gpus_per_node": "8"}, None)
    assert typed["cluster"]["gpus_per_node"] == 8 and spec_of(typed).cluster.world_size == 128
    round_trip(typed)
    h100 = spec_of(forms.to_request(SECTIONS, {**forms.defaults(SECTIONS), **custom, "cluster.gpu": "H100-SXM"}, None))
    assert h100.cluster.gpus_per_node == 8
