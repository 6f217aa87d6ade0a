"""The plan form, section by section, generated from the specs (app/web/fields.py), and the two conversions:
submitted form -> request dict (what POST /plans takes), resolved request -> form values.

Every field of ModelSpec, ClusterSpec (the GPU's numbers included), TrainingSpec, ParallelPins and RenderOptions
is in the form, so "edit and re-plan" gives back the request it started from (tests/web/test_forms.py checks the
round trip for every preset, config.json imports and custom GPUs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from app.planner import catalog
from app.planner.errors import FieldError
from app.planner.gpu import Efficiency, GPUSpec
from app.planner.hf_import import longest_context, model_type
from app.planner.specs import ClusterSpec, ModelSpec, ParallelPins, PlanRequest, TrainingSpec
from app.render import RenderOptions
from app.service.errors import Refused
from app.service.jsonbody import BodyError, parse_json
from app.service.requests import parse_plan_request, saved_written
from app.web.fields import BadValue, FormField, number_text, spec_field, spec_fields, to_value, values_of
from app.web.presets import cluster_presets

MODES = {"model_mode": ("preset", "dims", "hf"), "cluster_mode": ("preset", "custom", "saved")}
SAVED = "cluster.saved"  # the saved cluster's name (its choices come from the store, not from a spec)
SAVED_NODES = "saved.num_nodes"  # how many of its nodes (blank: all), as POST /plans takes `saved` + num_nodes
# Which fields show first in each section; the rest sit under "more". Order and presence come from the specs.
MODEL_MAIN = (
    "name",
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "num_query_groups",
    "kv_channels",
    "ffn_hidden_size",
    "vocab_size",
    "seq_length",
    "swiglu",
    "untie_embeddings_and_output_weights",
    "position_embedding_type",
    "normalization",
    "num_experts",
    "moe_router_topk",
    "moe_ffn_hidden_size",
    "moe_shared_expert_intermediate_size",
    "moe_first_dense_layers",
)
TRAINING_MAIN = (
    "global_batch_size",
    "precision",
    "framework",
    "objective",
    "memory_headroom",
    "train_tokens",
    "max_plans",
    "search_time_limit_s",
)
PINS_MAIN = (
    "tp",
    "pp",
    "vpp",
    "dp",
    "cp",
    "ep",
    "zero_stage",
    "micro_batch_size",
    "recompute",
    "distributed_optimizer",
    "sequence_parallel",
    "num_nodes",
)
RENDER_MAIN = ("job_name", "master_addr", "workdir", "entrypoint", "data_path", "checkpoint_dir", "train_iters")
# Dimensions mode starts from a Llama-style block: RoPE + RMSNorm + SwiGLU (a "34B" is 34B with it, 20B without).
DIMS_DEFAULTS = {"swiglu": "true", "untie_embeddings_and_output_weights": "true"}
DEFAULT_GBS = "512"


class FormError(Exception):
    def __init__(self, errors: list[FieldError]) -> None:
        super().__init__("; ".join(map(str, errors)))
        self.errors = errors


def _split(fields: list[FormField], main: tuple[str, ...], prefix: str) -> tuple[list[FormField], list[FormField]]:
    first = [f for f in fields if f.name.removeprefix(prefix) in main]
    return first, [f for f in fields if f not in first]


def _preset_options() -> tuple[tuple[str, str], ...]:
    rows = []
    for row in catalog.model_presets():
        n = ModelSpec(**catalog.model_fields(row["name"])).num_parameters
        rows.append((row["name"], f"{row['name']} ({n / 1e9:.1f}B)"))
    return tuple(rows)


def _stack_options() -> tuple[tuple[str, str], ...]:
    from app.planner import stack

    return ("", "the framework's usual stack"), *((s.name, s.label) for s in stack.stacks())


def build_fields() -> dict[str, list[FormField]]:
    """The form, section by section: the model's, the cluster's, then those generated from the training, pin and
    render specs (each split into the fields shown and those behind "more")."""
    training = spec_fields(
        TrainingSpec,
        "training",
        skip=("pinned",),
        overrides={
            "global_batch_size": {"default": DEFAULT_GBS},
            "stack": {"kind": "select", "options": _stack_options()},
        },
    )
    training_main, training_more = _split(training, TRAINING_MAIN, "training.")
    pins_main, pins_more = _split(
        spec_fields(ParallelPins, "training.pinned", empty="search"), PINS_MAIN, "training.pinned."
    )
    render_main, render_more = _split(spec_fields(RenderOptions, "render"), RENDER_MAIN, "render.")
    return {
        **_model_sections(),
        **_cluster_sections(),
        "training": training_main,
        "training_more": training_more,
        "pins": pins_main,
        "pins_more": pins_more,
        "render": render_main,
        "render_more": render_more,
    }


def _model_sections() -> dict[str, list[FormField]]:
    """The three ways to give the model: a preset, its dimensions, or a Hugging Face config.json."""
    seq_help = ModelSpec.model_fields["seq_length"].description or ""
    dims = spec_fields(ModelSpec, "model", overrides={k: {"default": v} for k, v in DIMS_DEFAULTS.items()})
    dims_main, dims_more = _split(dims, MODEL_MAIN, "model.")
    # the preset's and config.json's sequence length take the spec's bounds: they said "(1 – …)" (QA 2026-12-07)
    seq_attrs = next(f for f in dims if f.name == "model.seq_length").attrs
    seq_bounds = {k: v for k, v in seq_attrs.items() if k in ("min", "max")}
    return {
        "model_preset": [
            FormField(
                "preset.name",
                "Model preset",
                "A published model shape (GET /catalog/models).",
                "select",
                _preset_options(),
                "llama-2-7b",
                {"required": "required"},
            ),
            FormField("preset.seq_length", "Sequence length (override)", seq_help, "int", attrs=dict(seq_bounds)),
        ],
        "model_dims": dims_main,
        "model_dims_more": dims_more,
        "model_hf": [
            FormField(
                "hf.config",
                "config.json",
                "A Hugging Face config.json (Llama, Mistral, Mixtral, Qwen2/3, "
                "DeepSeek-V3, Kimi K2, GPT-2, GPT-NeoX); read here, never fetched.",
                "file",
                attrs={"accept": ".json,application/json"},
            ),
            FormField("hf.config_text", "…or paste it", "The file's JSON text.", "textarea"),
            FormField(
                "hf.seq_length",
                "Training sequence length",
                seq_help + " Required: config.json only gives "
                "the longest context the model supports (max_position_embeddings).",
                "int",
                attrs={**seq_bounds, "required": "required"},
            ),
            FormField("hf.name", "Name", "A label for the plan (default: config.json's _name_or_path).", "text"),
        ],
    }


def _cluster_sections() -> dict[str, list[FormField]]:
    """The node count, then a node type from the presets or a custom node (a catalogue GPU whose numbers the
    overrides change)."""
    gpus = gpu_options("GiB")
    presets = tuple((p.name, p.label) for p in cluster_presets())
    gpu = spec_field(
        ClusterSpec,
        "gpu",
        "cluster",
        kind="select",
        options=gpus,
        default="H100-SXM",
        help="A catalogue GPU; change its numbers below.",
    )
    # the GPU's own node (a server or tray), beside the cluster's "GPUs per node": two fields, two labels
    tray = {"gpus_per_node": {"label": "GPUs per server or tray"}}
    overrides = spec_fields(
        GPUSpec, "cluster.gpu", skip=("efficiency",), blank_defaults=True, empty="catalogue", overrides=tray
    )
    overrides += spec_fields(Efficiency, "cluster.gpu.efficiency", blank_defaults=True, empty="catalogue")
    return {
        "cluster_common": [spec_field(ClusterSpec, "num_nodes", "cluster", default="2")],
        "cluster_preset": [
            FormField(
                "cluster_preset",
                "Node type",
                "Typical nodes: GPUs, fabric and NICs.",
                "select",
                presets,
                presets[0][0] if presets else "",
            )
        ],
        "cluster_custom": [gpu, *spec_fields(ClusterSpec, "cluster", skip=("num_nodes", "gpu"), overrides=NODE)],
        "cluster_saved": [
            dataclasses.replace(
                spec_field(ClusterSpec, "num_nodes", "cluster", default=""),
                name=SAVED_NODES,
                label="Nodes to use",
                help="Blank: all of the saved cluster's nodes. Fewer keep the first of its hosts.",
                spec_default=None,
            )
        ],
        "gpu_overrides": overrides,
    }


# the cluster fields whose default is its GPU's node (ClusterSpec._node_of_gpu): blank is that default (8 sent as the
# spec's default was dropped, and a GB200 got 4); a what-if to another GPU clears those the request did not state
NODE = {name: {"default": "", "spec_default": None} for name in ("gpus_per_node", "cpu_memory_GiB")}


def capped(sections: dict[str, list[FormField]], name: str, high: float) -> dict[str, list[FormField]]:
    """The form with field `name` offering no more than `high` (a service setting below the spec's own bound)."""

    def cap(f: FormField) -> FormField:
        if f.name != name or float(f.attrs.get("max", "inf")) <= high:
            return f
        return dataclasses.replace(f, attrs={**f.attrs, "max": number_text(high)})

    return {section: [cap(f) for f in fields] for section, fields in sections.items()}


def gpu_options(units: str) -> tuple[tuple[str, str], ...]:
    """The GPU select's (value, label) pairs, memory in `units` as the charts show it: "H100-SXM (80 GiB)" was
    79.6 GiB on every chart, and stayed GiB under the GB setting (QA 2026-12-07)."""
    scale = 10**9 if units == "GB" else 2**30
    return tuple((g.name, f"{g.name} ({g.memory_bytes / scale:.1f} {units})") for g in catalog.gpus())


def in_units(sections: dict[str, list[FormField]], units: str) -> dict[str, list[FormField]]:
    """The form with the GPU select's memory in `units`."""
    options = gpu_options(units)

    def relabel(f: FormField) -> FormField:
        return dataclasses.replace(f, options=options) if f.name == "cluster.gpu" else f

    return {section: [relabel(f) for f in fields] for section, fields in sections.items()}


def all_fields(sections: dict[str, list[FormField]]) -> list[FormField]:
    return [f for section in sections.values() for f in section]


def defaults(sections: dict[str, list[FormField]]) -> dict[str, str]:
    values = {f.name: f.default for f in all_fields(sections)}
    return {**values, "model_mode": "preset", "cluster_mode": "preset"}


# -- form -> request ---------------------------------------------------------------------------------------------


def _put(target: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    for part in parents:
        target = target.setdefault(part, {})
    target[leaf] = value


def _section_values(
    fields: list[FormField], form: Mapping[str, str], target: dict[str, Any], prefix: str, errors: list[FieldError]
) -> None:
    for f in fields:
        raw = form.get(f.name, "").strip()
        if raw == f.spec_default or (raw == "" and f.kind != "bool"):
            continue  # left as the spec has it (an unchecked box is sent as nothing: False, unless that's the default)
        try:
            _put(target, f.name.removeprefix(prefix), to_value(f, raw))
        except BadValue as exc:
            errors.append(FieldError(exc.where or f.name, str(exc)))


def _hf_config(form: Mapping[str, str], upload: bytes | None) -> dict[str, Any]:
    text = upload.decode("utf-8", errors="replace") if upload else form.get("hf.config_text", "")
    if not text.strip():
        raise FormError([FieldError("hf.config", "choose a config.json file or paste its text")])
    try:  # as strictly as a request body (app/service/jsonbody): nesting, NaN, 1e400, a key given twice
        config = parse_json(text, "hf.config")
    except BodyError as exc:
        raise FormError(exc.errors) from None
    if not isinstance(config, dict):
        raise FormError([FieldError("hf.config", "config.json must hold a JSON object")])
    return config


def _hf_model(
    sections: dict[str, list[FormField]], form: Mapping[str, str], upload: bytes | None, errors: list[FieldError]
) -> dict[str, Any]:
    config = _hf_config(form, upload)
    try:  # a model type the import refuses is the first thing to say, before the sequence length
        model_type(config)
    except ValueError as exc:
        raise FormError([FieldError("hf.config", str(exc))]) from None
    model: dict[str, Any] = {"hf_config": config}
    fields = {f.name: f for f in sections["model_hf"]}
    seq = form.get("hf.seq_length", "").strip()
    if not seq:
        errors.append(
            FieldError(
                "hf.seq_length",
                "give the sequence length to train at: config.json says only "
                f"how long a context the model supports ({longest_context(config)})",
            )
        )
    else:
        model["seq_length"] = to_value(fields["hf.seq_length"], seq)
    name = form.get("hf.name", "").strip()
    if name:
        model["name"] = name
    return model


def _model(
    sections: dict[str, list[FormField]], form: Mapping[str, str], upload: bytes | None, errors: list[FieldError]
) -> Any:
    mode = form.get("model_mode", "preset")
    if mode == "dims":
        model: dict[str, Any] = {}
        _section_values(sections["model_dims"] + sections["model_dims_more"], form, model, "model.", errors)
        return model
    if mode == "hf":
        return _hf_model(sections, form, upload, errors)
    seq_field = sections["model_preset"][1]
    seq = form.get(seq_field.name, "").strip()
    name = form.get("preset.name", "")
    return {"preset": name, "seq_length": to_value(seq_field, seq)} if seq else name


def _gpu(sections: dict[str, list[FormField]], form: Mapping[str, str], errors: list[FieldError]) -> Any:
    name = form.get("cluster.gpu", "").strip()
    overrides: dict[str, Any] = {}
    _section_values(sections["gpu_overrides"], form, overrides, "cluster.gpu.", errors)
    # efficiency constants given replace the catalogue's one by one (ClusterSpec merges them under a preset)
    return {"preset": name, **overrides} if overrides else name


def _cluster(sections: dict[str, list[FormField]], form: Mapping[str, str], errors: list[FieldError]) -> dict[str, Any]:
    if form.get("cluster_mode", "preset") == "saved":  # the saved description, with the node count typed for it
        saved: dict[str, Any] = {"saved": form.get(SAVED, "").strip()}
        nodes = sections["cluster_saved"][0]
        if raw := form.get(nodes.name, "").strip():  # (the common node count above was ignored here, unsaid)
            try:
                saved["num_nodes"] = to_value(nodes, raw)
            except BadValue as exc:
                errors.append(FieldError(exc.where or nodes.name, str(exc)))
        return saved
    cluster: dict[str, Any] = {}
    _section_values(sections["cluster_common"], form, cluster, "cluster.", errors)
    if form.get("cluster_mode", "preset") == "custom":
        _section_values(sections["cluster_custom"][1:], form, cluster, "cluster.", errors)
        return {**cluster, "gpu": _gpu(sections, form, errors)}
    presets = {p.name: p for p in cluster_presets()}
    chosen = presets.get(form.get("cluster_preset", ""))
    if chosen is None:
        raise FormError([FieldError("cluster_preset", f"choose one of: {', '.join(presets)}")])
    return {**chosen.cluster_fields(), **cluster}


def to_request(sections: dict[str, list[FormField]], form: Mapping[str, str], upload: bytes | None) -> dict[str, Any]:
    """The JSON request POST /plans would take for this form (raises FormError for what only the form checks)."""
    for key, allowed in MODES.items():
        if (given := form.get(key, allowed[0])) not in allowed:
            raise FormError([FieldError(key, f"must be one of {', '.join(allowed)} (got {given!r})")])
    errors: list[FieldError] = []
    training: dict[str, Any] = {}
    for name in ("training", "training_more", "pins", "pins_more"):
        _section_values(sections[name], form, training, "training.", errors)
    request = {
        "model": _model(sections, form, upload, errors),
        "cluster": _cluster(sections, form, errors),
        "training": training,
    }
    render: dict[str, Any] = {}
    _section_values(sections["render"] + sections["render_more"], form, render, "render.", errors)
    if errors:
        raise FormError(errors + _spec_errors(request, errors))
    return {**request, "render": render} if render else request


def _spec_errors(request: dict[str, Any], found: list[FieldError]) -> list[FieldError]:
    """What the specs say of the rest of a form that already has errors of its own (a JSON field that does not
    parse, a GiB value out of range), so that every bad field is named in one round, not the rest only after
    those are fixed. A field left out for its own error, and what is missing because of it, is not said twice."""
    known = {e.field for e in found}
    try:
        parse_plan_request(request)
    except Refused as exc:
        return [
            e
            for e in exc.errors
            if e.field not in known
            and not any(k.startswith(f"{e.field}.") or e.field.startswith(f"{k}.") for k in known)
            and e.message != "Field required"
        ]
    return []


def error_field(error: FieldError, form: Mapping[str, str]) -> str:
    """Where the form shows a request error: model.* errors belong to the preset or config.json in those modes; a
    mode's own error ("" here) in the box at the top, as "model_mode: must be one of ...": its radio buttons have no
    place for a message (it was said nowhere, QA)."""
    name, mode = error.field, form.get("model_mode", "preset")
    if name in MODES:
        return ""
    if (name == "model" or name.startswith("model.")) and mode in ("preset", "hf"):
        whole = "hf.config" if mode == "hf" else "preset.name"
        if name == "model.seq_length":
            return f"{mode}.seq_length"
        return "hf.name" if (mode, name) == ("hf", "model.name") else whole
    if name.startswith("cluster.") and form.get("cluster_mode", "preset") == "preset":
        return name if name == "cluster.num_nodes" else "cluster_preset"
    if (name == "cluster" or name.startswith("cluster.")) and form.get("cluster_mode") == "saved":
        return SAVED_NODES if name in ("cluster.num_nodes", SAVED_NODES) else SAVED
    return name


def saved_mode(raw: Mapping[str, Any], saved_spec: Mapping[str, Any] | None, name: str) -> dict[str, str]:
    """The form values that make a stored plan's cluster again from the saved cluster it was made on (`name`, whose
    description is now `saved_spec`), when it is that description with no other change than a node count (and the
    host list the service cut to it); else nothing: the form keeps the description itself. "Edit and re-plan" of
    such a plan opened as a described cluster and the re-plan left the saved cluster's filter (QA 2026-12-07)."""
    stored = raw.get("cluster")
    if saved_spec is None or not isinstance(stored, Mapping):
        return {}
    nodes = stored.get("num_nodes")
    overridden = nodes != saved_spec.get("num_nodes")
    if dict(stored) != saved_written(saved_spec, {"num_nodes": nodes} if overridden else {}):
        return {}
    count = str(nodes) if overridden else ""
    return {"cluster_mode": "saved", SAVED: name, SAVED_NODES: count}


# -- resolved request -> form ------------------------------------------------------------------------------------


def _gpu_values(sections: dict[str, list[FormField]], gpu: GPUSpec) -> dict[str, str]:
    """The catalogue GPU it is (or the closest by name) and every number that differs from it."""
    names = {g.name: g for g in catalog.gpus()}
    base = names.get(gpu.name) or next(
        (g for g in names.values() if g.generation == gpu.generation), next(iter(names.values()))
    )
    mine, theirs = gpu.model_dump(), base.model_dump()
    differ: dict[str, Any] = {k: v for k, v in mine.items() if k != "efficiency" and v != theirs[k]}
    differ.update({f"efficiency.{k}": v for k, v in mine["efficiency"].items() if v != theirs["efficiency"][k]})
    values = values_of(sections["gpu_overrides"], differ, "cluster.gpu.")
    return {"cluster.gpu": base.name, **values}


def from_request(sections: dict[str, list[FormField]], raw: Mapping[str, Any], resolved: PlanRequest) -> dict[str, str]:
    """Form values that reproduce a request: `raw` as it was sent (which preset, render options), `resolved`
    its specs. A bare preset stays a preset; any other model is written out field by field. The Dimensions panel
    always holds the model as planned, a preset's too: it was left blank under a preset, so SwiGLU and untied
    embeddings came back unticked and dimensions typed there made a GELU/LayerNorm model (QA 2026-12-07)."""
    values = defaults(sections)
    values.update(values_of(sections["model_dims"] + sections["model_dims_more"], resolved.model, "model."))
    model = raw.get("model")
    preset = model if isinstance(model, str) else model.get("preset") if isinstance(model, dict) else None
    extra = set(model) - {"preset", "seq_length"} if isinstance(model, dict) else set()
    if isinstance(preset, str) and not extra:
        seq = model.get("seq_length", "") if isinstance(model, dict) else ""
        values.update({"model_mode": "preset", "preset.name": preset, "preset.seq_length": str(seq)})
    else:
        values["model_mode"] = "dims"
    values["cluster_mode"] = "custom"
    values.update(values_of(sections["cluster_common"] + sections["cluster_custom"][1:], resolved.cluster, "cluster."))
    cluster = raw.get("cluster")
    stated: Mapping[str, Any] = cluster if isinstance(cluster, Mapping) else {}
    for name in NODE:  # blank: the GPU's own node, as the request left it (a what-if to another GPU then takes that
        # GPU's; the resolved 8 of an H100 was written into the re-planned request and kept on a GB200 tray next)
        if stated.get(name) is None:
            values[f"cluster.{name}"] = ""
    values.update(_gpu_values(sections, resolved.cluster.gpu))
    values.update(values_of(sections["training"] + sections["training_more"], resolved.training, "training."))
    values.update(values_of(sections["pins"] + sections["pins_more"], resolved.training.pinned, "training.pinned."))
    render = raw.get("render")
    if isinstance(render, Mapping):
        options = RenderOptions.model_validate(render)
        values.update(values_of(sections["render"] + sections["render_more"], options, "render."))
    return values
