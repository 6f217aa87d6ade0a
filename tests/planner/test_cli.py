"""The CLI reads JSON from a file or stdin and prints a table or JSON; bad input exits 2 without a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REQUEST = {
    "model": "llama-2-7b",
    "cluster": {"num_nodes": 1, "gpus_per_node": 8, "gpu": "A100-80GB"},
    "training": {"global_batch_size": 64},
}


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", *args], input=stdin, capture_output=True, text=True, timeout=120
    )


def test_plan_json_from_file(tmp_path: Path) -> None:
    path = tmp_path / "req.json"
    path.write_text(json.dumps(REQUEST))
    out = run("plan", str(path), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["plans"] and set(data["plans"][0]) >= {"parallel", "estimate", "why", "layout"}
    assert isinstance(data["rejected"], list)
    est = data["plans"][0]["estimate"]
    assert set(est["time"]) >= {"step_s", "tokens_per_s", "tflops_per_gpu", "mfu", "bubble_fraction", "breakdown"}
    assert est["memory"]["peak_bytes"] > 0 and est["memory"]["stages"]


def test_estimate_table_from_stdin() -> None:
    req = {**REQUEST, "parallel": {"tp": 2, "pp": 2, "dp": 2, "micro_batch_size": 1, "sequence_parallel": True}}
    out = run("estimate", stdin=json.dumps(req))
    assert out.returncode == 0, out.stderr
    assert "feasible: yes" in out.stdout and "tokens/s" in out.stdout and "stage" in out.stdout


def test_bad_input_names_the_field_without_traceback() -> None:
    bad = {**REQUEST, "cluster": {"num_nodes": -1, "gpu": "A100-80GB"}}
    out = run("plan", stdin=json.dumps(bad))
    assert out.returncode == 2
    assert "cluster.num_nodes" in out.stderr and "(got -1)" in out.stderr and "Traceback" not in out.stderr
    out = run("plan", stdin="{not json")
    assert out.returncode == 2 and "not valid JSON" in out.stderr and "Traceback" not in out.stderr


def test_infeasible_estimate_says_why() -> None:
    req = {**REQUEST, "parallel": {"tp": 3, "dp": 1}}
    out = run("estimate", "--json", stdin=json.dumps(req))
    data = json.loads(out.stdout)
    assert data["feasible"] is False
    assert any("num_attention_heads(32) % tp(3) != 0" in r for r in data["reasons"])
    # a layout that does not fit is a failure a script can test for, as a plan of nothing is (it exited 0, QA)
    assert out.returncode == 1, out.stderr
    fits = run("estimate", stdin=json.dumps({**REQUEST, "parallel": {"tp": 2, "dp": 4}}))
    assert fits.returncode == 0 and "feasible" in fits.stdout, fits.stdout


def test_render_into_a_path_it_cannot_write_names_out(tmp_path: Path) -> None:
    """A file where the directory should be, or a parent that does not exist: exit 2 naming --out and the reason
    (before, a FileExistsError / FileNotFoundError traceback after the plan was made)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for out_dir, reason in ((blocker, "it is a file, not a directory"), (blocker / "sub", "Not a directory")):
        done = run("render", "--out", str(out_dir), stdin=json.dumps(REQUEST))
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        assert f"error: --out: cannot write the files into {out_dir}: {reason}" in done.stderr, done.stderr
    assert blocker.read_text() == "x"


def test_a_request_that_is_not_utf8_names_the_file_and_the_byte(tmp_path: Path) -> None:
    path = tmp_path / "req.json"
    path.write_bytes(b'{"model": "llama-2-7b"\xff}')
    for verb in ("plan", "estimate", "render"):
        extra = ("--out", str(tmp_path / "out")) if verb == "render" else ()
        done = run(verb, str(path), *extra)
        assert done.returncode == 2, done.stderr
        assert f"error: cannot read request '{path}': not UTF-8 text (byte 0xff at offset 22)" in done.stderr
        assert "Traceback" not in done.stderr


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path: Path) -> None:
    """`trainplan plan --json ... | head -2`: the JSON is larger than a pipe holds, so the writer meets a closed pipe;
    it ended in a BrokenPipeError traceback."""
    path = tmp_path / "req.json"
    path.write_text(json.dumps(REQUEST))
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "plan", str(path), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(10).startswith(b"{")
    proc.stdout.close()  # what head does after its lines
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and "Traceback" not in err, err


def test_the_plan_table_keeps_its_columns_for_long_layouts() -> None:
    """Layouts longer than 58 characters pushed the GA ... bubble columns out of line (QA 2026-12-07)."""
    from app.cli import format_plan
    from app.planner import PlanRequest, plan

    pins = {"tp": 2, "megatron_fsdp": "optim_grads_params", "cpu_offloading_num_layers": 4, "tp_comm_overlap": True}
    result = plan(PlanRequest(model="llama-2-7b", cluster={"num_nodes": 2, "gpu": "H100-SXM"},
                              training={"global_batch_size": 64, "precision": "fp8", "pinned": pins}))  # fmt: skip
    lines = format_plan(result).splitlines()
    header = next(i for i, line in enumerate(lines) if line.lstrip().startswith("#  plan"))
    rows = lines[header : header + 1 + len(result.plans)]
    assert max(len(r) for r in rows) == min(len(r) for r in rows), rows  # every row as wide as the header
    assert any(len(line.split("mbs", 1)[0]) > 58 for line in rows[1:])
