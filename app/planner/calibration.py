"""Which constants a result used: catalogue figures, or a measured cluster profile in their place."""

from __future__ import annotations

from app.planner.profile import Constant
from app.planner.specs import ClusterSpec, TrainingSpec


def _device_matches(cluster: ClusterSpec) -> bool:
    assert cluster.profile is not None
    name = cluster.profile.device.name.lower()
    return cluster.profile.device.backend == "nccl" and cluster.gpu.name.split("-")[0].lower() in name


def apply_profile(cluster: ClusterSpec, training: TrainingSpec) -> tuple[ClusterSpec, list[str]]:
    """The cluster with measured numbers in place of catalogue ones, and notes on what was (not) applied."""
    profile = cluster.profile
    if profile is None:
        return cluster, []
    if profile.device.backend != "nccl":
        return cluster, [
            f"profile measured with {profile.device.backend} on {profile.device.name}: not applied "
            f"(a CPU profile only exercises the code path)"
        ]
    notes: list[str] = []
    update: dict[str, object] = {}
    eff = cluster.gpu.efficiency
    gpu_update: dict[str, object] = {}
    precision = "bf16" if training.precision == "fp8" else training.precision
    tflops = profile.gemm_tflops(precision)
    if tflops is not None and _device_matches(cluster):
        # the probe times an isolated GEMM: it replaces the catalogue's isolated rate; the stack's share of it in
        # training (data/stacks.json gemm_fraction) still applies
        gpu_update["gemm"] = min(1.0, tflops * 1e12 / cluster.gpu.peak_flops(precision))
    elif tflops is not None:
        notes.append(f"profile device {profile.device.name!r} is not a {cluster.gpu.name}: GEMM rate not applied")
    for scope, field, efficiency in (
        ("intra_node", "intra_node_GBps", eff.nvlink),
        ("inter_node", "inter_node_GBps", eff.network),
    ):
        busbw = profile.busbw(scope)
        if busbw:
            update[field] = busbw / efficiency  # so that nominal x efficiency = the measured bus bandwidth
    if profile.host_to_device:
        update["host_to_device_GBps"] = min(profile.host_to_device.h2d_GBps, profile.host_to_device.d2h_GBps)
    if profile.cpu_adam:
        update["cpu_adam_params_per_s"] = profile.cpu_adam.params_per_s * cluster.gpus_per_node
    if gpu_update:
        gpu = cluster.gpu.model_copy(update={"efficiency": eff.model_copy(update=gpu_update)})
        update["gpu"] = gpu
    return cluster.model_copy(update=update), notes


def constants(cluster: ClusterSpec, training: TrainingSpec) -> list[Constant]:
    """The hardware numbers behind a result, each with its source."""
    profile = cluster.profile
    measured = profile is not None and profile.device.backend == "nccl"
    when = f"profile {profile.created}" if profile is not None else ""
    eff = cluster.gpu.efficiency
    catalogue = f"catalogue ({cluster.gpu.name}, {cluster.gpu.generation} efficiency)"
    precision = "bf16" if training.precision == "fp8" else training.precision

    def src(used: bool) -> str:
        return when if used else catalogue

    gemm_measured = (
        measured and profile is not None and profile.gemm_tflops(precision) is not None and _device_matches(cluster)
    )
    intra = measured and profile is not None and profile.busbw("intra_node") is not None
    inter = measured and profile is not None and profile.busbw("inter_node") is not None
    software = training.software
    costs = software.generation(cluster.gpu.generation)
    evidence = f"{software.name} on {cluster.gpu.generation} (data/stacks.json)"
    stack = [
        Constant(name="GEMM share kept in training", value=costs.gemm_fraction, unit="", source=evidence),
        Constant(name="host time per operator", value=costs.host_op_s * 1e6, unit="us", source=evidence),
        Constant(name="host time per step", value=costs.host_step_s * 1e3, unit="ms", source=evidence),
        Constant(name="overlap contention", value=costs.overlap_contention, unit="", source=evidence),
    ]  # fmt: skip
    if software.costs.pipeline_microbatch_overhead_s:
        stack.append(
            Constant(
                name="pipeline engine per micro-batch",
                value=software.costs.pipeline_microbatch_overhead_s * 1e3,
                unit="ms",
                source=f"data/stacks.json {software.name} (BLOOM and MT-NLG runs)",
            )
        )
    hardware = [
        Constant(
            name="GEMM throughput in training",
            value=cluster.gpu.peak_flops(precision) * eff.gemm * costs.gemm_fraction / 1e12,
            unit="TFLOP/s",
            source=f"{src(gemm_measured)} (isolated GEMM) x the stack's share",
        ),
        Constant(
            name="intra-node bus bandwidth",
            value=cluster.intra_bw * eff.nvlink / 1e9,
            unit="GB/s",
            source=src(intra) if cluster.intra_node_GBps is None or intra else "request",
        ),
        Constant(
            name="inter-node bus bandwidth",
            value=cluster.inter_bw * eff.network / 1e9,
            unit="GB/s",
            source=src(inter) if cluster.inter_node_GBps is None or inter else "request",
        ),
        Constant(
            name="host-device copy bandwidth",
            value=cluster.h2d_bw / 1e9,
            unit="GB/s",
            source=src(measured and profile is not None and profile.host_to_device is not None),
        ),
        Constant(
            name="CPU Adam per node",
            value=cluster.cpu_adam_params_per_s / 1e9,
            unit="Gparams/s",
            source=src(measured and profile is not None and profile.cpu_adam is not None),
        ),
    ]
    return stack + hardware
