"""The cluster profile (``kind: "trainplan.cluster_profile"``, ``schema_version: 1``) that `launcher probe`
writes and the planner reads; described in docs/cluster-profile.md. Stdlib only.
"""

from __future__ import annotations

import time
from typing import Any

from launcher.fields import PlanError
from launcher.spec import Hardware

SCHEMA_VERSION = 1
KIND = "trainplan.cluster_profile"
OPS = ("all_reduce", "all_gather", "reduce_scatter", "send_recv")
SCOPES = ("intra_node", "inter_node")
KEYS = (
    "schema_version",
    "kind",
    "created",
    "num_nodes",
    "gpus_per_node",
    "hosts",
    "device",
    "gemm",
    "collectives",
    "host_to_device",
    "cpu_adam",
)
DEVICE_KEYS = ("name", "memory_bytes", "backend", "torch", "cuda")
GEMM_KEYS = ("precision", "m", "n", "k", "tflops")
COLLECTIVE_KEYS = ("op", "scope", "ranks", "bytes", "time_s", "algbw_GBps", "busbw_GBps")


def make_profile(raw: dict[str, Any], num_nodes: int, gpus_per_node: int, hosts: list[str]) -> dict[str, Any]:
    """The profile from rank 0's measurements (launcher/workers/probe_worker.py)."""
    profile = {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "num_nodes": num_nodes,
        "gpus_per_node": gpus_per_node,
        "hosts": hosts or raw.get("hosts", []),
        "device": {k: raw["device"][k] for k in DEVICE_KEYS},
        "gemm": [{k: g[k] for k in GEMM_KEYS} for g in raw["gemm"]],
        "collectives": [{k: c[k] for k in COLLECTIVE_KEYS} for c in raw["collectives"]],
        "host_to_device": raw.get("host_to_device"),
        "cpu_adam": raw["cpu_adam"],
    }
    validate(profile)
    return profile


def _need(cond: bool, message: str) -> None:
    if not cond:
        raise PlanError(f"cluster profile: {message}")


def validate(doc: dict[str, Any]) -> None:
    """Refuse a document that is not a version-1 profile; names the first problem."""
    _need(isinstance(doc, dict) and doc.get("kind") == KIND, f"kind is not {KIND!r}")
    _need(doc.get("schema_version") == SCHEMA_VERSION, f"schema_version {doc.get('schema_version')!r} is not 1")
    _need(sorted(doc) == sorted(KEYS), f"keys {sorted(doc)} != {sorted(KEYS)}")
    _need(sorted(doc["device"]) == sorted(DEVICE_KEYS), "device keys")
    for g in doc["gemm"]:
        _need(sorted(g) == sorted(GEMM_KEYS) and g["tflops"] > 0, f"gemm entry {g}")
    for c in doc["collectives"]:
        _need(sorted(c) == sorted(COLLECTIVE_KEYS), f"collective entry {c}")
        _need(c["op"] in OPS and c["scope"] in SCOPES and c["time_s"] > 0, f"collective entry {c}")
    h2d = doc["host_to_device"]
    _need(h2d is None or sorted(h2d) == ["d2h_GBps", "h2d_GBps"], "host_to_device")
    _need(sorted(doc["cpu_adam"]) == ["params_per_s", "threads"], "cpu_adam keys")


def best(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows]
    return max(values) if values else None


def summary_rows(profile: dict[str, Any], hw: Hardware | None) -> list[tuple[str, str, str, str]]:
    """(what, measured, catalogue, measured/catalogue) rows for the probe's closing table."""
    rows = []

    def row(what: str, measured: float | None, unit: str, catalogue: float | None) -> None:
        ratio = "-" if not catalogue or measured is None else f"{measured / catalogue:.2f}"
        cat = "-" if catalogue is None else f"{catalogue:.4g} {unit}"
        meas = "-" if measured is None else f"{measured:.4g} {unit}"
        rows.append((what, meas, cat, ratio))

    def catalogue(name: str) -> float | None:
        return getattr(hw, name, None) if hw else None

    for precision in sorted({g["precision"] for g in profile["gemm"]}):
        gemms = [g for g in profile["gemm"] if g["precision"] == precision]
        row(f"GEMM {precision} (best shape)", best(gemms, "tflops"), "TFLOP/s", catalogue(f"{precision}_TFLOPs"))
    for scope in SCOPES:
        for op in OPS:
            sel = [c for c in profile["collectives"] if c["scope"] == scope and c["op"] == op]
            if sel:
                largest = max(sel, key=lambda c: c["bytes"])
                row(
                    f"{op} {scope} busbw @ {largest['bytes']} B",
                    largest["busbw_GBps"],
                    "GB/s",
                    catalogue(f"{scope}_GBps"),
                )
    h2d = profile["host_to_device"]
    if h2d:
        row("pinned host->device copy", h2d["h2d_GBps"], "GB/s", catalogue("host_to_device_GBps"))
    row("CPU AdamW", profile["cpu_adam"]["params_per_s"], "params/s", catalogue("cpu_adam_params_per_s"))
    return rows
