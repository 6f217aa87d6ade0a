"""The form's fields come from the specs; form values become the request POST /plans takes, and back."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.planner import PlanRequest, plan
from app.planner.errors import FieldError
from app.planner.specs import ClusterSpec, ModelSpec, ParallelPins, TrainingSpec
from app.render import RenderOptions
from app.web import forms
from app.web.pages import SECTIONS
from app.web.presets import cluster_presets

SPECS = {"model": ModelSpec, "cluster": ClusterSpec, "training": TrainingSpec, "training.pinned": ParallelPins,
         "render": RenderOptions}
LLAMA_CONFIG = {"model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 16,
                "num_key_value_heads": 4, "intermediate_size": 5632, "vocab_size": 32000,
                "max_position_embeddings": 2048, "hidden_act": "silu"}


def form(**values: str) -> dict[str, str]:
    base = forms.defaults(SECTIONS)
    base.update({k.replace("__", "."): v for k, v in values.items()})
    return base


def test_help_text_is_the_spec_description() -> None:
    checked = 0
    for f in forms.all_fields(SECTIONS):
        prefix, _, name = f.name.rpartition(".")
        if prefix in SPECS:
            assert f.help == SPECS[prefix].model_fields[name].description, f.name
            checked += 1
    assert checked > 40


def test_bounds_come_from_the_spec() -> None:
    fields = {f.name: f for f in forms.all_fields(SECTIONS)}
    assert fields["cluster.num_nodes"].attrs["min"] == "1"
    assert fields["cluster.gpus_per_node"].attrs["max"] == "256"
    assert fields["training.memory_headroom"].attrs == {"min": "0.0", "max": "0.5", "step": "any"}
    assert [v for v, _ in fields["training.precision"].options] == ["bf16", "fp16", "fp8"]
    assert fields["training.pinned.sequence_parallel"].kind == "tristate"
    assert fields["training.pinned.recompute"].options[0] == ("", "search")
    assert fields["training.flash_attention"].kind == "bool" and fields["training.flash_attention"].default == "true"


def test_defaults_make_a_valid_request_with_nothing_extra() -> None:
    request = forms.to_request(SECTIONS, form(), None)
    preset = cluster_presets()[0]
    assert request == {"model": "llama-2-7b", "cluster": {**preset.cluster_fields(), "num_nodes": 2},
                       "training": {"global_batch_size": 512}}
    PlanRequest(**request)


def test_dimensions_mode_sends_the_typed_fields() -> None:
    values = form(model_mode="dims", model__name="mine", model__num_layers="12", model__hidden_size="768",
                  model__num_attention_heads="12", model__vocab_size="50304", model__seq_length="1024",
                  model__swiglu="true", cluster_mode="custom", cluster__gpus_per_node="4", cluster__gpu="A100-80GB",
                  cluster__nics="mlx5_0, mlx5_1 mlx5_2", training__flash_attention="")
    request = forms.to_request(SECTIONS, values, None)
    assert request["model"] == {"name": "mine", "num_layers": 12, "hidden_size": 768, "num_attention_heads": 12,
                                "vocab_size": 50304, "seq_length": 1024, "swiglu": True}
    assert request["cluster"]["nics"] == ["mlx5_0", "mlx5_1", "mlx5_2"]
    assert request["cluster"]["gpu"] == "A100-80GB" and request["cluster"]["gpus_per_node"] == 4
    assert request["training"]["flash_attention"] is False  # unchecked box
    spec = PlanRequest(**request)
    assert spec.model.num_layers == 12 and spec.model.swiglu and spec.cluster.nics == ("mlx5_0", "mlx5_1", "mlx5_2")


def test_config_json_upload_or_paste() -> None:
    uploaded = forms.to_request(SECTIONS, form(model_mode="hf", hf__seq_length="4096"),
                                json.dumps(LLAMA_CONFIG).encode())
    assert uploaded["model"] == {"hf_config": LLAMA_CONFIG, "seq_length": 4096}
    pasted = forms.to_request(SECTIONS, form(model_mode="hf", hf__config_text=json.dumps(LLAMA_CONFIG)), None)
    assert pasted["model"] == {"hf_config": LLAMA_CONFIG}
    spec = PlanRequest(**uploaded)
    assert (spec.model.num_layers, spec.model.num_query_groups, spec.model.seq_length) == (16, 4, 4096)


@pytest.mark.parametrize(("upload", "text", "words"), [
    (None, "", "choose a config.json"), (b"{oops", "", "not valid JSON: line 1"), (b"[1]", "", "JSON object"),
])
def test_bad_config_json_is_an_error_on_its_field(upload: bytes | None, text: str, words: str) -> None:
    with pytest.raises(forms.FormError) as exc:
        forms.to_request(SECTIONS, form(model_mode="hf", hf__config_text=text), upload)
    assert exc.value.errors[0].field == "hf.config" and words in exc.value.errors[0].message


def test_pins_and_render_options() -> None:
    values = form(training__pinned__tp="2", training__pinned__sequence_parallel="false",
                  training__pinned__recompute="selective", render__job_name="smoke", render__extra_args="--a --b")
    request = forms.to_request(SECTIONS, values, None)
    assert request["training"]["pinned"] == {"tp": 2, "sequence_parallel": "false", "recompute": "selective"}
    assert request["render"] == {"job_name": "smoke", "extra_args": ["--a", "--b"]}
    spec = PlanRequest(**{k: v for k, v in request.items() if k != "render"})
    assert spec.training.pinned.sequence_parallel is False and spec.training.pinned.tp == 2
    assert RenderOptions(**request["render"]).extra_args == ("--a", "--b")


def test_unknown_modes_and_presets_are_refused() -> None:
    with pytest.raises(forms.FormError, match="model_mode"):
        forms.to_request(SECTIONS, form(model_mode="magic"), None)
    with pytest.raises(forms.FormError, match="choose one of"):
        forms.to_request(SECTIONS, form(cluster_preset="cray-1"), None)


@pytest.mark.parametrize(("field", "mode", "shown"), [
    ("model.seq_length", {"model_mode": "preset"}, "preset.seq_length"),
    ("model", {"model_mode": "preset"}, "preset.name"),
    ("model.num_layers", {"model_mode": "hf"}, "hf.config"),
    ("model.num_layers", {"model_mode": "dims"}, "model.num_layers"),
    ("cluster.gpu", {"cluster_mode": "preset"}, "cluster_preset"),
    ("cluster.num_nodes", {"cluster_mode": "preset"}, "cluster.num_nodes"),
    ("cluster.gpu", {"cluster_mode": "custom"}, "cluster.gpu"),
])
def test_errors_are_shown_where_the_value_was_typed(field: str, mode: dict[str, str], shown: str) -> None:
    assert forms.error_field(FieldError(field, "x"), mode) == shown


@pytest.mark.parametrize("request_body", [
    {"model": "llama-2-13b", "cluster": {"num_nodes": 2, "gpu": "A100-80GB", "nics": ["mlx5_0"]},
     "training": {"global_batch_size": 256, "pinned": {"pp": 2, "sequence_parallel": False}}},
    {"model": {"name": "own", "num_layers": 8, "hidden_size": 1024, "num_attention_heads": 8, "vocab_size": 32000,
               "seq_length": 2048, "swiglu": True},
     "cluster": {"num_nodes": 1, "gpus_per_node": 4, "gpu": "H100-SXM", "inter_node_GBps": 25},
     "training": {"global_batch_size": 32, "framework": "deepspeed", "flash_attention": False},
     "render": {"job_name": "own-run", "train_iters": 50}},
])
def test_a_stored_request_fills_the_form_that_gives_it_back(request_body: dict[str, Any]) -> None:
    original = PlanRequest(**{k: v for k, v in request_body.items() if k != "render"})
    result = plan(original)
    values = forms.from_stored(SECTIONS, request_body, result)
    again = forms.to_request(SECTIONS, values, None)
    rebuilt = PlanRequest(**{k: v for k, v in again.items() if k != "render"})
    assert rebuilt.model_dump() == original.model_dump()
    assert again.get("render") == request_body.get("render")
