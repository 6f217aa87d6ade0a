"""Checks of the plan's NCCL exports: known names, interfaces and HCAs that exist, values NCCL accepts, and
NCCL variables in the caller's environment that the job will *not* get (the environment is explicit).
"""

from __future__ import annotations

import os

from launcher.checks import FAIL, OK, WARN, Check

# NCCL's documented environment variables (docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html).
KNOWN = frozenset(
    """
NCCL_DEBUG NCCL_DEBUG_SUBSYS NCCL_DEBUG_FILE NCCL_DEBUG_TIMESTAMP_FORMAT NCCL_SOCKET_IFNAME NCCL_SOCKET_FAMILY
NCCL_SOCKET_NTHREADS NCCL_NSOCKS_PERTHREAD NCCL_SOCKET_RETRY_CNT NCCL_SOCKET_RETRY_SLEEP_MSEC NCCL_CROSS_NIC
NCCL_IB_HCA NCCL_IB_DISABLE NCCL_IB_GID_INDEX NCCL_IB_ADDR_FAMILY NCCL_IB_ADDR_RANGE NCCL_IB_ROCE_VERSION_NUM
NCCL_IB_TIMEOUT NCCL_IB_RETRY_CNT NCCL_IB_PKEY NCCL_IB_USE_INLINE NCCL_IB_SL NCCL_IB_TC NCCL_IB_FIFO_TC
NCCL_IB_RETURN_ASYNC_EVENTS NCCL_IB_QPS_PER_CONNECTION NCCL_IB_SPLIT_DATA_ON_QPS NCCL_IB_CUDA_SUPPORT
NCCL_IB_PCI_RELAXED_ORDERING NCCL_IB_ADAPTIVE_ROUTING NCCL_IB_AR_THRESHOLD NCCL_IB_ECE_ENABLE NCCL_IB_MERGE_NICS
NCCL_IB_MERGE_VFS NCCL_OOB_NET_ENABLE NCCL_OOB_NET_IFNAME NCCL_UID_STAGGER_THRESHOLD NCCL_UID_STAGGER_RATE
NCCL_NET NCCL_NET_PLUGIN NCCL_TUNER_PLUGIN NCCL_PROFILER_PLUGIN NCCL_ENV_PLUGIN NCCL_NET_GDR_LEVEL
NCCL_NET_GDR_READ NCCL_NET_GDR_C2C NCCL_NET_SHARED_BUFFERS NCCL_NET_SHARED_COMMS NCCL_NET_FORCE_FLUSH
NCCL_NET_OVERHEAD NCCL_GDRCOPY_ENABLE NCCL_GDRCOPY_FLUSH_ENABLE NCCL_GDRCOPY_SYNC_ENABLE NCCL_P2P_DISABLE
NCCL_P2P_LEVEL NCCL_P2P_DIRECT_DISABLE NCCL_P2P_NET_CHUNKSIZE NCCL_P2P_NVL_CHUNKSIZE NCCL_P2P_PCI_CHUNKSIZE
NCCL_P2P_USE_CUDA_MEMCPY NCCL_P2P_READ_ENABLE NCCL_P2P_LL_THRESHOLD NCCL_SHM_DISABLE NCCL_SHM_USE_CUDA_MEMCPY
NCCL_SHM_MEMCPY_MODE NCCL_SHM_LOCALITY NCCL_BUFFSIZE NCCL_LL_BUFFSIZE NCCL_LL128_BUFFSIZE NCCL_NTHREADS
NCCL_LL128_NTHREADS NCCL_MAX_NCHANNELS NCCL_MIN_NCHANNELS NCCL_MAX_NRINGS NCCL_MIN_NRINGS NCCL_MAX_CTAS
NCCL_MIN_CTAS NCCL_CGA_CLUSTER_SIZE NCCL_NCHANNELS_PER_NET_PEER NCCL_NVB_DISABLE NCCL_PXN_DISABLE
NCCL_P2P_PXN_LEVEL NCCL_PXN_C2C NCCL_ALGO NCCL_PROTO NCCL_NVLS_ENABLE NCCL_NVLS_NCHANNELS NCCL_NVLS_CHUNKSIZE
NCCL_NVLSTREE_MAX_CHUNKSIZE NCCL_MNNVL_ENABLE NCCL_MNNVL_UUID NCCL_MNNVL_CLIQUE_ID NCCL_CUMEM_ENABLE
NCCL_CUMEM_HOST_ENABLE NCCL_COLLNET_ENABLE NCCL_COLLNET_NODE_THRESHOLD NCCL_TOPO_FILE NCCL_TOPO_DUMP_FILE
NCCL_TOPO_DUMP_FILE_RANK NCCL_GRAPH_FILE NCCL_GRAPH_DUMP_FILE NCCL_GRAPH_DUMP_FILE_RANK NCCL_GRAPH_MIXING_SUPPORT
NCCL_LAUNCH_MODE NCCL_LAUNCH_ORDER_IMPLICIT NCCL_IGNORE_CPU_AFFINITY NCCL_IGNORE_DISABLED_P2P NCCL_CHECKS_DISABLE
NCCL_CHECK_POINTERS NCCL_COMM_BLOCKING NCCL_CONF_FILE NCCL_HOSTID NCCL_COMM_ID NCCL_SET_STACK_SIZE
NCCL_SET_THREAD_NAME NCCL_WORK_FIFO_DEPTH NCCL_WORK_FIFO_BYTES NCCL_RUNTIME_CONNECT NCCL_RAS_ENABLE
NCCL_RAS_ADDR NCCL_RAS_TIMEOUT_FACTOR NCCL_CTA_POLICY NCCL_WIN_ENABLE NCCL_SINGLE_RING_THRESHOLD
NCCL_TREE_THRESHOLD NCCL_CROSS_NIC NCCL_ASYNC_ERROR_HANDLING NCCL_BLOCKING_WAIT NCCL_IB_SPLIT_DATA_ON_QPS
""".split()  # noqa: SIM905 (a word list reads better than 150 quoted strings)
)
BOOLEAN = (
    "NCCL_IB_DISABLE",
    "NCCL_P2P_DISABLE",
    "NCCL_SHM_DISABLE",
    "NCCL_NVLS_ENABLE",
    "NCCL_CUMEM_ENABLE",
    "NCCL_PXN_DISABLE",
    "NCCL_NVB_DISABLE",
    "NCCL_IGNORE_CPU_AFFINITY",
    "NCCL_COLLNET_ENABLE",
    "NCCL_NET_GDR_READ",
    "NCCL_IB_PCI_RELAXED_ORDERING",
    "NCCL_CHECKS_DISABLE",
    "NCCL_RUNTIME_CONNECT",
)
DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "TRACE")


def matches(spec: str, available: list[str]) -> list[str]:
    """NCCL's list syntax for NCCL_SOCKET_IFNAME / NCCL_IB_HCA: prefixes, '^' excludes, '=' exact, ':port'."""
    exclude = spec.startswith("^")
    body = spec.lstrip("^")
    exact = body.startswith("=")
    names = [item.split(":")[0] for item in body.lstrip("=").split(",") if item]

    def hit(name: str) -> bool:
        return any(name == n if exact else name.startswith(n) for n in names)

    return [a for a in available if hit(a) != exclude]


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def check_plan_env(env: dict[str, str]) -> list[Check]:
    out = []
    for key in sorted(k for k in env if k.startswith("NCCL_") and k not in KNOWN):
        out.append(Check("nccl", WARN, f"{key} is not an NCCL variable NCCL documents", "check the spelling"))
    for key in (k for k in BOOLEAN if k in env and env[k] not in ("0", "1")):
        out.append(Check("nccl", WARN, f"{key}={env[key]!r} should be 0 or 1", f"set {key} to 0 or 1"))
    level = env.get("NCCL_DEBUG")
    if level is not None and level.upper() not in DEBUG_LEVELS:
        out.append(Check("nccl", WARN, f"NCCL_DEBUG={level!r} is not one of {', '.join(DEBUG_LEVELS)}", ""))
    if "NCCL_SOCKET_IFNAME" in env:
        nics = _listdir("/sys/class/net")
        hit = matches(env["NCCL_SOCKET_IFNAME"], nics)
        status = OK if hit else FAIL
        out.append(
            Check(
                "nccl",
                status,
                f"NCCL_SOCKET_IFNAME={env['NCCL_SOCKET_IFNAME']} -> "
                f"{', '.join(hit) or 'no interface here'} (have {', '.join(nics)})",
                "" if hit else "name an interface this node has (ip link)",
            )
        )
    if "NCCL_IB_HCA" in env:
        hcas = _listdir("/sys/class/infiniband")
        hit = matches(env["NCCL_IB_HCA"], hcas)
        out.append(
            Check(
                "nccl",
                OK if hit else WARN,
                f"NCCL_IB_HCA={env['NCCL_IB_HCA']} -> {', '.join(hit) or 'no HCA here'}",
                "" if hit else "check ibv_devices on this node",
            )
        )
    return out


def check_caller_env(plan_env: dict[str, str], caller_env: dict[str, str]) -> list[Check]:
    out = []
    for key in sorted(k for k in caller_env if k.startswith("NCCL_")):
        if key not in plan_env:
            out.append(
                Check(
                    "nccl",
                    WARN,
                    f"{key}={caller_env[key]} is set here but not in the plan: the job will not get it",
                    f"add {key} to the plan's env if the job needs it",
                )
            )
        elif plan_env[key] != caller_env[key]:
            out.append(
                Check(
                    "nccl",
                    WARN,
                    f"{key}: the plan says {plan_env[key]!r}, this shell {caller_env[key]!r}; the plan's value is used",
                    "",
                )
            )
    return out


def nccl_checks(plan_env: dict[str, str], caller_env: dict[str, str], accelerator: str) -> list[Check]:
    if accelerator == "cpu":
        names = [k for k in plan_env if k.startswith("NCCL_")]
        return [Check("nccl", OK, f"CPU plan (gloo): {len(names)} NCCL variable(s) unused")]
    out = check_plan_env(plan_env) + check_caller_env(plan_env, caller_env)
    count = sum(k.startswith("NCCL_") for k in plan_env)
    if not any(c.status != OK for c in out):
        out.insert(0, Check("nccl", OK, f"{count} NCCL variable(s) in the plan, consistent"))
    return out
