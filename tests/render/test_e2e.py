"""End to end on CPU: the rendered plan.json trains the example GPT through `python -m launcher run`, and the
rendered torchrun.sh trains it when run as it is (accelerator cpu: the same files with gloo instead of NCCL)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from render_cases import fixed_result

from app.render import RenderOptions, render, write_artifacts

pytestmark = [pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
REQUEST = {
    "model": "tiny-gpt",
    "cluster": {"num_nodes": 1, "gpus_per_node": 2, "gpu": "A100-80GB"},
    "training": {"global_batch_size": 8, "framework": "deepspeed"},
}


def rendered(tmp_path: Path, **extra: str) -> Path:
    result = fixed_result(REQUEST, {"dp": 2, "zero_stage": 2, "micro_batch_size": 2})
    options = RenderOptions(workdir=str(ROOT), train_iters=3, log_interval=1, accelerator="cpu", **extra)
    out = tmp_path / "files"
    write_artifacts(render(result, 1, options), out)
    return out


def clean_env(**extra: str) -> dict[str, str]:
    keep = ("HOME", "LANG", "TMPDIR", "USER")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env["PATH"] = f"{Path(sys.executable).parent}:/usr/bin:/bin"
    return {**env, **extra}


def test_rendered_plan_json_trains_with_the_launcher(tmp_path: Path) -> None:
    files = rendered(tmp_path)
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "launcher", "run", str(files / "plan.json"), "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=files,
        env=clean_env(PYTHONPATH=str(ROOT)),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "step 3/3" in done.stdout and "job finished: exit code 0" in done.stdout + done.stderr
    assert (run_dir / "ds_config.json").read_text() == (files / "ds_config.json").read_text()


def test_rendered_torchrun_sh_trains_as_written(tmp_path: Path) -> None:
    """With a checkpoint directory the run ends saved, as Megatron-LM's does: the rendered interval (the
    checkpoint-interval optimum, thousands of steps) is past its 3 steps, and the trainer saved only at intervals and
    on a stop signal (QA, 2026-12-06: a finished run left no checkpoint)."""
    ckpt = tmp_path / "ckpt"
    files = rendered(tmp_path, checkpoint_dir=str(ckpt))
    assert "--save-interval 3 " not in (files / "torchrun.sh").read_text()
    done = subprocess.run(
        ["bash", str(files / "torchrun.sh")], capture_output=True, text=True, timeout=240, cwd=tmp_path, env=clean_env()
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "[train_gpt] step 3/3" in done.stdout + done.stderr
    assert (ckpt / "latest").read_text().strip() == "step3"
