"""POST /plans latency and throughput of the service, end to end over HTTP, the weight of its result pages, and
where the time goes.

    python benchmarks/service_latency.py                       # 3 sizes x concurrency 1 and 2, cache off
    python benchmarks/service_latency.py -n 200 --workers 2 --concurrency 8 --cache

Starts `uvicorn app.main:app` on 127.0.0.1 (a free port, a throwaway SQLite file, an API token made with
`trainplan users add` / `tokens create`), sends N POST /plans per model/cluster size with a concurrent httpx client,
and prints p50/p95 latency and plans per second against the target (issue 13: p95 <= 100 ms at concurrency 1 and
2). The result cache is off unless --cache (then identical requests after the first are cache hits: that measures
the service without the search). Then the result page (GET /p/{id}) of the largest preset and of a PP64 x VPP2
plan, raw and gzipped, against the 500 KB target. The last table splits one request's work in-process.
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
    "llama-2-7b / 16 x H100": {
        "model": "llama-2-7b",
        "cluster": {"num_nodes": 2, "gpu": "H100-SXM"},
        "training": {"global_batch_size": 64},
    },
    "llama-2-13b / 64 x A100": {
        "model": "llama-2-13b",
        "cluster": {"num_nodes": 8, "gpu": "A100-80GB"},
        "training": {"global_batch_size": 256},
    },
    "llama-2-70b / 256 x H100": {
        "model": "llama-2-70b",
        "cluster": {"num_nodes": 32, "gpu": "H100-SXM"},
        "training": {"global_batch_size": 512},
    },
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


P95_TARGET_S = 0.100
PAGE_TARGET_BYTES = 500_000
PAGES: dict[str, dict[str, Any]] = {
    "kimi-k2-like / 2,048 x H100": {  # the largest preset
        "model": "kimi-k2-like",
        "cluster": {"num_nodes": 256, "gpu": "H100-SXM"},
        "training": {"global_batch_size": 4096, "search_time_limit_s": 10},
    },
    "megatron-1t PP64 x VPP2": {
        "model": "megatron-1t",
        "cluster": {"num_nodes": 512, "gpu": "H100-SXM"},
        "training": {"global_batch_size": 2048, "pinned": {"pp": 64, "vpp": 2}, "search_time_limit_s": 10},
    },
}


def api_token(db: Path) -> str:
    """A user and an API token on the benchmark's database, through the CLI an admin would use."""
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{db}", "PYTHONPATH": str(ROOT)}
    cli = [sys.executable, "-m", "app"]
    subprocess.run(
        [*cli, "users", "add", "bench", "--role", "user", "--password-stdin"],
        input=b"bench-password-1\n",
        env=env,
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    made = subprocess.run(
        [*cli, "tokens", "create", "bench"], env=env, cwd=ROOT, check=True, capture_output=True, text=True
    )
    return next(word for word in made.stdout.split() if word.startswith("tp_"))


def page_weights(base: str, token: str) -> list[tuple[str, int, int, float]]:
    """(case, raw bytes, gzipped bytes, seconds to serve) of each result page."""
    out = []
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=base, timeout=120, headers=headers) as c:
        for name, body in PAGES.items():
            r = c.post("/plans", json=body)
            r.raise_for_status()
            page_id = r.json()["id"]
            raw = c.get(f"/p/{page_id}", headers={"Accept-Encoding": "identity"})
            t0 = time.perf_counter()
            packed = c.get(f"/p/{page_id}", headers={"Accept-Encoding": "gzip"})
            served = time.perf_counter() - t0
            raw.raise_for_status()
            packed.raise_for_status()
            wire = int(packed.headers.get("content-length", len(packed.content)))
            out.append((name, len(raw.content), wire, served))
    return out


def start_server(port: int, workers: int, cache: bool, db: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{db}",
        "TRAINPLAN_PLAN_CACHE_SIZE": "128" if cache else "0",
        "TRAINPLAN_RATE_LIMIT_PER_MINUTE": "0",  # the benchmark is one client sending hundreds a minute
        "PYTHONPATH": str(ROOT),
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "app.main:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            str(workers),
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).raise_for_status()
            return proc
        except httpx.TransportError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the server did not start") from None
            time.sleep(0.1)


async def run_case(base: str, token: str, body: dict[str, Any], n: int, concurrency: int) -> dict[str, float]:
    latencies: list[float] = []
    search_s: list[float] = []
    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency)
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=base, timeout=120, limits=limits, headers=headers) as c:
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
    return {
        "min": min(latencies),
        "p50": q[49],
        "p95": q[94],
        "max": max(latencies),
        "per_s": n / wall,
        "search": statistics.median(search_s),
    }


def in_process_split(body: dict[str, Any], repeat: int = 20) -> dict[str, float]:
    """Median seconds of each step of one POST /plans, called directly (no HTTP, no threads)."""
    from app.api.plans import stored_plan
    from app.planner import plan
    from app.service.artifacts import render_files
    from app.service.requests import parse_plan_request
    from app.store import PlanStore

    with tempfile.TemporaryDirectory() as tmp:
        store = PlanStore(f"sqlite:///{tmp}/split.db")
        store.init()
        steps: dict[str, list[float]] = {"parse": [], "search": [], "render": [], "store": [], "json": []}
        for _ in range(repeat):
            t0 = time.perf_counter()
            parsed = parse_plan_request(body)
            request, options = parsed.request, parsed.options
            t1 = time.perf_counter()
            result = plan(request)
            t2 = time.perf_counter()
            files = render_files(result, 1, options).files
            t3 = time.perf_counter()
            record, _replayed = store.add(body, result, [], files)
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
    parser.add_argument("--concurrency", default="1,2", help="comma-separated client concurrencies (default 1,2)")
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes (default 1)")
    parser.add_argument("--cache", action="store_true", help="keep the service's result cache on")
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    port = free_port()
    misses: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        server = start_server(port, args.workers, args.cache, db)
        base = f"http://127.0.0.1:{port}"
        try:
            token = api_token(db)
            print(
                f"uvicorn app.main:app, {args.workers} worker(s), cache {'on' if args.cache else 'off'}, "
                f"{os.cpu_count()} CPUs, {args.n} POST /plans per row; target p95 <= {1e3 * P95_TARGET_S:.0f} ms"
            )
            print(
                f"{'case':<26} {'conc':>4} {'min ms':>7} {'p50 ms':>7} {'p95 ms':>7} {'max ms':>7} {'plans/s':>8} "
                f"{'search ms':>9} {'search/p50':>10} {'p95/target':>10}"
            )
            for name, body in CASES.items():
                for conc in levels:
                    s = asyncio.run(run_case(base, token, body, args.n, conc))
                    ratio = s["p95"] / P95_TARGET_S
                    if ratio > 1:
                        misses.append(f"POST /plans {name} at concurrency {conc}: p95 {1e3 * s['p95']:.0f} ms")
                    print(
                        f"{name:<26} {conc:>4} {1e3 * s['min']:>7.1f} {1e3 * s['p50']:>7.1f} "
                        f"{1e3 * s['p95']:>7.1f} {1e3 * s['max']:>7.1f} {s['per_s']:>8.1f} "
                        f"{1e3 * s['search']:>9.1f} {s['search'] / s['p50']:>10.2f} {ratio:>10.2f}"
                    )
            print(f"\nresult pages (GET /p/{{id}}); target <= {PAGE_TARGET_BYTES // 1000} KB compressed")
            print(f"{'case':<30} {'raw KB':>8} {'gzip KB':>8} {'ratio':>6} {'serve ms':>9} {'gzip/target':>11}")
            for name, raw, packed, served in page_weights(base, token):
                if packed > PAGE_TARGET_BYTES:
                    misses.append(f"page {name}: {packed / 1000:.0f} KB compressed")
                print(
                    f"{name:<30} {raw / 1000:>8.1f} {packed / 1000:>8.1f} {raw / packed:>6.1f} {1e3 * served:>9.1f} "
                    f"{packed / PAGE_TARGET_BYTES:>11.2f}"
                )
        finally:
            server.terminate()
            server.wait(timeout=10)
    print("\ntargets: " + ("all met" if not misses else "missed: " + "; ".join(misses)))
    print("\none request in-process (median ms): where the time goes")
    print(f"{'case':<26} {'parse':>7} {'search':>7} {'render':>7} {'store':>7} {'json':>7} {'search share':>12}")
    for name, body in CASES.items():
        split = in_process_split(body)
        total = sum(split.values())
        print(
            f"{name:<26} " + " ".join(f"{1e3 * v:>7.1f}" for v in split.values()) + f" {split['search'] / total:>12.0%}"
        )
    return 1 if misses else 0


if __name__ == "__main__":
    raise SystemExit(main())
