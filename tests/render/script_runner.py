"""Run rendered scripts for real under bash, with `python`, `srun` and `scontrol` replaced by recorders.

Each recorder writes its argv, working directory and environment to a file and exits 0; the tests then parse
the recorded argv with torch's and DeepSpeed's own argument parsers. Nothing is launched.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

RECORDER = """#!/usr/bin/env bash
out="$(mktemp "${CAPTURE_DIR}/call.XXXXXX")"
{ printf '%s\\0' "$(basename "$0")" "$PWD" "$#" "$@"; env -0; } > "$out"
"""
SCONTROL = """#!/usr/bin/env bash
# scontrol show hostnames <nodelist>: one host per line
for i in $(seq 0 $((SLURM_JOB_NUM_NODES - 1))); do echo "slurm-node-$i"; done
"""


@dataclass(frozen=True)
class Call:
    prog: str
    cwd: str
    argv: list[str]
    env: dict[str, str]


def make_fakebin(root: Path) -> Path:
    bin_dir = root / "fakebin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in ("python", "srun"):
        (bin_dir / name).write_text(RECORDER)
    (bin_dir / "scontrol").write_text(SCONTROL)
    for path in bin_dir.iterdir():
        path.chmod(0o755)
    return bin_dir


def _read(path: Path) -> Call:
    parts = path.read_bytes().decode().split("\0")
    prog, cwd, argc = parts[0], parts[1], int(parts[2])
    argv = parts[3 : 3 + argc]
    env = dict(item.split("=", 1) for item in parts[3 + argc :] if "=" in item)
    return Call(prog, cwd, argv, env)


def run(
    script: Path, fakebin: Path, args: tuple[str, ...] = (), env: dict[str, str] | None = None, cwd: Path | None = None
) -> list[Call]:
    """Run `bash script args` with the recorders first on PATH and a clean environment; the recorded calls."""
    capture = script.parent / f".capture-{script.name}"
    capture.mkdir(exist_ok=True)
    for old in capture.iterdir():
        old.unlink()
    base = {"PATH": f"{fakebin}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp"), "CAPTURE_DIR": str(capture)}
    proc = subprocess.run(
        ["bash", str(script), *args],
        env={**base, **(env or {})},
        cwd=cwd or script.parent,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, f"{script.name} failed ({proc.returncode}): {proc.stderr}"
    return [_read(p) for p in sorted(capture.iterdir(), key=lambda p: p.stat().st_mtime_ns)]


def sbatch_nodes(text: str) -> int:
    match = re.search(r"^#SBATCH --nodes=(\d+)$", text, re.M)
    assert match, "sbatch.sh has no #SBATCH --nodes line"
    assert len(re.findall(r"--nodes[= ]\d", text)) == 1, "the node count must be written once, in the header"
    assert 'NNODES="${SLURM_JOB_NUM_NODES}"' in text, "the script must read the node count from Slurm"
    return int(match.group(1))


NCCL_LIKE = re.compile(
    r"^(NCCL_|GLOO_|CUDA_DEVICE_MAX_CONNECTIONS$|DS_ACCELERATOR$|TORCH_ELASTIC_SHUTDOWN_TIMEOUT$|PYTORCH_CUDA_ALLOC_CONF$)"
)


def job_env(call: Call) -> dict[str, str]:
    """The variables the plan sets, as a process saw them."""
    return {k: v for k, v in call.env.items() if NCCL_LIKE.match(k)}
