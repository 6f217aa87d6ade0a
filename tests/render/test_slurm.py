"""Issue 12, defect 6: the sbatch script gives each node's torchrun all its CPUs and memory, stops the job
gracefully before its time limit (SIGTERM, Megatron's signal handler and exit duration) and requeues on
preemption where asked."""

from __future__ import annotations

import pytest
from megatron_check import Flags, args_file_words
from pydantic import ValidationError
from render_cases import fixed_result
from script_runner import make_fakebin, run

from app.planner.results import PlanResult
from app.render import RenderOptions, render
from app.render.options import time_limit_minutes

REQ = {
    "model": "llama-2-7b",
    "cluster": {"num_nodes": 2, "gpus_per_node": 8, "gpu": "H100-SXM"},
    "training": {"global_batch_size": 64, "framework": "megatron"},
}
PAR = {"tp": 2, "dp": 8, "distributed_optimizer": True}


def header(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("#SBATCH")]


def test_cpus_memory_and_binding(tmp_path) -> None:
    arts = render(fixed_result(REQ, PAR))
    lines = header(arts.files["sbatch.sh"])
    assert "#SBATCH --mem=0" in lines and "#SBATCH --exclusive" in lines
    (tmp_path / "sbatch.sh").write_text(arts.files["sbatch.sh"])
    (tmp_path / "nccl_env.sh").write_text(arts.files["nccl_env.sh"])
    env = {
        "SLURM_SUBMIT_DIR": str(tmp_path),
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_JOB_NODELIST": "n[0-1]",
        "SLURM_JOB_ID": "7",
        "SLURM_CPUS_ON_NODE": "224",
    }
    (srun,) = run(tmp_path / "sbatch.sh", make_fakebin(tmp_path), env=env)
    argv = srun.argv
    assert argv[argv.index("--cpus-per-task") + 1] == "224" and "--cpu-bind=none" in argv
    fixed = render(fixed_result(REQ, PAR), 1, RenderOptions(slurm_cpus_per_task=96)).files["sbatch.sh"]
    assert "#SBATCH --cpus-per-task=96" in header(fixed)
    assert "#SBATCH --gpus-per-node=8" in lines


def test_a_cpu_run_asks_slurm_for_no_gpus() -> None:
    """accelerator cpu ran CPU processes yet asked for 8 GPUs per node, which a CPU partition cannot grant (QA)."""
    req = {**REQ, "training": {"global_batch_size": 64, "framework": "deepspeed"}}
    arts = render(fixed_result(req, {"dp": 16, "zero_stage": 1}), 1, RenderOptions(accelerator="cpu"))
    assert not [line for line in header(arts.files["sbatch.sh"]) if "gpus" in line]


def test_graceful_stop_before_the_time_limit() -> None:
    result = fixed_result(REQ, PAR)
    arts = render(result, 1, RenderOptions(slurm_time_limit="2-00:00:00", checkpoint_dir="/ckpt"))
    grace = result.plans[0].decisions.graceful_stop_s
    assert f"#SBATCH --signal=TERM@{grace}" in header(arts.files["sbatch.sh"])
    fl = Flags(args_file_words(arts.files["megatron_args.txt"]))
    assert fl.has("--exit-signal-handler")
    assert fl.int("--exit-duration-in-mins") == int(2 * 1440 - (300 + grace) / 60)
    assert f"export TORCH_ELASTIC_SHUTDOWN_TIMEOUT={grace}" in arts.files["sbatch.sh"]
    no_limit = Flags(args_file_words(render(result).files["megatron_args.txt"]))
    assert no_limit.has("--exit-signal-handler") and not no_limit.has("--exit-duration-in-mins")


def test_requeue_only_where_asked_and_only_with_checkpoints() -> None:
    result = fixed_result(REQ, PAR)
    assert "#SBATCH --requeue" not in header(render(result).files["sbatch.sh"])
    asked = header(render(result, 1, RenderOptions(slurm_requeue=True, checkpoint_dir="/ckpt")).files["sbatch.sh"])
    assert "#SBATCH --requeue" in asked and "#SBATCH --open-mode=append" in asked
    with pytest.raises(ValidationError, match="slurm_requeue needs checkpoint_dir"):
        RenderOptions(slurm_requeue=True)


@pytest.mark.parametrize(
    ("limit", "minutes"),
    [("720", 720), ("30:00", 30), ("12:00:00", 720), ("2-00", 2880), ("1-02:30", 1590), ("1-00:00:30", 1440.5)],
)
def test_slurm_time_formats(limit: str, minutes: float) -> None:
    assert time_limit_minutes(limit) == minutes


def test_a_time_limit_too_short_to_save_is_refused() -> None:
    with pytest.raises(ValueError, match="slurm_time_limit: 10 leaves no training time"):
        render(fixed_result(REQ, PAR), 1, RenderOptions(slurm_time_limit="10"))


def test_megatron_deepspeed_stops_gracefully_only_where_it_can_save() -> None:
    """Megatron-DeepSpeed saves on SIGTERM and at --exit-duration-in-mins whatever --save says (megatron/training.py
    L1335-1361); without checkpoint_dir that save raised on every rank, and Slurm marked the job FAILED (QA
    2026-12-07). Those flags come with checkpoint_dir only; Megatron-LM, which checks args.save, keeps them."""
    req = {**REQ, "training": {"global_batch_size": 64, "framework": "megatron-deepspeed"}}
    result = fixed_result(req, {"tp": 2, "dp": 8, "zero_stage": 1})
    data = {"data_path": "/d/x_text_document", "tokenizer_type": "HuggingFaceTokenizer", "tokenizer_model": "m/l"}
    bare = render(result, 1, RenderOptions(**data, slurm_time_limit="4:00:00"))
    fl = Flags(args_file_words(bare.files["megatron_args.txt"]))
    assert not fl.has("--exit-signal-handler") and not fl.has("--exit-duration-in-mins") and not fl.has("--save")
    assert any("saves a checkpoint on SIGTERM" in n for n in bare.notes), bare.notes
    saved = render(result, 1, RenderOptions(**data, slurm_time_limit="4:00:00", checkpoint_dir="/ckpt"))
    fl = Flags(args_file_words(saved.files["megatron_args.txt"]))
    assert fl.has("--exit-signal-handler") and fl.has("--exit-duration-in-mins") and fl.one("--save") == "/ckpt"
    assert not any("saves a checkpoint on SIGTERM" in n for n in saved.notes)
    megatron = Flags(args_file_words(render(fixed_result(REQ, PAR)).files["megatron_args.txt"]))
    assert megatron.has("--exit-signal-handler")


def test_a_time_limit_past_what_slurm_holds_is_an_input_error() -> None:
    """Slurm parses --time into minutes in a C int: a 400-digit limit made float('inf') and a 500 (QA 2026-12-07)."""
    assert RenderOptions(slurm_time_limit=f"{2**31 - 1}").slurm_time_limit == "2147483647"
    for limit in ("9" * 400, "9" * 11, f"{2**31}", "1491309-00"):
        with pytest.raises(ValidationError, match="slurm_time_limit"):
            RenderOptions(slurm_time_limit=limit)


def with_stop_margin(result: PlanResult, seconds: int) -> PlanResult:
    """`result` with its plan's graceful-stop margin set to `seconds` (a plan whose steps take hours)."""
    plan = result.plans[0]
    decisions = plan.decisions.model_copy(update={"graceful_stop_s": seconds})
    return result.model_copy(update={"plans": [plan.model_copy(update={"decisions": decisions})]})


def test_a_stop_margin_past_what_sbatch_takes_signals_at_its_most() -> None:
    """sbatch refuses --signal above 65535 s (proc_args.c get_signal_opts); a plan whose two steps and save take
    longer (QA 2026-12-07: TERM@219763 from a ZeRO-3 NVMe plan) signals at 65535 s and keeps its whole margin in
    --exit-duration-in-mins, and the notes say so."""
    base = fixed_result(REQ, PAR)
    slow = with_stop_margin(base, 219763)
    arts = render(slow, 1, RenderOptions(slurm_time_limit="7-00:00:00"))
    assert "#SBATCH --signal=TERM@65535" in header(arts.files["sbatch.sh"])
    fl = Flags(args_file_words(arts.files["megatron_args.txt"]))
    assert fl.int("--exit-duration-in-mins") == int(7 * 1440 - (300 + 219763) / 60)
    assert any("--signal=TERM@65535" in n and "219763 s" in n and "keeps the whole margin" in n for n in arts.notes)
    bare = render(slow)
    assert any("give slurm_time_limit" in n for n in bare.notes)
    assert not any("--signal=TERM@" in n for n in render(base).notes)
    # the DeepSpeed frameworks' example trainer has no megatron_args.txt and so no --exit-duration-in-mins
    ds_req = {**REQ, "training": {"global_batch_size": 64, "framework": "deepspeed"}}
    ds_slow = with_stop_margin(fixed_result(ds_req, {"dp": 16, "zero_stage": 1}), 219763)
    notes = render(ds_slow, 1, RenderOptions(slurm_time_limit="7-00:00:00")).notes
    assert any("TERM@65535" in n and "nothing here stops it earlier" in n for n in notes), notes
