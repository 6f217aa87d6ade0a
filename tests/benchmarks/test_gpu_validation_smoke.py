"""benchmarks/gpu_validation.sh --cpu end to end (probe, planner, renderer, `launcher bench` per configuration in
its own process, results.jsonl, table, summary), and the failure paths of one run with a stand-in trainer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import gpu_validation as gv  # noqa: E402

from launcher.spec import Entrypoint, Job, Parallel, Plan, World, dump  # noqa: E402

pytestmark = [pytest.mark.slow]


def processes_mentioning(marker: str) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline and int(pid) != os.getpid():
            found.append(cmdline)
    return found


@pytest.mark.timeout(150)
def test_cpu_smoke_run_fills_every_column(tmp_path: Path) -> None:
    out, wheels = tmp_path / "out", tmp_path / "no-wheels"
    wheels.mkdir()
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(out), "TRAINPLAN_WHEELS": str(wheels)}
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_validation.sh"), "--cpu"],
        capture_output=True,
        text=True,
        timeout=140,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    chosen, labels = summary["suite"]["chosen"], [r["label"] for r in records]
    grid_and_pair = [
        "tiny-a-z1-mbs2-rcon",
        "tiny-a-z3-mbs4-rcoff",
        "tiny-b-z3-mbs2-rcon",
        "tiny-b-z3-mbs2-rcon-offload",
    ]
    assert labels[0] == chosen and chosen.startswith("tiny-a-")  # the planner's choice runs first
    assert [x for x in labels if x != chosen] == [x for x in grid_and_pair if x != chosen]
    assert labels[-1].endswith("-offload")
    for r in records:
        assert r["status"] == "ok", r
        assert r["predicted_allocated_bytes"] > 0 and r["predicted_tokens_per_s"] > 0
        assert r["measured_allocated_bytes"] > 0 and r["measured_tokens_per_s"] > 0 and r["measured_step_s"] > 0
        assert r["memory_kind"] == "cpu_max_rss" and r["measured_reserved_bytes"] is None
        assert r["measured_recompute"].startswith("full" if r["recompute"] == "full" else "none")
        assert Path(r["plan_json"]).is_file()
    offload = json.loads((Path(records[-1]["plan_json"]).parent / "ds_config.json").read_text())
    assert offload["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    profile = json.loads((out / "cluster_profile.json").read_text())
    assert profile["device"]["backend"] == "gloo"
    s = summary["summary"]
    assert s["memory"]["pass"] is None and s["tokens_per_s"]["n"] == len(records) and s["no_fit_oom"]["pass"] is True
    assert s["chosen"]["ratio"] is not None and 0 < s["chosen"]["ratio"] <= 1
    table = (out / "table.txt").read_text()
    assert table == done.stdout[done.stdout.index("date: ") :]  # printed as written
    head = next(line for line in table.splitlines() if line.startswith("config"))
    assert head.split() == [
        "config",
        "fits",
        "status",
        "alloc",
        "pred",
        "alloc",
        "meas",
        "err",
        "resv",
        "pred",
        "resv",
        "meas",
        "err",
        "tok/s",
        "pred",
        "tok/s",
        "meas",
        "err",
    ]
    assert sum(line.startswith("tiny-") for line in table.splitlines()) == len(records)
    for prefix in (
        "peak memory (allocated) within 10 %: n/a",
        "tokens/s within 15 %:",
        f"planner's choice {chosen}",
        "no plan predicted to fit ran out of memory: PASS",
        f"runs: {len(records)} ok",
    ):
        assert any(line.startswith(prefix) for line in table.splitlines()), prefix
    assert (out / "table.md").read_text().count("\n| tiny-") == len(records)
    assert not processes_mentioning(str(tmp_path))


def stand_in_plan(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "stand_in.py"
    script.write_text(body)
    plan = Plan(
        job=Job(name="stand-in", grace_period_s=3.0),
        world=World(gpus_per_node=1, accelerator="cpu"),
        parallel=Parallel(dp=1, global_batch_size=1),
        entrypoint=Entrypoint(script=str(script)),
    )
    dump(plan, tmp_path / "plan.json")
    return tmp_path / "plan.json"


@pytest.mark.timeout(120)
def test_an_out_of_memory_error_is_a_result(tmp_path: Path) -> None:
    plan = stand_in_plan(
        tmp_path,
        "import sys\nsys.stderr.write('torch.OutOfMemoryError: CUDA out of memory. "
        "Tried to allocate 2.00 GiB\\n')\nsys.exit(1)\n",
    )
    suite = gv.suite_for(gv.parse_args(["--cpu"]))
    rec = gv.bench(plan, tmp_path / "work", suite, timeout_s=60)
    assert rec["status"] == "oom" and "CUDA out of memory" in rec["detail"]


@pytest.mark.timeout(120)
def test_a_run_past_its_time_is_stopped_and_recorded(tmp_path: Path) -> None:
    plan = stand_in_plan(tmp_path, "import time\nprint('started', flush=True)\ntime.sleep(300)\n")
    suite = gv.suite_for(gv.parse_args(["--cpu"]))
    rec = gv.bench(plan, tmp_path / "work", suite, timeout_s=8)
    assert rec == {"status": "timeout", "detail": "no result within 8 s"}
    assert not processes_mentioning(str(tmp_path)), "the launcher and its worker are gone"
