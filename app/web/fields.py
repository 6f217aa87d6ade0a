"""Form fields generated from the planner's specs: one field per spec field, its kind, bounds, default and help
text all read from the pydantic model (docs/conventions.md: generate, don't hand-list). A new spec field appears in
the form without an edit here; the tests check that every field of every spec is in the form.

Values travel as the strings a browser sends. `to_value` reads one back into what the spec takes, `to_text` writes
a spec value into the form; `to_value(to_text(v)) == v` for every value a spec accepts (tests/web/test_forms.py).
"""

from __future__ import annotations

import json
import math
import re
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from annotated_types import Ge, Gt, Le, Lt, MaxLen
from pydantic import BaseModel

from app.service.jsonbody import BodyError, parse_json

Kind = Literal["int", "float", "bool", "tristate", "select", "text", "list", "json", "textarea", "file"]
GiB = 2**30
MISSING = object()

# Short labels for the fields people fill most; any other field is labelled by its name in words.
LABELS = {
    "num_query_groups": "KV heads (GQA)",
    "ffn_hidden_size": "FFN size",
    "vocab_size": "Vocabulary",
    "kv_channels": "Head dimension",
    "sliding_window": "Sliding window (tokens)",
    "window_attn_skip_freq": "Global attention every n-th layer",
    "swiglu": "SwiGLU",
    "untie_embeddings_and_output_weights": "Untied embeddings",
    "num_experts": "Experts",
    "moe_router_topk": "Experts per token",
    "moe_ffn_hidden_size": "Expert FFN size",
    "moe_shared_expert_intermediate_size": "Shared-expert FFN size",
    "num_nodes": "Nodes",
    "gpu": "GPU",
    "intra_node_GBps": "Intra-node GB/s",
    "inter_node_GBps": "Inter-node GB/s",
    "nics": "NIC names",
    "cpu_memory_GiB": "CPU memory GiB",
    "global_batch_size": "Global batch",
    "objective": "Rank by",
    "train_tokens": "Training tokens",
    "max_plans": "Plans to show",
    "search_time_limit_s": "Search time cap (s)",
    "tp": "TP",
    "pp": "PP",
    "vpp": "Virtual PP",
    "dp": "DP",
    "cp": "CP",
    "ep": "EP",
    "etp": "Expert TP",
    "zero_stage": "ZeRO stage",
    "micro_batch_size": "Micro-batch",
    "master_addr": "Head node address",
    "master_port": "Rendezvous port",
    "entrypoint": "Training script",
    "data_path": "Dataset path",
    "checkpoint_dir": "Checkpoints",
    "train_iters": "Training steps",
    "lr": "Learning rate",
    "mtbf_hours": "MTBF (hours)",
    "nvme_path": "NVMe path",
    "nvme_GBps": "NVMe GB/s",
    "host_to_device_GBps": "Host↔GPU GB/s",
    "memory_bytes": "Memory",
    "bf16_TFLOPs": "BF16 TFLOP/s",
    "fp16_TFLOPs": "FP16 TFLOP/s",
    "fp8_TFLOPs": "FP8 TFLOP/s",
    "hbm_TBps": "HBM TB/s",
    "nvlink_GBps": "NVLink GB/s",
    "network_GBps": "Network GB/s",
    "pcie_GBps": "PCIe GB/s",
    "nccl_algo": "NCCL algorithm",
    "cp_comm_type": "CP communication",
    "fp8_param_gather": "FP8 primary weights",
    "tp_comm_overlap": "TP comm overlap",
    "moe_ep_overlap": "EP comm overlap",
    "moe_token_dispatcher": "MoE token dispatcher",
    "megatron_fsdp": "Megatron-FSDP",
    "pipeline_layout": "Pipeline layout",
    "hierarchical_cp_sizes": "Hierarchical CP",
}
ACRONYMS = {
    "gpus": "GPUs",
    "moe": "MoE",
    "mla": "MLA",
    "qk": "QK",
    "qkv": "QKV",
    "fp8": "FP8",
    "tp": "TP",
    "cp": "CP",
    "ep": "EP",
    "dp": "DP",
    "pp": "PP",
    "k8s": "Kubernetes",
    "nccl": "NCCL",
    "lr": "LR",
    "gbps": "GB/s",
    "mtp": "MTP",
    "cpu": "CPU",
    "hf": "HF",
    "nvme": "NVMe",
    "fsdp": "FSDP",
    "gib": "GiB",
    "s": "(s)",
}


def label_for(name: str) -> str:
    if name in LABELS:
        return LABELS[name]
    words = [ACRONYMS.get(w.lower(), w) for w in name.split("_")]
    return " ".join(words)[:1].upper() + " ".join(words)[1:]


@dataclass(frozen=True)
class FormField:
    name: str  # the input's name: the request's dotted path (cluster.num_nodes), or a form-only name (preset.name)
    label: str
    help: str
    kind: Kind
    options: tuple[tuple[str, str], ...] = ()  # (value, label) for selects
    default: str = ""  # what the empty form shows
    attrs: dict[str, str] = field(default_factory=dict)  # min/max/maxlength/required, shown as a hint
    spec_default: str | None = None  # the spec's own default as text: a value equal to it is left out of the request
    scale: int = 1  # the form shows value / scale (bytes as GiB)
    item: type = str  # list items: str or int

    @property
    def hint(self) -> str:
        """The allowed range, in the form's units."""
        lo, hi = self.attrs.get("min"), self.attrs.get("max")
        if lo is None and hi is None:
            return ""
        return f"{lo if lo is not None else '…'} – {hi if hi is not None else '…'}"


def _unwrap(annotation: Any) -> tuple[Any, bool]:
    """(inner type, optional?) of `X | None`."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        inner = args[0] if len(args) == 1 else annotation  # a union of several types: text, the spec checks it
        return inner, len(args) < len(typing.get_args(annotation))
    return annotation, False


def _is_model(inner: Any) -> bool:
    return isinstance(inner, type) and issubclass(inner, BaseModel)


def _kind(inner: Any, optional: bool, empty: str) -> tuple[Kind, tuple[tuple[str, str], ...], type]:
    if typing.get_origin(inner) is Literal:
        values = tuple((str(v), str(v)) for v in typing.get_args(inner))
        return "select", (((("", empty),) if optional else ()) + values), str
    if inner is bool:
        return ("tristate", (("", empty), ("true", "yes"), ("false", "no")), str) if optional else ("bool", (), str)
    if typing.get_origin(inner) is tuple:
        args = [a for a in typing.get_args(inner) if a is not Ellipsis]
        item = int if args and all(a is int for a in args) else str
        options = (
            tuple((str(v), str(v)) for v in typing.get_args(args[0]))
            if args and typing.get_origin(args[0]) is Literal
            else ()
        )
        return "list", options, item
    if _is_model(inner) or typing.get_origin(inner) is dict:
        return "json", (), str
    return {int: "int", float: "float"}.get(inner, "text"), (), str  # type: ignore[return-value]


def _bounds(info: Any, scale: int) -> dict[str, str]:
    attrs: dict[str, str] = {}
    for meta in info.metadata:
        bound: Any = None
        if isinstance(meta, (Ge, Gt)):
            key, bound = "min", meta.ge if isinstance(meta, Ge) else meta.gt
        elif isinstance(meta, (Le, Lt)):
            key, bound = "max", meta.le if isinstance(meta, Le) else meta.lt
        if bound is not None:
            attrs[key] = number_text(bound / scale if scale > 1 else bound)
        elif isinstance(meta, MaxLen):
            attrs["maxlength"] = str(meta.max_length)
    return attrs


def number_text(value: float) -> str:
    """A number as the form shows it: integers without a point, floats exactly (repr round-trips)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


def spec_fields(
    model: type[BaseModel],
    prefix: str,
    skip: Iterable[str] = (),
    blank_defaults: bool = False,
    empty: str = "default",
    overrides: Mapping[str, dict[str, Any]] | None = None,
) -> list[FormField]:
    """One form field per field of `model` (in its order), except `skip`. With `blank_defaults` every field is
    optional and blank means "as the base has it" (overrides of a catalogue GPU). `overrides` maps a field name to
    FormField attributes to replace."""
    skipped = set(skip)
    return [
        spec_field(model, name, prefix, blank_defaults, empty, **(overrides or {}).get(name, {}))
        for name in model.model_fields
        if name not in skipped
    ]


def spec_field(
    model: type[BaseModel],
    name: str,
    prefix: str,
    blank_defaults: bool = False,
    empty: str = "default",
    **overrides: Any,
) -> FormField:
    """A form field from a spec field: type, bounds, default and help all come from the spec."""
    info = model.model_fields[name]
    inner, optional = _unwrap(info.annotation)
    kind, options, item = _kind(inner, optional or blank_defaults, empty)
    if blank_defaults and kind == "bool":
        kind, options = "tristate", (("", empty), ("true", "yes"), ("false", "no"))
    scale = GiB if name.endswith("_bytes") and inner is int else 1
    attrs = _bounds(info, scale)
    required = info.is_required() and not blank_defaults
    if required:
        attrs["required"] = "required"
    if blank_defaults or info.is_required():
        default = ""
    else:
        value = info.get_default(call_default_factory=True)
        default = "" if value is None else to_text(kind, value, scale)
    label = label_for(name) + (" (GiB)" if scale == GiB else "")
    fields = {
        "name": f"{prefix}.{name}",
        "label": label,
        "help": re.sub(r"\bbytes\b", "GiB", info.description or "") if scale == GiB else info.description or "",
        "kind": kind,
        "options": options,
        "default": default,
        "attrs": attrs,
        "spec_default": None if required or blank_defaults else default,
        "scale": scale,
        "item": item,
    }
    return FormField(**{**fields, **overrides})


# -- values ------------------------------------------------------------------------------------------------------


def to_text(kind: Kind, value: Any, scale: int = 1) -> str:
    """A spec value as the form shows it."""
    if value is None:
        return ""
    if kind == "bool":
        return "true" if value else ""
    if kind == "tristate":
        return "true" if value else "false"
    if kind == "list":
        return " ".join(str(v) for v in value)
    if kind == "json":
        dumped = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
        return json.dumps(dumped, indent=1, sort_keys=True)
    if kind in ("int", "float"):
        return number_text(value / scale if scale > 1 else value)
    return str(value)


class BadValue(ValueError):
    """A form value that cannot be what its field holds (the message names the field and the text); `where`, when
    given, is the path of the fault inside the field's JSON (cluster.profile.devices.0)."""

    def __init__(self, message: str, where: str = "") -> None:
        super().__init__(message)
        self.where = where


def to_value(f: FormField, raw: str) -> Any:
    """What the spec takes for this field's text; text that is no number goes to the spec as typed, which names the
    field and says why."""
    if f.kind == "bool":
        return raw in ("true", "on", "1")
    if f.kind == "tristate":
        return {"true": True, "false": False}.get(raw, raw)
    if f.kind == "list":
        parts = [part for part in raw.replace(",", " ").split() if part]
        return [typed_number(part, int) if f.item is int else part for part in parts]
    if f.kind == "json":  # read as strictly as a request body: nesting, NaN, 1e400, a key given twice (QA: a 500)
        try:
            return parse_json(raw, f.name)
        except BodyError as exc:
            raise BadValue(exc.errors[0].message, exc.errors[0].field) from None
    if f.kind == "int" and f.scale > 1:
        return _scaled(f, raw)
    if f.kind in ("int", "float"):
        return typed_number(raw, int if f.kind == "int" else float)
    return raw


def _scaled(f: FormField, raw: str) -> int:
    """A field the form shows in GiB: the number of bytes, its range checked in GiB, as the user typed it (the spec's
    own message would give bytes, and a non-finite number has no bytes)."""
    unit = "GiB"
    number = typed_number(raw, float)
    if not isinstance(number, float) or not math.isfinite(number):
        raise BadValue(f"{raw!r} is not a number of {unit}")
    low, high = f.attrs.get("min"), f.attrs.get("max")
    if low is not None and number < float(low):
        raise BadValue(f"at least {low} {unit} (got {number_text(number)})")
    if high is not None and number > float(high):
        raise BadValue(f"at most {high} {unit} (got {number_text(number)})")
    return round(number * f.scale)


# Digits grouped in threes by commas before any decimal point: 1,024 or 12,345.5 (not 2,50 or 12,5).
GROUPED = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d*)?(?:[eE][+-]?\d+)?")


def ungrouped(raw: str) -> str:
    """The text without its thousands separators; any other comma stays, so a decimal comma ('2,50') is no number
    rather than 250 (the commas were all dropped: 12,5 GB/s planned as 125, QA 2026-12-07)."""
    text = raw.strip()
    return text.replace(",", "") if GROUPED.fullmatch(text) else text


def typed_number(raw: str, kind: type) -> Any:
    """The number the text reads as (int or float; 1,000 and 1_000 for int), or the text itself when it is none: the
    spec then names the field and says why ("expected a number (got 'two')")."""
    text = ungrouped(raw).replace("_", "") if kind is int else ungrouped(raw)
    try:
        return kind(text)
    except ValueError:
        pass
    try:
        number = float(text)  # 1e3 or 2.5 in an int box: the first is 1000, the second the spec refuses as 2.5
    except ValueError:
        return raw
    return int(number) if kind is int and number.is_integer() else number


def values_of(fields: Iterable[FormField], spec: BaseModel | Mapping[str, Any], prefix: str) -> dict[str, str]:
    """Form values for every field of a spec instance (or a mapping of its fields)."""
    out = {}
    for f in fields:
        name = f.name.removeprefix(prefix)
        value = spec.get(name, MISSING) if isinstance(spec, Mapping) else getattr(spec, name, MISSING)
        if value is not MISSING:
            out[f.name] = to_text(f.kind, value, f.scale)
    return out
