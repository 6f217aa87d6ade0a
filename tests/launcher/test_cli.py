"""The CLI verbs: dry-run prints everything and changes nothing; bad plans are refused before anything starts."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shlex
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import (
    ROOT,
    foreign_addresses,
    free_port,
    launcher_env,
    processes_mentioning,
    run_launcher,
    wait_for,
    write_plan,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from make_plan import tiny_plan

from launcher import rundir, spec
from launcher.cli import parser, quick_run_args
from launcher.context import LaunchContext
from launcher.spec import Entrypoint, Parallel, World


def test_help_lists_the_verbs() -> None:
    done = run_launcher("--help")
    assert done.returncode == 0
    for verb in ("run", "dry-run", "preflight", "show", "probe", "bench"):
        assert verb in done.stdout


def test_dry_run_prints_every_command_and_its_environment_and_creates_nothing(tmp_path: Path) -> None:
    a, b = foreign_addresses(2)
    plan = tiny_plan(nodes=2, procs=2, hosts=(a, b), master_addr=a, env={"NCCL_SOCKET_IFNAME": "eth0"})
    path = write_plan(tmp_path, plan)
    run_dir = tmp_path / "run"
    done = run_launcher("dry-run", str(path), "--run-dir", str(run_dir), "--", "--lr", "0.5")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"# node 0 on {a} (over ssh)" in out and f"# node 1 on {b} (over ssh)" in out
    assert out.count("#   NCCL_SOCKET_IFNAME=eth0") == 2 and "#   DS_ACCELERATOR=cpu" in out
    commands = [line for line in out.splitlines() if "torch.distributed.run" in line and line.startswith("/")]
    assert len(commands) == 2
    argv = shlex.split(commands[1])
    assert argv[-2:] == ["--lr", "0.5"] and f"{run_dir}/ds_config.json" in argv
    ssh = [shlex.split(line) for line in out.splitlines() if line.startswith("ssh ")]
    assert len(ssh) == 2 and [argv[-2] for argv in ssh] == [a, b] and ssh[0][1] == "-tt"
    assert "env -i" in ssh[1][-1] and "NCCL_SOCKET_IFNAME=eth0" in ssh[1][-1]
    assert not run_dir.exists()
    # nothing runs the per-node checks on nodes started over ssh: they are said to be unchecked, not "ok" (QA)
    rows = {line.split()[0]: line for line in out.splitlines() if line.split()[:1] in (["accelerators"], ["port"])}
    for name in ("accelerators", "port"):
        assert f"not checked: started over ssh on {a}" in rows[name] and " warn " in rows[name], rows[name]


def test_show_summarises(tmp_path: Path) -> None:
    done = run_launcher("show", str(write_plan(tmp_path, tiny_plan(procs=2))))
    assert done.returncode == 0
    assert "1 node(s) x 2 cpu process(es) = 2" in done.stdout and "ZeRO 1" in done.stdout
    assert "tiny-gpt: 2 layers, h 64" in done.stdout


def test_show_says_what_the_strategy_sets(tmp_path: Path) -> None:
    """The optional strategy section (what megatron_args.txt sets) and the model's head size, in words."""
    from launcher.sections import Model
    from launcher.strategy import Strategy

    model = Model(num_layers=4, hidden_size=1000, num_attention_heads=16, vocab_size=100, seq_length=64, kv_channels=64)
    strategy = Strategy(schedule="1f1b", account_for_embedding_in_pipeline_split=True, sequence_parallel=True,
                        distributed_optimizer=True, recompute="selective", recompute_modules=("mlp",),
                        cp_comm_type="a2a", precision="fp8", fp8_recipe="mxfp8", fp8_param_gather=True)  # fmt: skip
    base = tiny_plan(procs=2)
    cp2 = replace(base.parallel, cp=2, dp=1, gradient_accumulation_steps=None)
    plan = replace(base, model=model, strategy=strategy, parallel=cp2)
    done = run_launcher("show", str(write_plan(tmp_path, plan)))
    assert done.returncode == 0, done.stderr
    assert "16 heads of 64" in done.stdout
    row = next(line for line in done.stdout.splitlines() if line.startswith("strategy"))
    for words in ("1f1b (embedding as a stage unit)", "SP", "distributed optimizer", "recompute selective (mlp)",
                  "CP a2a", "fp8 (mxfp8, FP8 weights)", "grads reduced in fp32"):  # fmt: skip
        assert words in row, row
    assert "TP overlap" not in row and "offload" not in row
    # without context parallelism the CP communication type is not the plan's (it read "CP a2a", QA 2026-12-08)
    done = run_launcher("show", str(write_plan(tmp_path, replace(plan, parallel=base.parallel))))
    row = next(line for line in done.stdout.splitlines() if line.startswith("strategy"))
    assert done.returncode == 0 and "CP " not in row and "distributed optimizer" in row, row


def test_show_rounds_the_prediction_and_says_what_is_unset(tmp_path: Path) -> None:
    """QA, 2026-12-06: "77337.0565943719 tokens/s, step 27.117039261003082 s", "OMP threads None", "checkpoint every -
    steps" and a rule of 1,500 dashes under the summary column."""
    from launcher.sections import Prediction

    prediction = Prediction(tokens_per_s=77337.0565943719, step_s=27.117039261003082, checkpoint_save_s=12.3456)
    plan = replace(tiny_plan(procs=2), prediction=prediction)
    out = run_launcher("show", str(write_plan(tmp_path, plan))).stdout
    assert "77,337 tokens/s, step 27.1 s" in out and "save 12.3 s" in out
    assert "OMP threads None" not in out and "every - steps" not in out and "interval not set" in out
    assert max(len(line) for line in out.splitlines() if set(line) <= {"-", " "}) <= 2 * 100 + 2
    # a 57 MiB checkpoint read "0.1 GiB"; with no prediction of the save, the watchdog's default 1,800 s "1.8e+03 s"
    sized = replace(plan, prediction=replace(prediction, checkpoint_bytes=59_831_296, checkpoint_interval_steps=5))
    out = run_launcher("show", str(write_plan(tmp_path, sized))).stdout
    assert "every 5 steps, 0.056 GiB, save 12.3 s" in out, out
    unsaved = replace(plan, prediction=Prediction(step_s=27.1))
    out = run_launcher("show", str(write_plan(tmp_path, unsaved))).stdout
    assert "checkpoint save 1,800 s" in out and "e+0" not in out, out


def test_a_reader_that_stops_early_ends_the_verb_quietly(tmp_path: Path) -> None:
    """`dry-run plan.json | head -1` printed a BrokenPipeError traceback (QA, 2026-12-06); it ends as cat does."""
    import subprocess
    import sys

    from conftest import ROOT, launcher_env

    path = write_plan(tmp_path, tiny_plan(procs=2))
    reader = subprocess.Popen(["head", "-c", "1"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    assert reader.stdin is not None
    done = subprocess.run(
        [sys.executable, "-m", "launcher", "dry-run", str(path)],
        stdout=reader.stdin,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**launcher_env(), "PYTHONUNBUFFERED": "1"},
        timeout=120,
    )
    reader.stdin.close()
    reader.wait(timeout=30)
    assert "Traceback" not in done.stderr and done.returncode in (0, 141), done.stderr


def test_make_plan_into_a_missing_folder_says_so(tmp_path: Path) -> None:
    import subprocess
    import sys

    from conftest import ROOT

    target = tmp_path / "missing" / "plan.json"
    done = subprocess.run(
        [sys.executable, "examples/make_plan.py", str(target)], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr and "No such file or directory" in done.stderr


def refused(tmp_path: Path, text: str, *extra: str) -> str:
    path = tmp_path / "plan.json"
    path.write_text(text)
    run_dir = tmp_path / "run"
    done = run_launcher("run", str(path), "--run-dir", str(run_dir), *extra)
    assert done.returncode == 2, done.stdout + done.stderr
    assert not run_dir.exists()  # refused before anything starts
    return done.stderr


def test_malformed_plan_is_refused(tmp_path: Path) -> None:
    assert "not valid JSON" in refused(tmp_path, '{"kind": "trainplan.plan", ')


def test_unknown_schema_version_is_refused(tmp_path: Path) -> None:
    doc = tiny_plan().to_dict()
    doc["schema_version"] = 7
    assert "schema_version 7 is not supported by this launcher" in refused(tmp_path, json.dumps(doc))


def test_inconsistent_numbers_are_refused(tmp_path: Path) -> None:
    doc = tiny_plan().to_dict()
    doc["parallel"].update(dp=4, global_batch_size=8)
    err = refused(tmp_path, json.dumps(doc))
    assert "plan refused: world.num_nodes(1) * world.gpus_per_node(2) = 2 != parallel world size" in err


def test_plan_inconsistent_with_the_machine_is_refused(tmp_path: Path) -> None:
    plan = tiny_plan()
    plan = replace(
        plan, world=World(gpus_per_node=1024, accelerator="cuda"), parallel=Parallel(dp=1024, global_batch_size=1024)
    )
    err = refused(tmp_path, json.dumps(plan.to_dict()))
    assert "refusing to start" in err and "world.gpus_per_node(1024) but this node exposes" in err


def test_dry_run_of_a_plan_that_run_would_refuse_exits_2_after_printing_it(tmp_path: Path) -> None:
    """A script gates a launch on `dry-run` (QA, 2026-12-06: it printed a failed check and exited 0). It still
    prints every command and the checks, then exits 2 naming the failed one, as `run` refuses; nothing is created."""
    plan = replace(
        tiny_plan(),
        world=World(gpus_per_node=1024, accelerator="cuda"),
        parallel=Parallel(dp=1024, global_batch_size=1024),
    )
    run_dir = tmp_path / "run"
    done = run_launcher("dry-run", str(write_plan(tmp_path, plan)), "--run-dir", str(run_dir))
    assert done.returncode == 2, done.stderr
    assert "torch.distributed.run" in done.stdout and " fail " in done.stdout
    assert done.stderr.startswith("launcher: run would refuse to start") and "failed accelerators" in done.stderr
    assert not run_dir.exists()


def test_dry_run_fails_what_run_refuses_a_directory_as_interpreter_and_a_file_as_run_dir(tmp_path: Path) -> None:
    """A directory passed os.access(X_OK) as entrypoint.python, and dry-run said 0 where run refused a run directory
    that is a file (exit 2): run then failed 127 after a restart, or refused (QA, 2026-12-06)."""
    in_the_way = tmp_path / "afile"
    in_the_way.write_text("hi\n")
    done = run_launcher("dry-run", str(write_plan(tmp_path, tiny_plan())), "--run-dir", str(in_the_way))
    assert done.returncode == 2 and "run dir" in done.stderr.rsplit("failed", 1)[1], done.stderr
    plan = replace(tiny_plan(), entrypoint=replace(tiny_plan().entrypoint, python=str(tmp_path)))
    done = run_launcher("dry-run", str(write_plan(tmp_path, plan)), "--run-dir", str(tmp_path / "run"))
    assert done.returncode == 2 and "failed entrypoint" in done.stderr, done.stderr
    assert f"python interpreter {tmp_path} is not an executable" in done.stdout


def test_a_per_node_launcher_fills_node_rank_in_the_working_dir(tmp_path: Path) -> None:
    """docs/plan-json.md: placeholders are substituted in entrypoint.working_dir. With --node-rank 0 one command
    starts one node, yet {node_rank} there was refused as unknown, while args and env got it (QA, 2026-12-06)."""
    (tmp_path / "node0").mkdir()
    plan = tiny_plan()
    script = str(Path(plan.entrypoint.script).resolve())
    plan = replace(
        plan, entrypoint=replace(plan.entrypoint, script=script, working_dir=str(tmp_path / "node{node_rank}"))
    )
    path = write_plan(tmp_path, plan)
    done = run_launcher("dry-run", str(path), "--run-dir", str(tmp_path / "run"), "--node-rank", "0")
    assert done.returncode == 0, done.stderr
    assert f"cd {tmp_path / 'node0'}" in done.stdout or str(tmp_path / "node0") in done.stdout
    whole = run_launcher("dry-run", str(path), "--run-dir", str(tmp_path / "run"))  # every node: still unknown
    assert whole.returncode == 2 and "{node_rank} is not known" in whole.stderr


def test_missing_entrypoint_and_bad_node_rank_are_refused(tmp_path: Path) -> None:
    plan = replace(tiny_plan(), entrypoint=Entrypoint(script="no_such_train.py"))
    err = refused(tmp_path, json.dumps(plan.to_dict()))
    assert "entrypoint.script" in err and "no_such_train.py does not exist" in err
    assert "--node-rank 5 is out of range for world.num_nodes(1)" in refused(
        tmp_path, json.dumps(tiny_plan().to_dict()), "--node-rank", "5"
    )


def test_busy_rendezvous_port_is_refused(tmp_path: Path) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        plan = tiny_plan(backend="deepspeed", master_port=port)
        err = refused(tmp_path, json.dumps(plan.to_dict()))
    assert f"world.master_port {port} is in use" in err


def test_extra_arguments_only_for_verbs_that_run_the_script(tmp_path: Path) -> None:
    done = run_launcher("show", str(write_plan(tmp_path, tiny_plan())), "--", "--lr", "1")
    assert done.returncode == 2 and "only for run, dry-run and bench" in done.stderr


WORDS = (
    "run",
    "plan.json",
    "p",
    "",
    "-",
    "--node-rank",
    "--run-dir",
    "--backend",
    "--run",
    "--run-dir=d",
    "--node_rank",
)
WORDS += ("0", "7", "+1", "-1", "٣", "²", "torchrun", "slurm", "bogus", "-h", "--help", "dry-run", "--steps")


def argparse_reads(argv: list[str]) -> argparse.Namespace | None:
    """What argparse makes of `argv`; None where it stops with an error or help."""
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            return parser().parse_args(argv)
    except SystemExit:
        return None


@given(st.lists(st.sampled_from(WORDS), max_size=7))
@settings(max_examples=400, deadline=None)
def test_the_quick_reading_of_run_agrees_with_argparse(words: list[str]) -> None:
    """quick_run_args reads `run`'s command line without argparse, or leaves it to argparse; never differently."""
    for argv in (words, ["run", *words]):
        quick = quick_run_args(argv)
        if quick is not None:
            read = argparse_reads(argv)
            assert read is not None and vars(quick) == vars(read), argv  # the same attributes and values


def test_the_usual_run_command_lines_are_read_quickly() -> None:
    for argv in (
        ["run", "plan.json"],
        ["run", "plan.json", "--run-dir", "runs/a", "--node-rank", "1", "--backend", "deepspeed"],
        ["run", "--run-dir", "", "plan.json"],
    ):
        quick, read = quick_run_args(argv), argparse_reads(argv)
        assert quick is not None and read is not None and vars(quick) == vars(read), argv
    for argv in (["run", "plan.json", "--run-dir=r"], ["run", "p", "--run-dir", "a", "--run-dir", "b"], ["run", "-h"]):
        assert quick_run_args(argv) is None  # argparse's to read: it agrees, or says what is wrong


def test_a_number_int_cannot_read_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    """QA 2026-12-07: "²" is a digit (str.isdigit) that int() refuses. `run plan --node-rank ²` died of a ValueError in
    the quick reading of the command line, and `--log-interval ²` among the plan's arguments crashed `show`, and `run`
    after it had made the run directory. argparse now says what is wrong (exit 2); the plan's argument is no number
    the launcher can use (the trainer's own argparse refuses it), as "abc" is not."""
    path = write_plan(tmp_path, tiny_plan(extra_args=("--log-interval", "²", "--train-iters", "²")))
    assert quick_run_args(["run", str(path), "--node-rank", "²"]) is None
    done = run_launcher("run", str(path), "--node-rank", "²", "--run-dir", str(tmp_path / "never"))
    assert done.returncode == 2 and "argument --node-rank: invalid int value: '²'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "never").exists()
    shown = run_launcher("show", str(path))
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
    assert "watchdog" in shown.stdout


def test_a_run_directory_in_use_by_another_launcher_is_refused(tmp_path: Path) -> None:
    """Two launchers of one node on one run directory: the second resumed from the first one's checkpoints while it
    trained and both wrote the same files (QA, 2026-12-06). The first holds a lock the kernel drops at its exit."""
    import fcntl
    import os

    path = write_plan(tmp_path, tiny_plan(steps=2))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with open(run_dir / ".launcher.lock", "a+") as held:  # what a running launcher holds (pid in the file)
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write(f"{os.getpid()}\n")
        held.flush()
        done = run_launcher("run", str(path), "--run-dir", str(run_dir))
    assert done.returncode == 2
    assert f"the run directory {run_dir} is in use by another launcher (pid {os.getpid()})" in done.stderr
    assert not (run_dir / "plan.json").exists() and not (run_dir / "launcher.log").exists()  # nothing touched
    again = run_launcher("run", str(path), "--run-dir", str(run_dir))  # the lock was dropped: it runs
    assert again.returncode == 0, again.stderr[-2000:]
    assert (run_dir / ".launcher.lock").read_text().strip().isdigit()


@pytest.mark.parametrize(("holder", "second"), [([], ["--node-rank", "0"]), (["--node-rank", "0"], [])])
def test_a_launcher_of_every_node_and_one_of_node_0_share_no_directory(
    tmp_path: Path, holder: list[str], second: list[str]
) -> None:
    """One launcher without --node-rank and one with --node-rank 0 took two lock files and both ran node 0 in one
    directory (QA, 2026-12-06): the every-node launcher holds the directory's lock, per-node ones share it."""
    path = write_plan(tmp_path, tiny_plan(steps=2))
    run_dir = tmp_path / "run"
    ctx = LaunchContext(spec.load(path), path.parent, run_dir, "torchrun", node_rank=int(holder[1]) if holder else None)
    with rundir.lock(ctx):
        done = run_launcher("run", str(path), "--run-dir", str(run_dir), *second)
    assert done.returncode == 2 and "is in use by" in done.stderr, done.stderr[-2000:]
    assert not (run_dir / "launcher.log").exists() and not (run_dir / "launcher.node0.log").exists()


def test_a_refused_per_node_launcher_releases_the_lock_it_took(tmp_path: Path) -> None:
    """A per-node launcher takes the directory's shared lock, then its node's: refused there (another launcher runs
    that node), it must drop the shared one too, or a later launcher of every node would be refused for nothing."""
    path = write_plan(tmp_path, tiny_plan(steps=2))
    run_dir = tmp_path / "run"
    node0 = LaunchContext(spec.load(path), path.parent, run_dir, "torchrun", node_rank=0)
    every = LaunchContext(spec.load(path), path.parent, run_dir, "torchrun")
    with rundir.lock(node0), pytest.raises(rundir.RunDirError, match="in use by another launcher of node 0"):
        rundir.lock(node0)
    with rundir.lock(every):  # nothing left held: the every-node launcher gets the directory
        assert (run_dir / ".launcher.lock").read_text().strip().isdigit()


def test_an_empty_run_dir_is_refused(tmp_path: Path) -> None:
    """`--run-dir "$RUN_DIR"` with the variable unset ran the whole job in a new ./runs/<name>-<time> (QA,
    2026-12-07): an empty value is refused, and nothing is made."""
    path = write_plan(tmp_path, tiny_plan(steps=2))
    done = run_launcher("run", str(path), "--run-dir", "", cwd=tmp_path)
    assert done.returncode == 2
    assert "--run-dir is empty: give the run directory, or leave the option out" in done.stderr
    assert not (tmp_path / "runs").exists()


def test_the_resume_hint_names_a_run_directory_the_same_command_would_not_find(tmp_path: Path) -> None:
    """Without --run-dir or job.run_dir each run gets a new timestamped directory, so "run the same command to go on
    from its last checkpoint" started again at step 0 (QA, 2026-12-07); inside a Slurm job the directory is named
    after the job id, which a requeued job keeps, so it resumes."""
    from launcher.context import make_context

    plan = tiny_plan(steps=2)
    path = write_plan(tmp_path, plan)
    own = make_context(plan, path, caller_env={})
    assert not own.run_dir_named and own.run_dir.parent.name == "runs"
    assert own.resume_hint == (
        f"run the same command with --run-dir {own.run_dir} to go on from its last checkpoint (without it, a new "
        f"run directory starts from step 0)"
    )
    named = make_context(plan, path, run_dir=str(tmp_path / "r"), caller_env={})
    assert named.resume_hint == "run the same command to go on from its last checkpoint"
    slurm = [make_context(plan, path, caller_env={"SLURM_JOB_ID": "4242"}) for _ in range(2)]
    assert slurm[0].run_dir == slurm[1].run_dir and slurm[0].run_dir.name.endswith("-slurm4242")
    # found again by a requeue of the job (the hint told a preempted job to add --run-dir), not by a new sbatch,
    # whose new job id names another directory (QA 2026-12-07, both)
    assert slurm[0].resume_hint == (
        f"a requeue of Slurm job 4242 goes on from its last checkpoint with the same command; a new sbatch needs "
        f"--run-dir {slurm[0].run_dir} (without it, a new run directory starts from step 0)"
    )
    named_in_slurm = make_context(plan, path, run_dir=str(tmp_path / "r"), caller_env={"SLURM_JOB_ID": "4242"})
    assert named_in_slurm.resume_hint == "run the same command to go on from its last checkpoint"


@pytest.mark.parametrize(
    "verb", [["dry-run"], ["run"], ["preflight"], ["run", "--run-dir", "rel"], ["dry-run", "--run-dir", "rel"]]
)
def test_a_deleted_working_directory_is_refused_with_exit_2(tmp_path: Path, verb: list[str]) -> None:
    """Started from a directory deleted under it (`mkdir d; cd d; rmdir ../d`), the launcher printed os.getcwd()'s
    FileNotFoundError traceback and exited 1 (QA 2026-12-07): the default ./runs and a relative --run-dir need it."""
    import subprocess
    import sys

    from conftest import ROOT, launcher_env

    path = write_plan(tmp_path, tiny_plan(steps=2))
    gone = 'mkdir gone && cd gone && rmdir ../gone && exec "$@"'
    argv = ["sh", "-c", gone, "sh", sys.executable, "-m", "launcher", verb[0], str(path), *verb[1:]]
    env = launcher_env(PYTHONPATH=str(ROOT))  # no empty entry: Python itself cannot start with one relative path
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr == (
        "launcher: refusing to start: the working directory cannot be read (No such file or directory: it was "
        "deleted or moved?): cd to an existing directory, or give the plan and --run-dir as absolute paths\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]


def test_dry_run_and_preflight_fail_a_run_directory_another_launcher_holds(tmp_path: Path) -> None:
    """`run` refuses a run directory another launcher holds (exit 2), but dry-run said "run dir ok (exists)" and
    exited 0, and preflight passed it (QA 2026-12-07). Both now fail it, naming the holder; a lock file left by a
    launcher that has ended holds nothing, and neither verb creates or writes a lock file."""
    import fcntl
    import os

    path = write_plan(tmp_path, tiny_plan(steps=2))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    held_by = f"the run directory {run_dir} is in use by another launcher (pid {os.getpid()})"
    with open(run_dir / ".launcher.lock", "a+") as held:  # what a running launcher holds (pid in the file)
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write(f"{os.getpid()}\n")
        held.flush()
        dry = run_launcher("dry-run", str(path), "--run-dir", str(run_dir))
        pre = run_launcher("preflight", str(path), "--run-dir", str(run_dir))
        node0 = run_launcher("dry-run", str(path), "--run-dir", str(run_dir), "--node-rank", "0")
    assert dry.returncode == 2 and "failed run dir" in dry.stderr, dry.stdout + dry.stderr
    assert held_by in " ".join(dry.stdout.split()), dry.stdout
    assert pre.returncode == 1 and held_by in " ".join(pre.stdout.split()), pre.stdout
    assert node0.returncode == 2 and "in use by a launcher of every node" in " ".join(node0.stdout.split())
    again = run_launcher("dry-run", str(path), "--run-dir", str(run_dir))  # the lock file stays, nobody holds it
    assert again.returncode == 0, again.stdout + again.stderr
    assert sorted(p.name for p in run_dir.iterdir()) == [".launcher.lock"]


def test_a_lock_test_that_fails_for_want_of_locks_is_not_a_holder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On NFS flock is emulated by fcntl locks, and a failing test (EBADF, ENOLCK) read as "in use by another
    launcher" (review 2026-12-07): only EWOULDBLOCK names a holder. `run` says it cannot lock, and why."""
    import errno
    import fcntl

    from launcher import rundir
    from launcher.context import make_context

    plan = tiny_plan(steps=2)
    ctx = make_context(plan, write_plan(tmp_path, plan), run_dir=str(tmp_path / "run"), caller_env={})
    ctx.run_dir.mkdir()
    (ctx.run_dir / ".launcher.lock").write_text("")

    def no_locks(handle: object, how: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    assert rundir.in_use(ctx) is None
    with pytest.raises(rundir.RunDirError, match=r"cannot lock .*No locks available"):
        rundir._flock(ctx, ".launcher.lock", True)


@pytest.mark.parametrize(
    ("where", "why"),
    [
        ("missing/p.json", "its folder {tmp}/missing does not exist"),
        (".", "--output {tmp} is a directory"),
        ("", "--output is empty"),
    ],
)
@pytest.mark.parametrize("verb", ["probe", "bench"])
def test_an_output_path_that_cannot_be_written_is_refused_before_anything_runs(
    tmp_path: Path, verb: str, where: str, why: str
) -> None:
    """`probe --output /nonexistent/dir/p.json`, `probe --output /tmp` and `bench ... --output /nonexistent/x.json`
    ran the whole probe or bench, then crashed with a traceback, exit 1 (QA 2026-12-07): refused first, exit 2, the
    option named, no run directory made."""
    output = str(tmp_path / where) if where and where != "." else (str(tmp_path) if where else "")
    run_dir = tmp_path / "run"
    args = ["--nodes", "1", "--gpus-per-node", "2"] if verb == "probe" else [str(write_plan(tmp_path, tiny_plan()))]
    if verb == "bench":
        args += ["--steps", "2", "--warmup", "0"]
    done = run_launcher(verb, *args, "--run-dir", str(run_dir), "--output", output, timeout=60, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert why.format(tmp=tmp_path) in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not run_dir.exists()


def test_an_output_folder_that_cannot_be_written_is_refused(tmp_path: Path) -> None:
    """A read-only folder (a file in the way of the folder, as root ignores permission bits)."""
    (tmp_path / "file").write_text("")
    done = run_launcher("probe", "--gpus-per-node", "2", "--output", str(tmp_path / "file" / "p.json"), timeout=60)
    assert done.returncode == 2 and "--output" in done.stderr and "does not exist" in done.stderr, done.stderr
    from launcher.storage import output_refusal

    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    why = output_refusal(str(locked / "p.json"))
    denied = f"--output {locked}/p.json: cannot write in {locked}: Permission denied"
    assert why == (None if os.geteuid() == 0 else denied)


@pytest.mark.parametrize(
    ("option", "value", "why"),
    [
        ("--hosts", ",,", "--hosts ',,' has an empty host name"),
        ("--hosts", "a,,b", "--hosts 'a,,b' has an empty host name"),
        ("--master-addr", "", "--master-addr is empty"),
    ],
)
def test_probe_refuses_an_empty_host_or_master_address(tmp_path: Path, option: str, value: str, why: str) -> None:
    """`probe --hosts ,,` read as no hosts and `--master-addr ''` as the default, silently (QA 2026-12-07)."""
    done = run_launcher("probe", "--gpus-per-node", "2", option, value, "--run-dir", str(tmp_path / "run"), timeout=60)
    assert done.returncode == 2 and why in done.stderr, done.stdout + done.stderr
    assert not (tmp_path / "run").exists()


def test_a_report_is_written_atomically(tmp_path: Path) -> None:
    """write_atomic renames a whole file over the report; a write that fails leaves no temporary file behind."""
    out = tmp_path / "bench.json"
    rundir.write_atomic(out, "new\n")
    assert out.read_text() == "new\n" and [p.name for p in tmp_path.iterdir()] == ["bench.json"]
    blocked = tmp_path / "blocked.json"
    (blocked / "inside").mkdir(parents=True)  # a folder in the way of the rename: the write fails
    with pytest.raises(OSError):
        rundir.write_atomic(blocked, "new\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.json", "blocked.json"]


@pytest.mark.parametrize(
    ("sig", "code", "said"),
    [(signal.SIGINT, 130, "launcher: interrupted (SIGINT)"), (signal.SIGTERM, 143, "launcher: terminated (SIGTERM)")],
)
def test_a_signal_during_preflight_ends_it_with_one_line_and_no_orphan(
    tmp_path: Path, sig: signal.Signals, code: int, said: str
) -> None:
    """QA 2026-12-07: preflight asks the job's interpreter on every node (up to 120 s each, over ssh where remote); a
    Ctrl-C while it waited printed a KeyboardInterrupt traceback, and a SIGTERM ended the launcher by its default
    action with the interpreter it was asking left running. Each now says so in one line, exits 128 + the signal,
    and the interpreter it was asking is gone."""
    marker = tmp_path / "slow-python"
    marker.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(30)\n")
    marker.chmod(0o755)
    plan = tiny_plan(master_port=free_port())
    plan = replace(plan, entrypoint=replace(plan.entrypoint, python=str(marker)))
    argv = [sys.executable, "-m", "launcher", "preflight", str(write_plan(tmp_path, plan)), "--run-dir", str(tmp_path)]
    # SIGINT as a terminal's foreground job has it: a shell starts background jobs (pytest under `nohup ... &`) with
    # SIGINT ignored, and the children inherit that
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env=launcher_env(),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    wait_for(lambda: processes_mentioning(str(marker)), 30, "preflight to ask the interpreter")
    proc.send_signal(sig)
    out = proc.communicate(timeout=30)[0]
    assert proc.returncode == code, out
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out
    assert out.rstrip().splitlines()[-1] == said, out
    assert not processes_mentioning(str(marker))


@pytest.mark.parametrize(
    ("option", "value", "why"),
    [
        ("--nodes", "0", "--nodes(0) must be >= 1"),
        ("--nodes", "-2", "--nodes(-2) must be >= 1"),
        ("--gpus-per-node", "-1", "--gpus-per-node(-1) must be >= 1"),
        ("--master-port", "0", "--master-port(0) must be between 1 and 65535"),
        ("--master-port", "70000", "--master-port(70000) must be between 1 and 65535"),
    ],
)
def test_probe_without_a_plan_names_the_option_it_refuses(tmp_path: Path, option: str, value: str, why: str) -> None:
    """`probe --nodes 0` said "plan refused: world.num_nodes(0) must be >= 1": no plan was given, and no option is
    called world.num_nodes (QA 2026-12-08)."""
    args = [option, value] if option == "--gpus-per-node" else ["--gpus-per-node", "2", option, value]
    done = run_launcher("probe", *args, "--run-dir", str(tmp_path / "run"), timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr == f"launcher probe: {why}\n"
    assert not (tmp_path / "run").exists()
