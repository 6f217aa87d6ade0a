"""POST /plans latency and throughput of the service, end to end over HTTP, and where the time goes.

    python benchmarks/service_latency.py                       # 3 sizes x concurrency 1 and 4, cache off
    python benchmarks/service_latency.py -n 200 --workers 2 --concurrency 8 --cache

Starts `uvicorn app.main:app` on 127.0.0.1 (a free port, a throwaway SQLite file), sends N POST /plans per
model/cluster size with a concurrent httpx client, and prints p50/p95 latency and plans per second. The result
cache is off unless --cache (then identical requests after the first are cache hits: that measures the service
without the search). The last table splits one request's work in-process: search, render, store, JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CASES: dict[str, dict[str, Any]] = {
    "llama-2-7b / 16 x H100": {"model": "llama-2-7b", "cluster": {"num_nodes": 2, "gpu": "H100-SXM"},
                               "training": {"global_batch_size": 64}},
    "llama-2-13b / 64 x A100": {"model": "llama-2-13b", "cluster": {"num_nodes": 8, "gpu": "A100-80GB"},
                                "training": {"global_batch_size": 256}},
    "llama-2-70b / 256 x H100": {"model": "llama-2-70b", "cluster": {"num_nodes": 32, "gpu": "H100-SXM"},
                                 "training": {"global_batch_size": 512}},
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(port: int, workers: int, cache: bool, db: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{db}", "TRAINPLAN_PLAN_CACHE_SIZE": "128" if cache else "0",
           "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "app.main:app", "--host", "127.0.0.1", "--port",
                             str(port), "--workers", str(workers), "--log-level", "warning"], cwd=ROOT, env=env)
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).raise_for_status()
            return proc
        except httpx.TransportError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the server did not start") from None
            time.sleep(0.1)


async def run_case(base: str, body: dict[str, Any], n: int, concurrency: int) -> dict[str, float]:
    latencies: list[float] = []
    search_s: list[float] = []
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=base, timeout=120, limits=httpx.Limits(max_connections=concurrency)) as c:
        for _ in range(3):  # warm-up: imports, caches, connections
            (await c.post("/plans", json=body)).raise_for_status()

        async def one() -> None:
            async with gate:
                t0 = time.perf_counter()
                r = await c.post("/plans", json=body)
                latencies.append(time.perf_counter() - t0)
                r.raise_for_status()
                search_s.append(r.json()["result"]["stats"]["seconds"])

        start = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
        wall = time.perf_counter() - start
    q = statistics.quantiles(latencies, n=100, method="inclusive")
    return {"min": min(latencies), "p50": q[49], "p95": q[94], "max": max(latencies), "per_s": n / wall,
            "search": statistics.median(search_s)}


def in_process_split(body: dict[str, Any], repeat: int = 20) -> dict[str, float]:
    """Median seconds of each step of one POST /plans, called directly (no HTTP, no threads)."""
    from app.api.artifacts import render_files
    from app.api.plans import stored_plan
    from app.api.service import parse_plan_request
    from app.planner import plan
    from app.store import PlanStore

    with tempfile.TemporaryDirectory() as tmp:
        store = PlanStore(f"sqlite:///{tmp}/split.db")
        store.init()
        steps: dict[str, list[float]] = {"parse": [], "search": [], "render": [], "store": [], "json": []}
        for _ in range(repeat):
            t0 = time.perf_counter()
            request, options = parse_plan_request(body)
            t1 = time.perf_counter()
            result = plan(request)
            t2 = time.perf_counter()
            files = render_files(result, 1, options).files
            t3 = time.perf_counter()
            record = store.add(body, result, [], files)
            t4 = time.perf_counter()
            stored_plan(record, sorted(files)).model_dump_json()
            t5 = time.perf_counter()
            for name, dt in zip(steps, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4), strict=True):
                steps[name].append(dt)
        store.close()
    return {name: statistics.median(v) for name, v in steps.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=60, help="requests per case and concurrency (default 60)")
    parser.add_argument("--concurrency", default="1,4", help="comma-separated client concurrencies (default 1,4)")
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes (default 1)")
    parser.add_argument("--cache", action="store_true", help="keep the service's result cache on")
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(port, args.workers, args.cache, Path(tmp) / "bench.db")
        try:
            print(f"uvicorn app.main:app, {args.workers} worker(s), cache {'on' if args.cache else 'off'}, "
                  f"{os.cpu_count()} CPUs, {args.n} POST /plans per row")
            print(f"{'case':<26} {'conc':>4} {'min ms':>7} {'p50 ms':>7} {'p95 ms':>7} {'max ms':>7} {'plans/s':>8} "
                  f"{'search ms':>9} {'search/p50':>10}")
            for name, body in CASES.items():
                for conc in levels:
                    s = asyncio.run(run_case(f"http://127.0.0.1:{port}", body, args.n, conc))
                    print(f"{name:<26} {conc:>4} {1e3 * s['min']:>7.1f} {1e3 * s['p50']:>7.1f} "
                          f"{1e3 * s['p95']:>7.1f} {1e3 * s['max']:>7.1f} {s['per_s']:>8.1f} "
                          f"{1e3 * s['search']:>9.1f} {s['search'] / s['p50']:>10.2f}")
        finally:
            server.terminate()
            server.wait(timeout=10)
    print("\none request in-process (median ms): where the time goes")
    print(f"{'case':<26} {'parse':>7} {'search':>7} {'render':>7} {'store':>7} {'json':>7} {'search share':>12}")
    for name, body in CASES.items():
        split = in_process_split(body)
        total = sum(split.values())
        print(f"{name:<26} " + " ".join(f"{1e3 * v:>7.1f}" for v in split.values())
              + f" {split['search'] / total:>12.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
