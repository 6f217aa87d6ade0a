"""The measurements of `launcher probe`, run in every worker process the backends start (this file imports
torch; the launcher process never imports it).

GEMM TFLOP/s per precision and shape; all_reduce / all_gather / reduce_scatter / send_recv inside a node and
across nodes, nccl-tests style (algbw = S / t, busbw = algbw x factor; S is the full n x per-rank array for
all_gather and reduce_scatter); pinned host<->device copies; torch's CPU AdamW in params/s. Rank 0 writes
<out>/rank0.json; the launcher turns it into the cluster profile (launcher/profile.py).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
BUS_FACTOR: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "send_recv": lambda n: 1.0,
}
# torch 2.13 renames these (the old names warn); older torch has only the old ones.
ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
GPU = {
    "precisions": ["bf16", "fp16", "fp32"],
    "sizes": [2**p for p in range(20, 31, 2)],
    "max_dim": 16384,
    "adam_params": 2**24,
    "copy_bytes": 2**28,
}
CPU = {
    "precisions": ["fp32", "bf16"],
    "sizes": [2**12, 2**16, 2**20],
    "max_dim": 256,
    "adam_params": 2**20,
    "copy_bytes": 0,
}


def progress(message: str) -> None:
    if dist.get_rank() == 0:
        print(f"probe: {message}", flush=True)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], Any], device: torch.device, iters: int, warmup: int = 2) -> float:
    """Seconds per call."""
    for _ in range(warmup):
        fn()
    sync(device)
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    sync(device)
    return (time.perf_counter() - t0) / iters


def gemm(shapes: list[list[int]], limits: dict[str, Any], device: torch.device) -> list[dict[str, Any]]:
    out = []
    for precision in limits["precisions"]:
        for m, n, k in shapes:
            m, n, k = (min(d, limits["max_dim"]) for d in (m, n, k))
            a = torch.randn(m, k, device=device, dtype=DTYPES[precision])
            b = torch.randn(k, n, device=device, dtype=DTYPES[precision])

            def matmul(a: torch.Tensor = a, b: torch.Tensor = b) -> torch.Tensor:
                return a @ b

            once = timed(matmul, device, 1, warmup=1)
            iters = max(3, min(200, int(0.2 / max(once, 1e-6))))
            t = timed(matmul, device, iters)
            tflops = 2.0 * m * n * k / t / 1e12
            out.append({"precision": precision, "m": m, "n": n, "k": k, "tflops": tflops})
            progress(f"gemm {precision} {m}x{n}x{k}: {tflops:.3g} TFLOP/s")
    return out


def collective(op: str, size: int, group: Any, n: int, device: torch.device) -> Callable[[], Any]:
    """One call of `op` moving S = `size` bytes in nccl-tests' sense."""
    elems = size // 4
    if op == "all_reduce":
        x = torch.ones(elems, device=device)
        return lambda: dist.all_reduce(x, group=group)
    if op == "all_gather":
        full, part = torch.empty(elems // n * n, device=device), torch.ones(elems // n, device=device)
        return lambda: ALL_GATHER(full, part, group=group)
    if op == "reduce_scatter":
        full, part = torch.ones(elems // n * n, device=device), torch.empty(elems // n, device=device)
        return lambda: REDUCE_SCATTER(part, full, group=group)
    me, ranks = dist.get_rank(group), dist.get_process_group_ranks(group)
    send, recv = torch.ones(elems, device=device), torch.empty(elems, device=device)
    peer_to, peer_from = ranks[(me + 1) % n], ranks[(me - 1) % n]

    def ring() -> None:
        ops = [dist.P2POp(dist.isend, send, peer_to, group), dist.P2POp(dist.irecv, recv, peer_from, group)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()

    return ring


def measure_scope(scope: str, group: Any, n: int, limits: dict[str, Any], device: torch.device) -> list[dict[str, Any]]:
    rows = []
    for op in BUS_FACTOR:
        for size in limits["sizes"]:
            iters = max(5, min(50, 2**27 // size))
            dist.barrier(group=group)
            t = torch.tensor([timed(collective(op, size, group, n, device), device, iters)], device=device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)  # the slowest rank sets the pace
            time_s = float(t.item())
            algbw = size / time_s / 1e9
            rows.append(
                {
                    "op": op,
                    "scope": scope,
                    "ranks": n,
                    "bytes": size,
                    "time_s": time_s,
                    "algbw_GBps": algbw,
                    "busbw_GBps": algbw * BUS_FACTOR[op](n),
                }
            )
        progress(f"{op} {scope} ({n} ranks), up to {limits['sizes'][-1]} B: busbw {rows[-1]['busbw_GBps']:.3g} GB/s")
    return rows


def collectives(limits: dict[str, Any], nodes: int, per_node: int, device: torch.device) -> list[dict[str, Any]]:
    rank, rows = dist.get_rank(), []
    if per_node > 1:  # every rank belongs to its node's group: all nodes measure at once
        groups = [dist.new_group(list(range(i * per_node, (i + 1) * per_node))) for i in range(nodes)]
        rows += measure_scope("intra_node", groups[rank // per_node], per_node, limits, device)
    if nodes > 1:
        rows += measure_scope("inter_node", dist.group.WORLD, nodes * per_node, limits, device)
    return rows if rank == 0 else []


def copies(limits: dict[str, Any], device: torch.device) -> dict[str, float] | None:
    if device.type != "cuda" or not limits["copy_bytes"]:
        return None
    n = limits["copy_bytes"]
    host, dev = torch.empty(n, dtype=torch.uint8, pin_memory=True), torch.empty(n, dtype=torch.uint8, device=device)
    h2d = timed(lambda: dev.copy_(host, non_blocking=True), device, 10)
    d2h = timed(lambda: host.copy_(dev, non_blocking=True), device, 10)
    progress(f"pinned copies: h2d {n / h2d / 1e9:.3g} GB/s, d2h {n / d2h / 1e9:.3g} GB/s")
    return {"h2d_GBps": n / h2d / 1e9, "d2h_GBps": n / d2h / 1e9}


def cpu_adam(limits: dict[str, Any]) -> dict[str, float]:
    n = limits["adam_params"]
    param = torch.nn.Parameter(torch.zeros(n))
    param.grad = torch.randn(n)
    opt = torch.optim.AdamW([param], lr=1e-3)
    times = [timed(opt.step, torch.device("cpu"), 3, warmup=1) for _ in range(3)]
    rate = n / statistics.median(times)
    progress(f"CPU AdamW: {rate:.3g} params/s on {torch.get_num_threads()} thread(s)")
    return {"params_per_s": rate, "threads": torch.get_num_threads()}


def device_info(device: torch.device, backend: str) -> dict[str, Any]:
    name, memory = "cpu", 0
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        name, memory = props.name, props.total_memory
    return {
        "name": name,
        "memory_bytes": memory,
        "backend": backend,
        "torch": torch.__version__.split("+")[0],
        "cuda": torch.version.cuda,
    }


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--local_rank", "--local-rank", type=int, default=None)  # the deepspeed runner adds it
    args, _ = p.parse_known_args(argv)
    config = json.loads(Path(args.config).read_text())
    use_cuda = config["accelerator"] == "cuda" and torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    backend = "nccl" if use_cuda else "gloo"
    dist.init_process_group(backend, device_id=device if use_cuda else None)
    limits = GPU if use_cuda else CPU
    nodes, per_node = config["num_nodes"], config["gpus_per_node"]
    hosts = [None] * dist.get_world_size()
    dist.all_gather_object(hosts, socket.gethostname())
    result: dict[str, Any] = {"device": device_info(device, backend), "hosts": hosts[::per_node]}
    if dist.get_rank() == 0:
        result["gemm"] = gemm(config["gemm_shapes"], limits, device)
        result["host_to_device"] = copies(limits, device)
        result["cpu_adam"] = cpu_adam(limits)
    dist.barrier()
    result["collectives"] = collectives(limits, nodes, per_node, device)
    if dist.get_rank() == 0:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "rank0.json").write_text(json.dumps(result, indent=1) + "\n")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
