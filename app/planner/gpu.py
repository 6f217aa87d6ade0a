"""GPU description: datasheet numbers (per GPU) and the efficiency constants of its generation.

The numbers themselves live in ``data/gpus.json`` with a source for each; nothing here is hard-coded.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Efficiency(BaseModel):
    """How close real kernels and collectives get to the datasheet, per GPU generation.

    These are physical, documented constants (see data/gpus.json for the evidence behind each), the same for
    every model and every plan on that generation; they are what `launcher probe` measures on a real cluster.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    gemm: float = Field(gt=0, le=1, description="Large dense GEMM throughput / datasheet peak.")
    gemm_fp8: float = Field(0.5, gt=0, le=1, description="Large FP8 GEMM throughput / FP8 peak.")
    attention: float = Field(gt=0, le=1, description="Fused (flash) attention throughput / peak.")
    hbm: float = Field(gt=0, le=1, description="Streaming kernels' bandwidth / datasheet HBM bandwidth.")
    nvlink: float = Field(gt=0, le=1, description="NCCL bus bandwidth inside a node / datasheet NVLink.")
    network: float = Field(gt=0, le=1, description="NCCL bus bandwidth across nodes / NIC line rate.")
    kernel_overhead_s: float = Field(ge=0, description="Fixed cost per kernel (launch, tail) in seconds.")
    collective_latency_s: float = Field(ge=0, description="Fixed cost per NCCL collective call in seconds.")
    network_hop_latency_s: float = Field(
        ge=0, description="Per-step latency of a ring step across nodes (rings over n ranks take n-1 steps)."
    )
    overlap: float = Field(
        ge=0,
        le=1,
        description="Share of overlappable communication that really hides under compute "
        "(NCCL and compute kernels contend for SMs and HBM).",
    )
    runtime_overhead_bytes: int = Field(
        ge=0, description="CUDA context, cuBLAS/NCCL workspaces and the like, outside the allocator."
    )
    allocator_fragmentation: float = Field(
        ge=0, le=1, description="Extra reserved memory over allocated (caching-allocator fragmentation)."
    )


class GPUSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="GPU name.")
    generation: str = Field(description="Architecture family, keying the efficiency constants.")
    memory_bytes: int = Field(gt=0, description="Device memory visible to the job, bytes.")
    bf16_TFLOPs: float = Field(gt=0, description="Dense BF16 tensor-core peak, TFLOP/s.")
    fp16_TFLOPs: float = Field(gt=0, description="Dense FP16 tensor-core peak, TFLOP/s.")
    fp8_TFLOPs: float | None = Field(None, description="Dense FP8 peak, TFLOP/s (none: no FP8).")
    hbm_TBps: float = Field(gt=0, description="Memory bandwidth, TB/s.")
    nvlink_GBps: float = Field(gt=0, description="GPU-to-GPU bandwidth per GPU and direction, GB/s.")
    nvlink_domain: int = Field(ge=1, description="GPUs joined by that fabric (1: PCIe only).")
    network_GBps: float = Field(gt=0, description="Typical network bandwidth per GPU and direction, GB/s.")
    pcie_GBps: float = Field(gt=0, description="Achievable pinned host-device copy bandwidth, GB/s.")
    efficiency: Efficiency = Field(description="Efficiency constants of this generation.")
    source: str = Field("", description="Datasheet references.")

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
