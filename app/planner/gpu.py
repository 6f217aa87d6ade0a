"""GPU description: datasheet numbers (per GPU) and the efficiency constants of its generation.

The numbers themselves live in ``data/gpus.json`` with a source for each; nothing here is hard-coded.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from app.planner import strict
from app.planner.network import check_label


class Efficiency(BaseModel):
    """How close the hardware gets to its datasheet, per GPU generation (what any software sees).

    Physical, documented constants (data/gpus.json gives the evidence for each), the same for every stack and
    every plan on that generation; they are what `launcher probe` measures on a real cluster. What a software stack
    makes of them (the share of the GEMM rate its kernels keep, its attention kernel, its allocator) lives with the
    stack (data/stacks.json).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    _no_bool_confusion = field_validator("*", mode="before")(strict.check)

    gemm: float = Field(gt=0, le=1, description="Isolated large BF16 GEMM (8192^3, cuBLAS) throughput / dense peak.")
    gemm_fp8: float = Field(0.5, gt=0, le=1, description="Isolated large FP8 GEMM throughput / FP8 dense peak.")
    gemm_k_half: float = Field(
        0.0,
        ge=0,
        le=1e6,
        description="Inner dimension at which a GEMM tile's main loop and its fixed prologue/epilogue cost the same: "
        "a GEMM of inner size k runs at k/(k + k_half) of the rate of the 8192^3 reference.",
    )
    clock: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Tensor-core clock this part sustains under dense math, as a share of the datasheet's (below 1 "
        "only for a part run under a lower power limit than its datasheet's). `gemm` and `gemm_fp8` already include "
        "it; the attention kernels' rates, stated at full clocks (data/stacks.json), are scaled by it.",
    )
    hbm: float = Field(gt=0, le=1, description="Streaming kernels' bandwidth / datasheet HBM bandwidth.")
    nvlink: float = Field(gt=0, le=1, description="NCCL bus bandwidth inside the NVLink domain / datasheet NVLink.")
    network: float = Field(gt=0, le=1, description="NCCL bus bandwidth through one NIC / its line rate.")
    collective_latency_s: float = Field(ge=0, le=1, description="NCCL base latency of one collective call, seconds.")
    intra_step_latency_s: float = Field(ge=0, le=1, description="NCCL per-step latency of a ring step over NVLink.")
    network_hop_latency_s: float = Field(
        ge=0, le=1, description="NCCL per-step latency of a ring/tree step across nodes."
    )
    runtime_overhead_bytes: int = Field(
        ge=0, le=2**40, description="CUDA context, cuBLAS/NCCL workspaces and the like, outside the caching allocator."
    )


class GPUSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    _no_bool_confusion = field_validator("*", mode="before")(strict.check)

    name: str = Field(description="GPU name.")
    generation: str = Field(description="Architecture family, keying the efficiency constants.")
    memory_bytes: int = Field(ge=2**28, le=2**42, description="Device memory visible to the job, bytes.")
    bf16_TFLOPs: float = Field(ge=0.1, le=100_000, description="Dense BF16 tensor-core peak, TFLOP/s.")
    fp16_TFLOPs: float = Field(ge=0.1, le=100_000, description="Dense FP16 tensor-core peak, TFLOP/s.")
    fp8_TFLOPs: float | None = Field(None, ge=0.1, le=200_000, description="Dense FP8 peak, TFLOP/s (none: no FP8).")
    hbm_TBps: float = Field(ge=0.01, le=1000, description="Memory bandwidth, TB/s.")
    nvlink_GBps: float = Field(ge=0.01, le=100_000, description="GPU-to-GPU bandwidth per GPU and direction, GB/s.")
    nvlink_domain: int = Field(ge=1, le=1_000_000, description="GPUs joined by that fabric (1: PCIe only).")
    nvlink_spans_nodes: bool = Field(
        False, description="The NVLink domain spans several nodes (trays), as in GB200 NVL72 racks."
    )
    fabric_mesh: bool = Field(
        False,
        description="The domain's GPUs are joined point to point, one link to each peer (AMD Infinity Fabric on an "
        "8-GPU MI300X platform), not through a switch: nvlink_GBps is then the sum of the links, and a group of k "
        "GPUs of the domain uses the k - 1 links between them.",
    )
    gpus_per_node: int = Field(
        8,
        ge=1,
        le=256,
        description="GPUs in one node (server or compute tray) as the vendor builds it: a cluster's default "
        "(8 on HGX/DGX and MI300X platforms, 4 on a GB200/GB300 NVL72 compute tray).",
    )
    node_cpu_memory_GiB: float | None = Field(
        None,
        ge=1,
        le=1_048_576,
        description="CPU memory of that node as built, GiB: a cluster's default where set (a GB200/GB300 tray's two "
        "Grace CPUs hold 2 x 480 GB); else the cluster's own default.",
    )
    network_GBps: float = Field(
        ge=0.001, le=10_000, description="Typical network bandwidth per GPU and direction, GB/s."
    )
    pcie_GBps: float = Field(ge=0.01, le=10_000, description="Achievable pinned host-device copy bandwidth, GB/s.")
    efficiency: Efficiency = Field(description="Efficiency constants of this generation.")
    source: str = Field("", description="Datasheet references.")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_label("gpu.name", v, 100)  # shown in every file's header (issue 15: no YAML line breaks)

    @field_validator("source")
    @classmethod
    def _source(cls, v: str) -> str:
        return check_label("gpu.source", v, 1000)

    @model_validator(mode="after")
    def _check(self) -> GPUSpec:
        if self.fp8_TFLOPs is not None and self.fp8_TFLOPs <= 0:
            raise ValueError(f"gpu.fp8_TFLOPs({self.fp8_TFLOPs}) must be > 0 or null")
        return self

    def peak_flops(self, precision: str) -> float:
        """Dense tensor-core peak in FLOP/s for the GEMM precision."""
        if precision == "fp8":
            if self.fp8_TFLOPs is None:
                raise ValueError(f"{self.name} has no FP8 tensor cores")
            return self.fp8_TFLOPs * 1e12
        return (self.fp16_TFLOPs if precision == "fp16" else self.bf16_TFLOPs) * 1e12

    @property
    def hbm_bw(self) -> float:
        return self.hbm_TBps * 1e12
