"""The GPU catalogue and the model presets, read from data/*.json (data, with a source for each entry)."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from app.planner.gpu import Efficiency, GPUSpec

_PUBLISHED_KEYS = ("published_params", "published_active_params", "published_precision")
_GPU_DATA_KEYS = ("memory_MiB", "efficiency", "efficiency_evidence")  # gpus.json keys that are not GPUSpec fields


def load_data(name: str) -> dict[str, Any]:
    """A data file of the planner (data/*.json), parsed."""
    text = resources.files("app.planner").joinpath("data", name).read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


@cache
def _gpu_data() -> dict[str, Any]:
    """data/gpus.json, parsed once: the catalogue, its generations' evidence and each GPU's own."""
    return load_data("gpus.json")


@cache
def _gpus() -> dict[str, GPUSpec]:
    data = _gpu_data()
    generations = data["generations"]
    table: dict[str, GPUSpec] = {}
    for row in data["gpus"]:
        fields = {k: v for k, v in row.items() if k not in _GPU_DATA_KEYS}
        fields["memory_bytes"] = int(row["memory_MiB"]) * 2**20
        # the generation's constants, with what this GPU is measured to differ in (its `efficiency_evidence`)
        fields["efficiency"] = Efficiency(
            **{**generations[row["generation"]]["efficiency"], **row.get("efficiency", {})}
        )
        table[row["name"].lower()] = GPUSpec(**fields)
    return table


@cache
def _models() -> dict[str, dict[str, Any]]:
    return {row["name"].lower(): row for row in load_data("models.json")["models"]}


def _lookup(kind: str, name: str, table: dict[str, Any]) -> Any:
    key = name.strip().lower()
    if key not in table:
        known = ", ".join(sorted(v["name"] if isinstance(v, dict) else v.name for v in table.values()))
        raise ValueError(f"unknown {kind} {name!r}; known: {known}")
    return table[key]


def gpu(name: str) -> GPUSpec:
    """A catalogue GPU by name, case-insensitively (A100-80GB, H100-SXM, H200, ...)."""
    spec: GPUSpec = _lookup("gpu", name, _gpus())
    return spec


def gpus() -> list[GPUSpec]:
    return list(_gpus().values())


def generation_evidence() -> dict[str, str]:
    return {name: g["evidence"] for name, g in _gpu_data()["generations"].items()}


def efficiency_evidence(gpu: GPUSpec) -> str:
    """Where a GPU's efficiency constants come from: its generation's evidence, and that of a catalogue GPU's own
    constants where it has some (data/gpus.json `efficiency_evidence`)."""
    generation = generation_evidence().get(gpu.generation, "not documented")
    rows: list[dict[str, Any]] = _gpu_data()["gpus"]
    own = next((r.get("efficiency_evidence") for r in rows if r["name"].lower() == gpu.name.lower()), None)
    return f"{gpu.name}: {own} Generation ({gpu.generation}): {generation}" if own else generation


@cache
def model_fields(name: str) -> dict[str, Any]:
    """The ModelSpec fields of a preset (case-insensitive name), without its published sizes."""
    row = _lookup("model preset", name, _models())
    return {k: v for k, v in row.items() if k not in _PUBLISHED_KEYS}


def model_presets() -> list[dict[str, Any]]:
    """Every preset row as stored, published sizes included."""
    return [dict(row) for row in _models().values()]
