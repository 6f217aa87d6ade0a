"""Node types the form offers as cluster presets: which catalogue GPU, how many per node, which NICs.

GPU numbers (memory, FLOP/s, NVLink) stay in the planner's GPU catalogue; a preset only names the GPU and gives
the node's network as its vendors describe it (one NIC per GPU, line rate in Gb/s, converted to GB/s here).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from app.planner import catalog


@dataclass(frozen=True)
class ClusterPreset:
    name: str
    label: str
    gpu: str  # a catalogue name
    gpus_per_node: int
    nic_gbit: float  # line rate of the NIC serving each GPU, Gb/s
    nics: tuple[str, ...]
    source: str

    def cluster_fields(self) -> dict[str, Any]:
        """The request's cluster fields; the node size only where it is not the GPU's own, so that a what-if to
        another GPU takes that GPU's (a DGX H100 plan re-planned on GB200 kept 8 GPUs a node on 4-GPU trays)."""
        own = catalog.gpu(self.gpu).gpus_per_node
        return {
            "gpu": self.gpu,
            **({} if self.gpus_per_node == own else {"gpus_per_node": self.gpus_per_node}),
            "inter_node_GBps": self.nic_gbit / 8,
            "nics": list(self.nics),
        }


def _mlx5(n: int) -> tuple[str, ...]:
    return tuple(f"mlx5_{i}" for i in range(n))


@cache
def cluster_presets() -> tuple[ClusterPreset, ...]:
    return (
        ClusterPreset(
            "dgx-h100",
            "DGX H100 / HGX H100: 8 × H100 SXM, 8 × 400 Gb/s InfiniBand",
            "H100-SXM",
            8,
            400,
            _mlx5(8),
            "NVIDIA DGX H100 datasheet: 8x ConnectX-7 400 Gb/s (compute fabric)",
        ),
        ClusterPreset(
            "grand-teton-h100",
            "Grand Teton: 8 × H100 96 GB HBM2e at 500 W, 8 × 400 Gb/s RDMA",
            "H100-96GB-500W",
            8,
            400,
            (),
            "Meta's Grand Teton hosts as torchtitan's benchmarks describe them (benchmarks/llama3_h100_202412_"
            "torchtitan.md): 8 H100 with NVLink, 400 Gb/s RDMA per GPU (NIC names vary: fill them in)",
        ),
        ClusterPreset(
            "hgx-h200",
            "HGX H200: 8 × H200, 8 × 400 Gb/s InfiniBand",
            "H200",
            8,
            400,
            _mlx5(8),
            "NVIDIA HGX H200 reference: 8x ConnectX-7 400 Gb/s",
        ),
        ClusterPreset(
            "dgx-b200",
            "DGX B200: 8 × B200, 8 × 400 Gb/s InfiniBand",
            "B200",
            8,
            400,
            _mlx5(8),
            "NVIDIA DGX B200 datasheet: 8x ConnectX-7 400 Gb/s (compute fabric)",
        ),
        ClusterPreset(
            "dgx-b300",
            "DGX B300: 8 × B300, 8 × 800 Gb/s InfiniBand",
            "B300",
            8,
            800,
            _mlx5(8),
            "NVIDIA DGX B300 datasheet: 8x single-port ConnectX-8 VPI, up to 800 Gb/s (compute fabric)",
        ),
        ClusterPreset(
            "gb200-nvl72",
            "GB200 NVL72 compute tray: 4 × GB200 (one 72-GPU NVLink domain per rack), 4 × 400 Gb/s",
            "GB200",
            4,
            400,
            _mlx5(4),
            "NVIDIA GB200 NVL72: 18 compute trays of 4 GPUs, one ConnectX-7 400 Gb/s per GPU (compute fabric)",
        ),
        ClusterPreset(
            "gb300-nvl72",
            "GB300 NVL72 compute tray: 4 × GB300 (one 72-GPU NVLink domain per rack), 4 × 800 Gb/s",
            "GB300",
            4,
            800,
            _mlx5(4),
            "NVIDIA GB300 NVL72: 18 compute trays of 4 GPUs, one ConnectX-8 800 Gb/s per GPU (72 per rack)",
        ),
        ClusterPreset(
            "dgx-a100",
            "DGX A100: 8 × A100 80GB, 8 × 200 Gb/s HDR InfiniBand",
            "A100-80GB",
            8,
            200,
            _mlx5(8),
            "NVIDIA DGX A100 datasheet: 8x ConnectX-6 200 Gb/s HDR (compute fabric)",
        ),
        ClusterPreset(
            "a100-40gb-hdr",
            "A100 40GB nodes: 8 × A100 40GB, 8 × 200 Gb/s HDR",
            "A100-40GB",
            8,
            200,
            _mlx5(8),
            "DGX A100 (40 GB) datasheet: 8x ConnectX-6 200 Gb/s HDR",
        ),
        ClusterPreset(
            "mi300x",
            "MI300X platform: 8 × MI300X, 8 × 400 Gb/s",
            "MI300X",
            8,
            400,
            (),
            "AMD Instinct MI300X platform: 8 GPUs, one 400 Gb/s NIC per GPU (NIC names vary: fill them in)",
        ),
    )
