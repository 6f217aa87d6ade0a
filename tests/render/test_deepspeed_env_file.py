"""deepspeed.sh on several nodes: DeepSpeed's own runner (deepspeed/launcher/runner.py) passes on to the other
nodes, in the pdsh command it builds, every variable the script sets, not only NCCL*/PYTHON*/MV2*/UCX*/MLFLOW*.

DeepSpeed's runner runs for real; only pdsh and ssh are stand-ins on PATH (pdsh records the command it was given,
ssh answers the runner's reachability check), since no second node can be reached from a test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.planner import PlanRequest, plan
from app.render import render, write_artifacts

pytest.importorskip("deepspeed")

TWO_NODES = {
    "model": "llama-2-7b",
    "cluster": {"num_nodes": 2, "gpu": "A100-80GB", "hosts": ["n1", "n2"], "socket_ifname": "eth0", "nics": ["mlx5_0"]},
    "training": {"global_batch_size": 64, "framework": "deepspeed", "pinned": {"zero_stage": 3}},
}


def _stand_ins(bin_dir: Path, record: Path) -> None:
    bin_dir.mkdir()
    for name, body in (("pdsh", f'printf "%s\\n" "$@" > {record}\n'), ("ssh", "exit 0\n")):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}")
        (bin_dir / name).chmod(0o755)


def test_the_other_nodes_get_gloo_and_torch_variables_through_ds_env_file(tmp_path: Path) -> None:
    """QA, 2026-12-06: GLOO_SOCKET_IFNAME (nccl_env.sh) reached node 0 only. TORCH_ELASTIC_SHUTDOWN_TIMEOUT is not
    set at all: no torchrun reads it under DeepSpeed's launcher, which kills the ranks 30 s after SIGTERM
    (launch.py terminate_process_tree; QA 2026-12-07: the script promised the plan's whole stop margin)."""
    arts = render(plan(PlanRequest(**TWO_NODES)))
    assert "TORCH_ELASTIC_SHUTDOWN_TIMEOUT" not in arts.files["deepspeed.sh"]
    assert "TORCH_ELASTIC_SHUTDOWN_TIMEOUT=600" in arts.files["sbatch.sh"]
    assert any(
        n.startswith("deepspeed.sh: DeepSpeed's launcher kills the ranks 30 s after SIGTERM") for n in arts.notes
    )
    write_artifacts(arts, tmp_path / "plan")
    record = tmp_path / "pdsh.args"
    _stand_ins(tmp_path / "bin", record)
    env = {
        **os.environ,
        "PATH": f"{tmp_path / 'bin'}:{Path(sys.executable).parent}:{os.environ['PATH']}",
        "DS_ACCELERATOR": "cpu",
    }
    done = subprocess.run(
        ["bash", str(tmp_path / "plan" / "deepspeed.sh")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    remote = next(arg for arg in record.read_text().splitlines() if arg.startswith("export "))
    assert "export GLOO_SOCKET_IFNAME=eth0;" in remote, remote
    assert "TORCH_ELASTIC_SHUTDOWN_TIMEOUT" not in remote, remote
    listed = (tmp_path / "plan" / ".deepspeed_env").read_text().splitlines()
    assert listed == ["GLOO_SOCKET_IFNAME=eth0"]


def test_one_node_writes_no_env_file() -> None:
    one = {**TWO_NODES, "cluster": {"num_nodes": 1, "gpu": "A100-80GB", "socket_ifname": "eth0"}}
    script = render(plan(PlanRequest(**one))).files["deepspeed.sh"]
    assert "GLOO_SOCKET_IFNAME" not in script and "DS_ENV_FILE" not in script
