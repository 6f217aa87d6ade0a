"""The cluster: nodes of identical GPUs, their links and NICs, hosts and storage."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from app.planner import catalog
from app.planner.errors import InputError
from app.planner.gpu import GPUSpec
from app.planner.profile import ClusterProfile
from app.planner.specs.common import Frozen, check_safe_name, check_safe_path


def _gpu_dependent(schema: dict[str, Any]) -> None:
    """No `default` in the schema of a field whose default is the GPU's (a client that fills in defaults sent 8 GPUs
    a node for GB200 trays); the description says what it is."""
    schema.pop("default", None)


class ClusterSpec(Frozen):
    """Nodes of identical GPUs; bandwidths per GPU and per direction, in GB/s (bytes)."""

    num_nodes: int = Field(description="Number of nodes.", ge=1, le=100_000)
    gpus_per_node: int = Field(
        8,
        description="GPUs in each node (default: the GPU's own, `gpu.gpus_per_node`: 8, or 4 on a GB200/GB300 "
        "NVL72 compute tray).",
        ge=1,
        le=256,
        json_schema_extra=_gpu_dependent,
    )
    gpu: GPUSpec = Field(description="GPU type: a catalogue name or custom numbers.")
    intra_node_GBps: float | None = Field(
        None,
        ge=0.01,
        le=100_000,
        description="GPU-to-GPU bandwidth inside a node, per GPU and direction, GB/s "
        "(default: the catalogue's NVLink figure).",
    )
    inter_node_GBps: float | None = Field(
        None,
        ge=0.001,
        le=10_000,
        description="Network bandwidth between nodes per GPU and direction, GB/s "
        "(a 400 Gb/s NIC per GPU is 50 GB/s; default from the catalogue).",
    )
    nics: tuple[str, ...] = Field((), description="InfiniBand HCA names (e.g. mlx5_0 … mlx5_7), used for NCCL_IB_HCA.")
    socket_ifname: str | None = Field(
        None, description="Network interface for NCCL's bootstrap and sockets (NCCL_SOCKET_IFNAME), e.g. eth0."
    )
    hosts: tuple[str, ...] = Field((), description="Host names, one per node, head node first (optional).")
    cpu_memory_GiB: float = Field(
        1024.0,
        ge=1,
        le=1_048_576,
        description="CPU memory per node, GiB, for offload (default: the GPU's node as built, 894 on a GB200/GB300 "
        "tray; else 1,024).",
        json_schema_extra=_gpu_dependent,
    )
    nvme_path: str | None = Field(None, description="Local NVMe mount for ZeRO-Infinity offload, e.g. /local_nvme.")
    nvme_GBps: float = Field(6.0, ge=0.01, le=10_000, description="NVMe read/write bandwidth per node, GB/s.")
    host_to_device_GBps: float | None = Field(
        None,
        ge=0.01,
        le=10_000,
        description="Pinned host↔GPU copy bandwidth per GPU, GB/s (default: the catalogue's PCIe).",
    )
    cpu_adam_params_per_s: float = Field(
        1.0e9,
        ge=1e3,
        le=1e15,
        description="CPU Adam updates per second per node (DeepSpeedCPUAdam), for offload plans.",
    )
    mtbf_hours: float | None = Field(
        None,
        ge=0.01,
        le=10_000_000,
        description="Mean time between failures of the whole job, hours (for the checkpoint interval and goodput; "
        "default: 50,677 GPU-hours per failure, Llama 3's rate on 16,384 H100, divided by the job's GPUs).",
    )
    checkpoint_storage_GBps: float | None = Field(
        None,
        ge=0.001,
        le=100_000,
        description="Aggregate bandwidth of the checkpoint storage for the whole job, GB/s (default: 1 GB/s per "
        "node, what Llama 3's 2 TB/s store gave each of its 2,048 nodes).",
    )
    restart_overhead_s: float | None = Field(
        None,
        ge=0,
        le=86_400,
        description="Seconds a restart costs besides loading the checkpoint: detection, rescheduling, start-up "
        "and initialisation (default 300).",
    )
    profile: ClusterProfile | None = Field(
        None,
        description="A cluster profile from `python -m launcher probe`: measured GEMM, NCCL and copy "
        "rates used in place of the catalogue's.",
    )

    @model_validator(mode="before")
    @classmethod
    def _node_of_gpu(cls, data: object) -> object:
        """A cluster that does not say how many GPUs a node holds has the GPU's own node: a GB200 NVL72 compute
        tray holds 4, and 8 made the rendered sbatch ask for `--gpus-per-node=8`, which no tray can give."""
        if not isinstance(data, dict) or ("gpus_per_node" in data and "cpu_memory_GiB" in data):
            return data  # (null stays a type error, as the schema says)
        try:  # the GPU as its own validators read it (a custom 4.0 is 4)
            gpu = GPUSpec.model_validate(cls._resolve_gpu(data.get("gpu")))
        except ValueError:
            return data  # an unknown or invalid GPU: the field's own validators name it, under `gpu`
        own = {"gpus_per_node": gpu.gpus_per_node, "cpu_memory_GiB": gpu.node_cpu_memory_GiB}
        return {**{k: v for k, v in own.items() if v is not None}, **data}

    @field_validator("gpu", mode="before")
    @classmethod
    def _resolve_gpu(cls, gpu: object) -> object:
        """`gpu` may be a catalogue name, or {"preset": name, ...overrides}, or all GPUSpec fields. Under a preset
        an `efficiency` override replaces only the constants it names (as the web form merges them)."""
        if isinstance(gpu, str):
            return catalog.gpu(gpu)
        if isinstance(gpu, dict) and "preset" in gpu:
            base = catalog.gpu(str(gpu["preset"])).model_dump()
            merged = {**base, **{k: v for k, v in gpu.items() if k != "preset"}}
            if isinstance(gpu.get("efficiency"), dict):
                merged["efficiency"] = {**base["efficiency"], **gpu["efficiency"]}
            return merged
        return gpu

    @model_validator(mode="after")
    def _check(self) -> ClusterSpec:
        for nic in self.nics:
            check_safe_name("cluster.nics", nic)
        for host in self.hosts:
            check_safe_name("cluster.hosts", host)
        if self.socket_ifname is not None:
            check_safe_name("cluster.socket_ifname", self.socket_ifname)
        if self.nvme_path is not None:
            check_safe_path("cluster.nvme_path", self.nvme_path)
        if self.hosts and len(self.hosts) != self.num_nodes:
            raise InputError("cluster.hosts", f"lists {len(self.hosts)} hosts but num_nodes is {self.num_nodes}")
        if len(set(self.hosts)) != len(self.hosts):
            twice = sorted({h for h in self.hosts if self.hosts.count(h) > 1})
            raise InputError("cluster.hosts", f"lists {', '.join(twice)} more than once")
        return self

    @property
    def world_size(self) -> int:
        return self.num_nodes * self.gpus_per_node

    @property
    def nvlink_domain(self) -> int:
        """GPUs that share the NVLink fabric: the node (or part of it), or a multi-node NVLink domain such as a
        GB200 NVL72 rack of 18 trays, capped at the cluster. A job on trays is given them in segments of whole
        trays within one rack (Slurm's block topology, `--segment`): the largest tray count that divides the job's
        and fits a rack, as NVIDIA's Megatron-Bridge benchmarks ask for it (scripts/performance/utils/executors.py
        L168-177): 32 trays run as two segments of 16, so the job's NVLink domain is 64 GPUs, not 72."""
        return self.job_nvlink_domain(self.world_size)

    def job_nvlink_domain(self, world: int) -> int:
        """`nvlink_domain` of a job on `world` of the cluster's GPUs (a plan on fewer nodes is segmented as its
        own node count divides)."""
        domain = self.gpu.nvlink_domain
        if domain <= 1:
            return 1
        if self.gpu.nvlink_spans_nodes:
            return min(world, domain) if world <= self.gpus_per_node else self.segment_nodes(world) * self.gpus_per_node
        return min(self.gpus_per_node, domain)

    def segment_nodes(self, world: int | None = None) -> int:
        """Nodes per NVLink segment of a job on `world` GPUs (all the cluster's by default): every node when they
        fit one domain, else the largest divisor of the node count that does (at least one node). A domain holds as
        many trays as it is built with (18 of an NVL72 rack) however few of a tray's GPUs a job uses: 36 trays of 2
        GPUs were one 72-GPU segment, two racks in fact (QA 2026-12-07)."""
        nodes = max(1, (world or self.world_size) // self.gpus_per_node)
        tray = max(self.gpus_per_node, self.gpu.gpus_per_node)
        fits = max(1, self.gpu.nvlink_domain // tray)
        if nodes <= fits:
            return nodes
        return next(n for n in range(fits, 0, -1) if nodes % n == 0)

    @property
    def intra_bw(self) -> float:
        """Bytes/s per GPU inside the NVLink domain."""
        return (self.intra_node_GBps or self.gpu.nvlink_GBps) * 1e9

    @property
    def inter_bw(self) -> float:
        """Bytes/s per GPU across nodes (or across NVLink domains)."""
        return (self.inter_node_GBps or self.gpu.network_GBps) * 1e9

    @property
    def h2d_bw(self) -> float:
        return (self.host_to_device_GBps or self.gpu.pcie_GBps) * 1e9
