"""The form's fields, built from the planner's specs (their Field descriptions are the help text), and the two
conversions: submitted form -> request dict (what POST /plans takes), stored request -> form values."""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel

from app.planner import catalog
from app.planner.errors import FieldError
from app.planner.results import PlanResult
from app.planner.specs import ClusterSpec, ModelSpec, ParallelPins, TrainingSpec
from app.render import RenderOptions
from app.web.presets import cluster_presets

Kind = Literal["int", "float", "bool", "tristate", "select", "text", "list", "textarea", "file"]

# Short labels; the help under each field is the spec's own description.
LABELS = {
    "name": "Name", "num_layers": "Layers", "hidden_size": "Hidden size", "num_attention_heads": "Attention heads",
    "num_query_groups": "KV heads (GQA)", "ffn_hidden_size": "FFN size", "vocab_size": "Vocabulary",
    "seq_length": "Sequence length", "swiglu": "SwiGLU", "untie_embeddings_and_output_weights": "Untied embeddings",
    "position_embedding_type": "Position embedding", "normalization": "Normalization", "num_experts": "Experts",
    "moe_router_topk": "Experts per token", "moe_ffn_hidden_size": "Expert FFN size",
    "num_nodes": "Nodes", "gpus_per_node": "GPUs per node", "gpu": "GPU", "intra_node_GBps": "Intra-node GB/s",
    "inter_node_GBps": "Inter-node GB/s", "nics": "NIC names", "socket_ifname": "Socket interface",
    "cpu_memory_GiB": "CPU memory GiB", "global_batch_size": "Global batch", "precision": "Precision",
    "framework": "Framework", "objective": "Rank by", "memory_headroom": "Memory headroom",
    "train_tokens": "Training tokens", "max_plans": "Plans to show", "search_time_limit_s": "Search time cap (s)",
    "flash_attention": "Flash attention", "overlap_grad_reduce": "Overlap grad reduce",
    "overlap_p2p_comm": "Overlap PP sends", "allow_tp_across_nodes": "TP across nodes", "tp": "TP", "pp": "PP",
    "vpp": "Virtual PP", "dp": "DP", "cp": "CP", "ep": "EP", "zero_stage": "ZeRO stage",
    "distributed_optimizer": "Distributed optimizer", "micro_batch_size": "Micro-batch", "recompute": "Recompute",
    "sequence_parallel": "Sequence parallel", "job_name": "Job name", "master_addr": "Head node address",
    "master_port": "Rendezvous port", "workdir": "Working directory", "entrypoint": "Training script",
    "data_path": "Dataset path", "tokenizer_type": "Tokenizer", "tokenizer_model": "Tokenizer model",
    "checkpoint_dir": "Checkpoints", "train_iters": "Training steps", "lr": "Learning rate",
    "container_image": "Container image", "k8s_namespace": "Kubernetes namespace", "slurm_partition": "Slurm partition",
    "slurm_account": "Slurm account", "slurm_time_limit": "Slurm time limit", "nccl_algo": "NCCL algorithm",
    "extra_args": "Extra arguments",
}
MODEL_DIMS = ("name", "num_layers", "hidden_size", "num_attention_heads", "num_query_groups", "ffn_hidden_size",
              "vocab_size", "seq_length", "swiglu", "untie_embeddings_and_output_weights", "position_embedding_type",
              "normalization", "num_experts", "moe_router_topk", "moe_ffn_hidden_size")
CLUSTER_CUSTOM = ("gpus_per_node", "gpu", "intra_node_GBps", "inter_node_GBps", "nics", "socket_ifname",
                  "cpu_memory_GiB")
TRAINING_MAIN = ("global_batch_size", "precision", "framework", "objective", "memory_headroom", "train_tokens",
                 "max_plans", "search_time_limit_s")
TRAINING_MORE = ("flash_attention", "overlap_grad_reduce", "overlap_p2p_comm", "allow_tp_across_nodes")
PINS = ("tp", "pp", "vpp", "dp", "cp", "ep", "zero_stage", "micro_batch_size", "recompute", "distributed_optimizer",
        "sequence_parallel", "num_nodes")
RENDER = ("job_name", "master_addr", "master_port", "workdir", "entrypoint", "data_path", "tokenizer_type",
          "tokenizer_model", "checkpoint_dir", "train_iters", "lr", "container_image", "k8s_namespace",
          "slurm_partition", "slurm_account", "slurm_time_limit", "nccl_algo", "extra_args")
MODES = {"model_mode": ("preset", "dims", "hf"), "cluster_mode": ("preset", "custom")}


@dataclass(frozen=True)
class FormField:
    name: str  # the input's name: the request's dotted path (cluster.num_nodes), or a form-only name (preset.name)
    label: str
    help: str
    kind: Kind
    options: tuple[tuple[str, str], ...] = ()  # (value, label) for selects
    default: str = ""
    attrs: dict[str, str] = field(default_factory=dict)  # min/max/step/required for <input>
    spec_default: str | None = None  # the spec's own default: a value equal to it is left out of the request


def _unwrap(annotation: Any) -> tuple[Any, bool]:
    """(inner type, optional?) of `X | None`."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0], len(args) < len(typing.get_args(annotation))
    return annotation, False


def _kind(inner: Any, optional: bool) -> tuple[Kind, tuple[tuple[str, str], ...]]:
    if typing.get_origin(inner) is Literal:
        values = tuple((str(v), str(v)) for v in typing.get_args(inner))
        return "select", ((("", "search"),) if optional else ()) + values
    if inner is bool:
        return ("tristate", (("", "search"), ("true", "yes"), ("false", "no"))) if optional else ("bool", ())
    if typing.get_origin(inner) is tuple:
        return "list", ()
    return {int: "int", float: "float"}.get(inner, "text"), ()  # type: ignore[return-value]


def spec_field(model: type[BaseModel], name: str, prefix: str, **overrides: Any) -> FormField:
    """A form field from a spec field: type, bounds, default and help all come from the spec."""
    info = model.model_fields[name]
    inner, optional = _unwrap(info.annotation)
    kind, options = _kind(inner, optional)
    attrs: dict[str, str] = {}
    for meta in info.metadata:
        if isinstance(meta, (Ge, Gt)):
            attrs["min"] = str(meta.ge if isinstance(meta, Ge) else meta.gt)
        elif isinstance(meta, (Le, Lt)):
            attrs["max"] = str(meta.le if isinstance(meta, Le) else meta.lt)
    if kind == "float":
        attrs["step"] = "any"
    if info.is_required():
        attrs["required"] = "required"
    default = "" if info.is_required() or info.default is None or kind == "list" else info.default
    default = ("true" if default else "") if kind == "bool" else str(default)
    fields = {"name": f"{prefix}.{name}", "label": LABELS.get(name, name), "help": info.description or "",
              "kind": kind, "options": options, "default": default, "attrs": attrs,
              "spec_default": None if info.is_required() else default}
    return FormField(**{**fields, **overrides})


def _preset_options() -> tuple[tuple[str, str], ...]:
    rows = []
    for row in catalog.model_presets():
        n = ModelSpec(**catalog.model_fields(row["name"])).num_parameters
        rows.append((row["name"], f"{row['name']} ({n / 1e9:.1f}B)"))
    return tuple(rows)


def build_fields() -> dict[str, list[FormField]]:
    """The form, section by section."""
    seq_help = ModelSpec.model_fields["seq_length"].description or ""
    gpus = tuple((g.name, f"{g.name} ({g.memory_bytes / 2**30:.0f} GiB)") for g in catalog.gpus())
    presets = tuple((p.name, p.label) for p in cluster_presets())
    seq_label = "Sequence length (override)"
    return {
        "model_preset": [
            FormField("preset.name", "Model preset", "A published model shape (GET /catalog/models).", "select",
                      _preset_options(), "llama-2-7b", {"required": "required"}),
            FormField("preset.seq_length", seq_label, seq_help, "int", attrs={"min": "1"}),
        ],
        "model_dims": [spec_field(ModelSpec, n, "model") for n in MODEL_DIMS],
        "model_hf": [
            FormField("hf.config", "config.json", "A Hugging Face config.json (Llama, Mistral, Mixtral, Qwen2/3, "
                      "GPT-2, GPT-NeoX); read here, never fetched.", "file",
                      attrs={"accept": ".json,application/json"}),
            FormField("hf.config_text", "…or paste it", "The file's JSON text.", "textarea"),
            FormField("hf.seq_length", seq_label, seq_help, "int", attrs={"min": "1"}),
        ],
        "cluster_common": [spec_field(ClusterSpec, "num_nodes", "cluster", default="2")],
        "cluster_preset": [FormField("cluster_preset", "Node type", "Typical nodes: GPUs, fabric and NICs.",
                                     "select", presets, presets[0][0] if presets else "")],
        "cluster_custom": [spec_field(ClusterSpec, n, "cluster", **({"kind": "select", "options": gpus,
                                                                     "default": "H100-SXM"} if n == "gpu" else {}))
                           for n in CLUSTER_CUSTOM],
        "training": [spec_field(TrainingSpec, n, "training", **({"default": "512"} if n == "global_batch_size" else {}))
                     for n in TRAINING_MAIN],
        "training_more": [spec_field(TrainingSpec, n, "training") for n in TRAINING_MORE],
        "pins": [spec_field(ParallelPins, n, "training.pinned") for n in PINS],
        "render": [spec_field(RenderOptions, n, "render") for n in RENDER],
    }


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


def _value(f: FormField, raw: str) -> Any:
    if f.kind == "bool":
        return raw in ("true", "on", "1")
    if f.kind == "list":
        return [part for part in raw.replace(",", " ").split() if part]
    try:  # numbers as numbers (the spec derives defaults from them); text that is no number goes to the spec as is,
        if f.kind == "int":  # which names the field and says why
            return int(raw)
        if f.kind == "float":
            return float(raw)
    except ValueError:
        pass
    return raw


def _section_values(fields: list[FormField], form: Mapping[str, str], target: dict[str, Any], prefix: str) -> None:
    for f in fields:
        raw = form.get(f.name, "").strip()
        if raw == f.spec_default or (raw == "" and f.kind != "bool"):
            continue  # left as the spec has it (an unchecked box is sent as nothing: False, unless that's the default)
        _put(target, f.name.removeprefix(prefix), _value(f, raw))


def _hf_config(form: Mapping[str, str], upload: bytes | None) -> dict[str, Any]:
    text = upload.decode("utf-8", errors="replace") if upload else form.get("hf.config_text", "")
    if not text.strip():
        raise FormError([FieldError("hf.config", "choose a config.json file or paste its text")])
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormError([FieldError("hf.config", f"not valid JSON: line {exc.lineno} column {exc.colno}: "
                                    f"{exc.msg}")]) from None
    if not isinstance(config, dict):
        raise FormError([FieldError("hf.config", "config.json must hold a JSON object")])
    return config


class FormError(Exception):
    def __init__(self, errors: list[FieldError]) -> None:
        super().__init__("; ".join(map(str, errors)))
        self.errors = errors


def _model(sections: dict[str, list[FormField]], form: Mapping[str, str], upload: bytes | None) -> Any:
    mode = form.get("model_mode", "preset")
    if mode == "dims":
        model: dict[str, Any] = {}
        _section_values(sections["model_dims"], form, model, "model.")
        return model
    key = "hf" if mode == "hf" else "preset"
    seq_field = next(f for f in sections[f"model_{key}"] if f.name == f"{key}.seq_length")
    seq = form.get(seq_field.name, "").strip()
    model = {"hf_config": _hf_config(form, upload)} if mode == "hf" else {"preset": form.get("preset.name", "")}
    return {**model, "seq_length": _value(seq_field, seq)} if seq else (model["preset"] if mode == "preset" else model)


def _cluster(sections: dict[str, list[FormField]], form: Mapping[str, str]) -> dict[str, Any]:
    cluster: dict[str, Any] = {}
    _section_values(sections["cluster_common"], form, cluster, "cluster.")
    if form.get("cluster_mode", "preset") == "custom":
        _section_values(sections["cluster_custom"], form, cluster, "cluster.")
        return cluster
    presets = {p.name: p for p in cluster_presets()}
    chosen = presets.get(form.get("cluster_preset", ""))
    if chosen is None:
        raise FormError([FieldError("cluster_preset", f"choose one of: {', '.join(presets)}")])
    return {**chosen.cluster_fields(), **cluster}


def to_request(sections: dict[str, list[FormField]], form: Mapping[str, str], upload: bytes | None) -> dict[str, Any]:
    """The JSON request POST /plans would take for this form (raises FormError for what only the form checks)."""
    for key, allowed in MODES.items():
        if form.get(key, allowed[0]) not in allowed:
            raise FormError([FieldError(key, f"must be one of {', '.join(allowed)}")])
    training: dict[str, Any] = {}
    for name in ("training", "training_more", "pins"):
        _section_values(sections[name], form, training, "training.")
    request = {"model": _model(sections, form, upload), "cluster": _cluster(sections, form), "training": training}
    render: dict[str, Any] = {}
    _section_values(sections["render"], form, render, "render.")
    return {**request, "render": render} if render else request


def error_field(error: FieldError, form: Mapping[str, str]) -> str:
    """Where the form shows a request error: model.* errors belong to the preset or config.json in those modes."""
    name, mode = error.field, form.get("model_mode", "preset")
    if (name == "model" or name.startswith("model.")) and mode in ("preset", "hf"):
        whole = "hf.config" if mode == "hf" else "preset.name"
        return f"{mode}.seq_length" if name == "model.seq_length" else whole
    if name.startswith("cluster.") and form.get("cluster_mode", "preset") == "preset":
        return name if name == "cluster.num_nodes" else "cluster_preset"
    return name


# -- stored request -> form --------------------------------------------------------------------------------------

def _flat(prefix: str, spec: BaseModel, names: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for n in names:
        v = getattr(spec, n)
        if isinstance(v, bool):  # a checkbox is "" when off; a search/yes/no select says "false"
            tristate = _unwrap(type(spec).model_fields[n].annotation)[1]
            out[f"{prefix}.{n}"] = "true" if v else ("false" if tristate else "")
        elif isinstance(v, tuple):
            out[f"{prefix}.{n}"] = " ".join(v)
        else:
            out[f"{prefix}.{n}"] = "" if v is None else str(v)
    return out


def from_stored(sections: dict[str, list[FormField]], request: dict[str, Any], result: PlanResult) -> dict[str, str]:
    """Form values that reproduce a stored request (the resolved specs, keeping the preset choice)."""
    values = defaults(sections)
    model = request.get("model")
    preset = model if isinstance(model, str) else model.get("preset") if isinstance(model, dict) else None
    if isinstance(preset, str):
        seq = model.get("seq_length", "") if isinstance(model, dict) else ""
        values.update({"model_mode": "preset", "preset.name": preset, "preset.seq_length": str(seq)})
    else:
        values.update({"model_mode": "dims", **_flat("model", result.model, MODEL_DIMS)})
    cluster = _flat("cluster", result.cluster, ("num_nodes", *CLUSTER_CUSTOM[2:]))
    values.update({"cluster_mode": "custom", **cluster, "cluster.gpus_per_node": str(result.cluster.gpus_per_node),
                   "cluster.gpu": result.cluster.gpu.name})
    values.update(_flat("training", result.training, TRAINING_MAIN + TRAINING_MORE))
    values.update(_flat("training.pinned", result.training.pinned, PINS))
    render = request.get("render")
    if isinstance(render, dict):
        values.update({f"render.{k}": " ".join(v) if isinstance(v, list) else str(v) for k, v in render.items()
                       if k in RENDER and v is not None})
    return values
