"""The Kubeflow PyTorchJob's pods, as values for templates/pytorchjob.yaml.j2 (training-operator v1).

- Restarts: torchrun restarts its workers only through a rendezvous that regroups them, so a job with
  max_restarts > 0 is elastic: Worker replicas only, `elasticPolicy` with the c10d backend, min = max = the plan's
  node count and `maxRestarts` (pkg/webhooks/pytorch/pytorchjob_webhook.go requires the Worker replica spec with an
  elastic policy; pkg/controller.v1/pytorch/elastic.go turns the policy into PET_* variables). Without restarts:
  one Master and num_nodes - 1 Workers, the static rendezvous the operator sets up. Pods never restart by
  themselves (restartPolicy Never): a failed pod fails the job, which resumes from its checkpoint when resubmitted
  (checkpoint_dir on the PersistentVolumeClaim `k8s_checkpoint_claim`, which every pod mounts there).
- InfiniBand: NCCL reaches the HCAs through the RDMA device plugin's resource (requested per pod, with the IPC_LOCK
  capability RDMA memory registration needs) or through the host network; both are render options because the
  resource name is the cluster's. The hosts' socket interface (cluster.socket_ifname) is named in the pods only on
  the host network (`pod_facts`).
- Requests equal limits for CPU, memory and GPUs: the pods are Guaranteed QoS, the last to be evicted (a
  BestEffort pod, with no requests, is the first).
- terminationGracePeriodSeconds: on deletion or preemption the pod gets SIGTERM, torchrun forwards it and
  Megatron's --exit-signal-handler saves before exiting; Kubernetes waits this long before SIGKILL.
- NVLink across trays (GB200/GB300 NVL72): GPUs of different trays reach each other's memory over NVLink only
  through an IMEX channel. NVIDIA's DRA driver for GPUs hands one to each pod that claims it from a ComputeDomain
  (resource.nvidia.com/v1beta1; NVIDIA/k8s-dra-driver-gpu@2240711 deployments/helm/dra-driver-nvidia-gpu/crds/
  resource.nvidia.com_computedomains.yaml, demo/specs/imex/nvbandwidth-test-job-2.yaml): the file creates one for
  the job and every pod claims its channel. numNodes is the job's node count, as NVIDIA's multi-node demo sets
  it: drivers without the IMEXDaemonsWithDNSNames gate (before 25.8, or with it off) hold the pods until that many
  IMEX daemons joined; later ones only report readiness against it. A job of one NVLink segment also requires its
  pods to share one clique (podAffinity on GPU Feature Discovery's `nvidia.com/gpu.clique` label): otherwise the
  scheduler may spread them over racks, where the channel reaches nothing. A job of several segments cannot say in a
  pod affinity which pods go together; a note names what can (topology-aware scheduling).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from app.render.facts import Facts
from app.render.launch import k8s_elastic
from app.render.megatron_args import data_cache_path
from app.render.options import data_dir, inside

GiB = 2**30
SOCKET_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
POD_IFNAME = "eth0"  # a pod's own interface on the pod network (the CNI's veth end)
CLIQUE_LABEL = "nvidia.com/gpu.clique"  # GPU Feature Discovery: <cluster UUID>.<clique id>, one NVLink partition
JOB_LABEL = "trainplan/job"
CPUS_PER_GPU = 8
HOST_MEMORY_PER_GPU_GIB = 32  # the rank's process, its data-loader workers and pinned buffers


@dataclass(frozen=True, slots=True)
class Replica:
    kind: str  # Master or Worker
    replicas: int


@dataclass(frozen=True, slots=True)
class Claim:
    """A PersistentVolumeClaim every pod mounts."""

    volume: str
    claim: str
    path: str
    read_only: bool
    what: str  # for the volume's comment


@dataclass(frozen=True, slots=True)
class Imex:
    """The job's ComputeDomain and the IMEX channel claim every pod makes from it."""

    domain: str  # the ComputeDomain's name
    template: str  # the ResourceClaimTemplate the DRA driver creates for it, which the pods claim from
    claim: str  # the pods' name for their claim (pod.spec.resourceClaims and the container's resources.claims)
    num_nodes: int
    one_clique: bool  # the whole job is one NVLink segment: its pods must share a clique


@dataclass(frozen=True, slots=True)
class Pod:
    replicas: tuple[Replica, ...]
    elastic: bool
    max_restarts: int
    resources: tuple[tuple[str, str], ...]  # requests = limits
    ipc_lock: bool
    host_network: bool
    grace_period_s: int
    notes: tuple[str, ...]
    host_paths: tuple[tuple[str, str], ...] = ()  # (volume name, path on the node, mounted at the same path)
    claims: tuple[Claim, ...] = ()
    imex: Imex | None = None


def _memory_gib(f: Facts) -> int:
    o = f.options
    if o.k8s_memory_GiB_per_pod:
        if o.k8s_memory_GiB_per_pod > f.cluster.cpu_memory_GiB:  # requests = limits: no node could take the pod
            raise ValueError(
                f"render.k8s_memory_GiB_per_pod({o.k8s_memory_GiB_per_pod}) > cluster.cpu_memory_GiB"
                f"({f.cluster.cpu_memory_GiB:g}): no node of the cluster could schedule the pod"
            )
        return o.k8s_memory_GiB_per_pod
    return max(1, int(min(_memory_want(f), 0.9 * f.cluster.cpu_memory_GiB)))


def _memory_want(f: Facts) -> float:
    """GiB a pod would want: the node's offloaded states and an allowance for each rank's process."""
    return f.plan.estimate.memory.cpu_bytes_per_node / GiB + HOST_MEMORY_PER_GPU_GIB * f.gpus_per_node


def amd(f: Facts) -> bool:
    """An AMD Instinct GPU (a CDNA generation): ROCm, RCCL, AMD's device plugin."""
    return f.cluster.gpu.generation.startswith("cdna")


def gpu_resource(f: Facts) -> str:
    """The extended resource the GPU's device plugin advertises: AMD's (ROCm/k8s-device-plugin) is amd.com/gpu; an
    MI300X pod asked for nvidia.com/gpu and stayed Pending (QA 2026-12-07)."""
    return "amd.com/gpu" if amd(f) else "nvidia.com/gpu"


def _resources(f: Facts) -> tuple[tuple[str, str], ...]:
    o = f.options
    out = [("cpu", str(o.k8s_cpu_per_pod or CPUS_PER_GPU * f.gpus_per_node)), ("memory", f"{_memory_gib(f)}Gi")]
    if o.accelerator == "cuda":
        out.append((gpu_resource(f), str(f.gpus_per_node)))
    if f.cluster.nics and o.k8s_rdma_resource:
        out.append((o.k8s_rdma_resource, str(o.k8s_rdma_per_pod)))
    return tuple(out)


def pod(f: Facts) -> Pod:
    o, n = f.options, f.num_nodes
    elastic = k8s_elastic(f)
    if elastic:
        replicas: tuple[Replica, ...] = (Replica("Worker", n),)
    else:
        replicas = (Replica("Master", 1),) + ((Replica("Worker", n - 1),) if n > 1 else ())
    notes = []
    rdma = bool(f.cluster.nics and o.k8s_rdma_resource)
    if f.cluster.nics and not (rdma or o.k8s_host_network):
        notes.append(
            "pytorchjob.yaml: cluster.nics names InfiniBand HCAs but neither k8s_rdma_resource nor "
            "k8s_host_network is set: the pods would see no HCA and NCCL would fall back to TCP sockets"
        )
    if pod_facts(f) is not f:
        notes.append(
            f"pytorchjob.yaml: cluster.socket_ifname {f.cluster.socket_ifname} names the hosts' interface; on the pod "
            f"network a pod has its own (eth0), so NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME are not set in the pods "
            f"(NCCL and gloo choose); set k8s_host_network to run on the hosts' interfaces"
        )
    if amd(f) and "container_image" not in o.model_fields_set:
        notes.append(
            f"pytorchjob.yaml: {o.container_image} is a CUDA image and the GPUs are {f.cluster.gpu.name}: set "
            f"container_image to a ROCm image that holds the training code (AMD publishes rocm/megatron-lm)"
        )
    imex = _imex(f)
    if imex:
        notes.append(
            f"pytorchjob.yaml: creates ComputeDomain {imex.domain}, whose IMEX channel each pod claims so that its "
            f"GPUs reach the other trays' over NVLink, as the plan counts; it needs NVIDIA's DRA driver for GPUs "
            f"(ComputeDomains) and GPU Feature Discovery's {CLIQUE_LABEL} node labels"
        )
    if imex and not imex.one_clique:
        notes.append(
            f"pytorchjob.yaml: the plan counts NVLink within segments of {f.nvlink_segment} trays: each run of "
            f"{f.nvlink_segment} consecutive node ranks must share one NVL72 rack's NVLink clique ({CLIQUE_LABEL}), "
            f"which a pod affinity cannot say for {imex.num_nodes // (f.nvlink_segment or 1)} segments; schedule the "
            f"job with topology-aware scheduling (Kueue: podset slices of {f.nvlink_segment} pods on {CLIQUE_LABEL}) "
            f"or the groups that cross racks run over the network"
            + (
                "; and restarts make the job elastic, whose c10d rendezvous numbers the nodes as they join, not by pod"
                " index: set max_restarts 0 for node ranks that follow the pods' placement"
                if elastic
                else ""
            )
        )
    want, given = _memory_want(f), _memory_gib(f)
    if not o.k8s_memory_GiB_per_pod and want > 0.9 * f.cluster.cpu_memory_GiB:  # capped: less than it wants
        notes.append(
            f"pytorchjob.yaml: the offloaded states ({f.plan.estimate.memory.cpu_bytes_per_node / GiB:.0f} GiB) "
            f"and {HOST_MEMORY_PER_GPU_GIB} GiB for each of the {f.gpus_per_node} ranks' processes want {want:.0f} "
            f"GiB; the pod gets {given} GiB (90% of the node's {f.cluster.cpu_memory_GiB:g}): the ranks and /dev/shm "
            f"share {given - f.plan.estimate.memory.cpu_bytes_per_node / GiB:.0f} GiB"
        )
    claims: list[Claim] = []
    if o.data_path and o.k8s_data_claim:
        # read-only where nothing is written there: Megatron builds its index cache next to the dataset unless
        # --data-cache-path sends it elsewhere (megatron-core gpt_dataset.py; Megatron-DeepSpeed's index-cache)
        where = data_dir(o.data_path)
        cache = data_cache_path(f)
        read_only = cache is not None and not inside(cache, where)
        claims.append(Claim("dataset", o.k8s_data_claim, where, read_only, "the dataset" + (", read only" * read_only)))
        if not read_only:
            notes.append(
                f"pytorchjob.yaml: k8s_data_claim is mounted read-write at {where}: Megatron writes the dataset's "
                f"index cache next to it; give data_cache_path (or checkpoint_dir) elsewhere for a read-only mount"
            )
    elif o.data_path:
        notes.append(
            f"pytorchjob.yaml: nothing is mounted at {data_dir(o.data_path)}, where data_path is: each pod would look "
            f"for the dataset in its own image and the data loader stop; set k8s_data_claim to a "
            f"PersistentVolumeClaim that holds it (or use an image that does)"
        )
    if o.checkpoint_dir and o.k8s_checkpoint_claim:
        claims.append(Claim("checkpoints", o.k8s_checkpoint_claim, o.checkpoint_dir, False, "checkpoint_dir"))
    elif o.checkpoint_dir:
        notes.append(
            f"pytorchjob.yaml: nothing is mounted at checkpoint_dir {o.checkpoint_dir}: each pod would save into "
            f"its container's own filesystem, lost with the pod; set k8s_checkpoint_claim to a ReadWriteMany "
            f"PersistentVolumeClaim (or use an image whose {o.checkpoint_dir} is shared storage)"
        )
    return Pod(
        replicas=replicas,
        elastic=elastic,
        max_restarts=o.max_restarts,
        resources=_resources(f),
        ipc_lock=bool(f.cluster.nics) and (rdma or o.k8s_host_network),
        host_network=o.k8s_host_network,
        grace_period_s=f.decisions.graceful_stop_s,
        notes=tuple(notes),
        host_paths=_nvme(f),
        claims=tuple(claims),
        imex=imex,
    )


def pod_facts(f: Facts) -> Facts:
    """`f` as the pods see it: on the pod network a pod has its own interface (eth0), never the hosts' named by
    cluster.socket_ifname, so the socket variables naming it are left out of the pods' environment and of the
    ConfigMap's nccl_env.sh: NCCL stopped with "no socket interface found" and gloo with "Unable to find address for"
    it (QA 2026-12-07). On the host network they stay, and where the hosts' interface is eth0 as the pods' is."""
    if f.options.k8s_host_network or f.cluster.socket_ifname in (None, POD_IFNAME):
        return f
    return dataclasses.replace(f, nccl_env=tuple(e for e in f.nccl_env if e.name not in SOCKET_VARS))


def _imex(f: Facts) -> Imex | None:
    """The ComputeDomain where the plan counts NVLink across trays (`Facts.nvlink_segment`), else None."""
    if not f.nvlink_segment or f.options.accelerator != "cuda":  # (CPU smoke tests claim no GPU channel)
        return None
    return Imex(
        domain=f"{f.job_name}-imex",
        template=f"{f.job_name}-imex-channel",
        claim="imex-channel",
        num_nodes=f.num_nodes,
        one_clique=f.nvlink_segment >= f.num_nodes,
    )


def _nvme(f: Facts) -> tuple[tuple[str, str], ...]:
    """ZeRO-Infinity swaps to cluster.nvme_path (ds_config.json): the node's NVMe, mounted into the pod at the same
    path. Without it DeepSpeed's swapper creates the folder in the container's writable layer and fills the node's
    root disk (or the pod is evicted for ephemeral storage), at a speed the plan never timed."""
    par = f.par
    if "nvme" not in (par.offload_optimizer, par.offload_param) or f.cluster.nvme_path is None:
        return ()
    return (("nvme-swap", f.cluster.nvme_path),)
