"""Web fixtures: the app on a SQLite file, a hand-made plan whose charts never change with the cost model, and for
the browser tests uvicorn on a free port with Debian's headless Chromium (one of each per session)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.planner.results import Estimate, Layout, MemoryEstimate, Plan, StageMemory, TimeEstimate
from app.planner.specs import ParallelConfig
from tests.api.conftest import make_sqlite_client

GiB = 2**30
CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking"]
ROOT = Path(__file__).resolve().parents[2]
USER, PASSWORD = "alice", "correct horse battery staple"


@pytest.fixture
def web(tmp_path: Path) -> Iterator[Any]:
    with make_sqlite_client(f"sqlite:///{tmp_path / 'trainplan.db'}") as client:
        yield client


def stage(i: int, weights: float, grads: float, optim: float, acts: float, other: float) -> StageMemory:
    parts = [int(x * GiB) for x in (weights, grads, optim, acts, other)]
    return StageMemory(
        stage=i,
        layers=8,
        params=parts[0] // 2,
        weights_bytes=parts[0],
        gradients_bytes=parts[1],
        optimizer_bytes=parts[2],
        activations_bytes=parts[3],
        other_bytes=parts[4],
        total_bytes=sum(parts),
        microbatches_in_flight=4 - i,
    )


def synthetic_plan(pp: int = 4, vpp: int = 1, microbatches: int = 8, rank: int = 1, step_s: float = 2.0) -> Plan:
    """A PP plan with round numbers: stage 0 is the heaviest; 80 GiB GPUs with a 10% headroom."""
    stages = [stage(i, 4, 4, 12, 30 - 5 * i, 6) for i in range(pp)]
    peak = max(stages, key=lambda s: s.total_bytes)
    memory = MemoryEstimate(
        peak_bytes=peak.total_bytes,
        peak_stage=peak.stage,
        capacity_bytes=80 * GiB,
        usable_bytes=72 * GiB,
        headroom_fraction=1 - peak.total_bytes / (80 * GiB),
        stages=stages,
    )
    breakdown = {
        "compute_s": 0.7 * step_s,
        "recompute_s": 0.0,
        "tp_comm_s": 0.1 * step_s,
        "pp_comm_s": 0.05 * step_s,
        "bubble_s": 0.1 * step_s,
        "dp_comm_s": 0.03 * step_s,
        "optimizer_s": 0.02 * step_s,
    }
    time = TimeEstimate(
        step_s=step_s,
        tokens_per_s=1e5,
        tflops_per_gpu=400,
        mfu=0.4,
        hfu=0.4,
        bubble_fraction=0.1,
        flops_per_step=1e15,
        flops_definition="6 x N x tokens",
        breakdown=breakdown,
    )
    parallel = ParallelConfig(tp=2, pp=pp, vpp=vpp, dp=2, distributed_optimizer=True, micro_batch_size=1)
    layout = Layout(
        world_size=4 * pp,
        num_nodes=pp // 2 or 1,
        gpus_per_node=8,
        num_microbatches=microbatches,
        global_batch_size=2 * microbatches,
        stage_layers=[8] * pp,
    )
    return Plan(
        rank=rank,
        parallel=parallel,
        layout=layout,
        estimate=Estimate(feasible=True, reasons=[], memory=memory, time=time),
        why=["because"],
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """uvicorn app.main:app on 127.0.0.1 and a free port, on its own SQLite file."""
    port = _free_port()
    db = tmp_path_factory.mktemp("db") / "trainplan.db"
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{db}", "PYTHONPATH": str(ROOT)}
    made = subprocess.run(
        [sys.executable, "-m", "app", "users", "add", USER, "--role", "user", "--password-stdin"],
        input=PASSWORD + "\n",
        text=True,
        capture_output=True,
        cwd=ROOT,
        env=env,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
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
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{base}/healthz", timeout=2).raise_for_status()
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, "uvicorn did not start"
                time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield chromium
        chromium.close()


def login(page: object, server: str) -> None:
    """The form is behind the login: / redirects to /login, which comes back to / after the password."""
    page.goto(f"{server}/")  # type: ignore[attr-defined]
    assert "/login?next=" in page.url  # type: ignore[attr-defined]
    page.fill('input[name="name"]', USER)  # type: ignore[attr-defined]
    page.fill('input[name="password"]', PASSWORD)  # type: ignore[attr-defined]
    page.click('button[type="submit"]')  # type: ignore[attr-defined]
    page.wait_for_url(f"{server}/")  # type: ignore[attr-defined]
