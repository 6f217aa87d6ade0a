"""Cluster profiles measured by `python -m launcher probe` (format: docs/cluster-profile.md), and their use.

A profile replaces catalogue figures with measured ones: the isolated GEMM rate (each stack keeps its own share of
it in training, data/stacks.json `gemm_fraction`), NCCL bus bandwidth inside and across nodes (large messages),
pinned host-device copy bandwidth and CPU Adam throughput. Every result lists the constants it used and where
each came from.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.planner import strict

LARGE_MESSAGE_BYTES = 32 * 2**20  # bus bandwidth is read on the plateau of large messages


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    _no_bool_confusion = field_validator("*", mode="before")(strict.check)


class ProfileDevice(_Strict):
    name: str = Field(description="Device name as torch reports it (e.g. 'NVIDIA H200'), or 'cpu'.")
    memory_bytes: int = Field(0, ge=0, le=2**42)
    backend: Literal["nccl", "gloo"] = Field(description="torch.distributed backend used for the collectives.")


class GemmSample(_Strict):
    precision: Literal["bf16", "fp16", "fp8", "fp32"]
    m: int = Field(ge=1, le=2**20)
    n: int = Field(ge=1, le=2**20)
    k: int = Field(ge=1, le=2**20)
    tflops: float = Field(ge=0, le=200_000)


class CollectiveSample(_Strict):
    op: Literal["all_reduce", "all_gather", "reduce_scatter", "send_recv", "all_to_all"]
    scope: Literal["intra_node", "inter_node"]
    ranks: int = Field(ge=1, le=25_600_000)
    bytes: int = Field(ge=1, le=2**50)
    busbw_GBps: float = Field(ge=0, le=100_000)


class HostDevice(_Strict):
    h2d_GBps: float = Field(ge=0.01, le=10_000)
    d2h_GBps: float = Field(ge=0.01, le=10_000)


class CpuAdam(_Strict):
    params_per_s: float = Field(ge=1e3, le=1e15)
    threads: int = Field(1, ge=1, le=65_536)


class ClusterProfile(_Strict):
    """What `launcher probe` measured (only the fields the planner reads are checked)."""

    schema_version: Literal[1] = Field(description="Profile format version.")
    kind: Literal["trainplan.cluster_profile"] = "trainplan.cluster_profile"
    created: str = Field("", description="When it was measured.")
    num_nodes: int = Field(1, ge=1, le=100_000)
    gpus_per_node: int = Field(1, ge=1, le=256)
    device: ProfileDevice
    gemm: tuple[GemmSample, ...] = ()
    collectives: tuple[CollectiveSample, ...] = ()
    host_to_device: HostDevice | None = None
    cpu_adam: CpuAdam | None = None

    def gemm_tflops(self, precision: str) -> float | None:
        """Best measured rate among the largest GEMMs of a precision."""
        rows = [g for g in self.gemm if g.precision == precision]
        if not rows:
            return None
        largest = max(g.m * g.n * g.k for g in rows)
        return max(g.tflops for g in rows if g.m * g.n * g.k >= largest / 8)

    def busbw(self, scope: str) -> float | None:
        """Best bus bandwidth (GB/s) of large all-reduce/all-gather/reduce-scatter messages in a scope."""
        rows = [
            c.busbw_GBps
            for c in self.collectives
            if c.scope == scope and c.op != "send_recv" and c.bytes >= LARGE_MESSAGE_BYTES and c.ranks > 1
        ]
        return max(rows) if rows else None


class Constant(BaseModel):
    """One number the cost model used, and where it came from."""

    model_config = ConfigDict(frozen=True)

    name: str
    value: float
    unit: str
    source: str
