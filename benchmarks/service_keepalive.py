"""The serving setup (issue 15): keep-alive latency by server layout, and what SQLite's synchronous setting costs.

    python benchmarks/service_keepalive.py               # 200 requests per row
    python benchmarks/service_keepalive.py -n 500 --skip-durability

Part 1 starts each layout on 127.0.0.1 (a free port, a throwaway SQLite file) and sends N sequential requests of
one kind over one keep-alive connection and N on a new connection each, alternating, and prints the medians and
the ratio of the two (within one run, so the machine's speed cancels out):

- `uvicorn --workers 2`: uvicorn's own multi-process mode (it binds a socket of protocol 0, on whose connections
  asyncio does not set TCP_NODELAY: Nagle's algorithm waits for the delayed ACK, ~40 ms per keep-alive request);
- `trainplan serve --workers 2`: the same supervisor on a TCP listener with TCP_NODELAY (app/cli/service.py);
- `trainplan serve`: one worker, the searches in the planner processes (the shipped default).

Requests: GET /healthz (no database work but the ping) and GET /plans/{id} (one stored plan read back).

Part 2 times PlanStore.add of one stored plan, synchronous=FULL against NORMAL on the same disk (WAL mode).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TINY = {
    "model": "tiny-gpt",
    "cluster": {"num_nodes": 1, "gpus_per_node": 2, "gpu": "H100-SXM"},
    "training": {"global_batch_size": 8},
}
LAYOUTS = {
    "uvicorn --workers 2": [
        "-m",
        "uvicorn",
        "app.main:app",
        "--host",
        "127.0.0.1",
        "--workers",
        "2",
        "--log-level",
        "warning",
        "--port",
    ],
    "trainplan serve --workers 2": ["-m", "app", "serve", "--workers", "2", "--port"],
    "trainplan serve (1 worker)": ["-m", "app", "serve", "--port"],
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def token(env: dict[str, str]) -> str:
    cli = [sys.executable, "-m", "app"]
    subprocess.run(
        [*cli, "users", "add", "bench", "--role", "user", "--password-stdin"],
        input="bench password 1\n",
        text=True,
        env=env,
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    made = subprocess.run(
        [*cli, "tokens", "create", "bench"], text=True, env=env, cwd=ROOT, check=True, capture_output=True
    )
    return made.stdout.strip()


def start(argv: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, *argv, str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"{base}/healthz", timeout=2).raise_for_status()
            return proc, base
        except httpx.HTTPError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{' '.join(argv)} did not start") from None
            time.sleep(0.1)


def medians_ms(base: str, path: str, n: int, headers: dict[str, str]) -> tuple[float, float]:
    """(keep-alive, new connection) medians, the two alternating request by request so that load drifts cancel."""
    kept, fresh = [], []
    with (
        httpx.Client(base_url=base, headers=headers, timeout=30) as keep,
        httpx.Client(
            base_url=base, headers=headers, timeout=30, limits=httpx.Limits(max_keepalive_connections=0)
        ) as new,
    ):
        for _ in range(10):
            keep.get(path).raise_for_status()
            new.get(path).raise_for_status()
        for _ in range(n):
            for client, times in ((keep, kept), (new, fresh)):
                t0 = time.perf_counter()
                client.get(path).raise_for_status()
                times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(kept), 1e3 * statistics.median(fresh)


def keepalive_table(n: int) -> None:
    print(f"{'layout':<30} {'request':<16} {'keep-alive ms':>13} {'new conn ms':>11} {'keep-alive/new':>14}")
    for name, argv in LAYOUTS.items():
        with tempfile.TemporaryDirectory() as tmp:
            env = {
                **os.environ,
                "DATABASE_URL": f"sqlite:///{tmp}/k.db",
                "PYTHONPATH": str(ROOT),
                "TRAINPLAN_RATE_LIMIT_PER_MINUTE": "0",
                "TRAINPLAN_PLAN_CACHE_SIZE": "0",
            }
            headers = {"Authorization": f"Bearer {token(env)}"}
            proc, base = start(argv, env)
            try:
                pid = httpx.post(f"{base}/plans", json=TINY, headers=headers, timeout=60).json()["id"]
                for path in ("/healthz", f"/plans/{pid}"):
                    kept, fresh = medians_ms(base, path, n, headers)
                    label = "GET /healthz" if path == "/healthz" else "GET /plans/{id}"
                    print(f"{name:<30} {label:<16} {kept:>13.2f} {fresh:>11.2f} {kept / fresh:>14.2f}")
            finally:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)


def durability_table(n: int) -> None:
    from app.planner import PlanRequest, plan
    from app.store import PlanStore

    result = plan(PlanRequest(**TINY))  # type: ignore[arg-type]
    json_text = result.model_dump_json()
    medians = {}
    where = ROOT / "var" if (ROOT / "var").is_dir() else Path(tempfile.gettempdir())
    with tempfile.TemporaryDirectory(dir=where) as tmp:
        for mode in ("FULL", "NORMAL"):
            store = PlanStore(f"sqlite:///{tmp}/{mode}.db", sqlite_synchronous=mode)
            store.init()
            times = []
            for _ in range(n):
                t0 = time.perf_counter()
                store.add(TINY, result, [], {"train.sh": "echo\n"}, result_json=json_text)
                times.append(time.perf_counter() - t0)
            store.close()
            medians[mode] = statistics.median(times)
    print(f"\nPlanStore.add, {n} plans each, WAL mode, files in {where}:")
    for mode, t in medians.items():
        print(f"  synchronous={mode:<6} median {1e3 * t:.2f} ms")
    print(f"  FULL / NORMAL = {medians['FULL'] / medians['NORMAL']:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=200, help="requests per row (default 200)")
    parser.add_argument("--skip-durability", action="store_true", help="only the keep-alive table")
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs, {args.n} sequential requests per row, medians")
    keepalive_table(args.n)
    if not args.skip_durability:
        durability_table(args.n)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
