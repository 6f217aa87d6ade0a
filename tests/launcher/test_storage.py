"""Where the job writes: the checkpoint directories named by --save (also --save=DIR, also inside the plan's
--args-file) must be writable before anything starts; `run` refuses (exit 2) and `preflight` fails otherwise."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from conftest import run_launcher, write_plan
from make_plan import tiny_plan

from launcher.backends import build
from launcher.checks import FAIL, OK, WARN, Check
from launcher.context import make_context
from launcher.sections import Prediction
from launcher.storage import check_checkpoint_dirs, flag_values, probe_write, save_dirs


def test_flag_values_reads_both_spellings() -> None:
    words = ["--save", "/a", "--lr", "1", "--save=/b", "--saved", "/x", "--save"]
    assert flag_values(words, ("--save",)) == ["/a", "/b"]


def test_save_dirs_come_from_the_arguments_and_the_args_file(tmp_path: Path) -> None:
    plan = tiny_plan(extra_args=("--save=rel/ckpt",))
    files = {**plan.files, "megatron_args.txt": plan.files["megatron_args.txt"] + "--save /from/args/file\n"}
    ctx = make_context(replace(plan, files=files), tmp_path / "plan.json", run_dir=str(tmp_path / "run"))
    dirs = save_dirs(ctx)
    assert dirs == [tmp_path / "run" / "checkpoints", Path(ctx.working_dir) / "rel/ckpt", Path("/from/args/file")]


def test_probe_write_sees_a_file_in_the_way_and_a_missing_parent(tmp_path: Path) -> None:
    assert probe_write(tmp_path / "not" / "yet") is None  # created later: its parent is writable
    (tmp_path / "file").write_text("x")
    assert probe_write(tmp_path / "file" / "ckpt") == f"{tmp_path / 'file'} is not a directory"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".trainplan-write-check")]  # cleaned up


def checked(plan: object, tmp_path: Path) -> Check:
    ctx = make_context(plan, tmp_path / "p.json", run_dir=str(tmp_path / "r"))  # type: ignore[arg-type]
    return check_checkpoint_dirs(ctx, build(ctx)[1])


def test_the_check_fails_warns_or_passes(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    bad = checked(tiny_plan(extra_args=("--save", str(tmp_path / "file" / "ckpt"))), tmp_path)
    assert bad.status == FAIL and "is not a directory" in bad.detail
    none = replace(tiny_plan(), entrypoint=replace(tiny_plan().entrypoint, args=()))
    assert checked(none, tmp_path).status == WARN
    warn = checked(replace(tiny_plan(), prediction=Prediction(checkpoint_bytes=1 << 60)), tmp_path)
    assert warn.status == WARN and "prediction.checkpoint_bytes" in warn.detail
    assert checked(tiny_plan(), tmp_path).status == OK


def test_run_refuses_and_preflight_fails_on_an_unwritable_checkpoint_dir(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    plan = write_plan(tmp_path, tiny_plan(extra_args=("--save", str(tmp_path / "file" / "ckpt"))))
    run = run_launcher("run", str(plan), "--run-dir", str(tmp_path / "run"), cwd=tmp_path)
    assert run.returncode == 2 and "checkpoints" in run.stderr and "is not a directory" in run.stderr
    assert not (tmp_path / "run").exists()
    pre = run_launcher("preflight", str(plan), "--run-dir", str(tmp_path / "run"), cwd=tmp_path)
    assert pre.returncode == 1 and "is not a directory" in pre.stdout
    assert os.path.isfile(tmp_path / "file")


def test_a_directory_that_cannot_be_made_is_named() -> None:
    """`--save /proc/nope` said "cannot write in /proc: No such file or directory" (QA): it names the directory asked
    for and why it cannot be made."""
    from launcher.storage import probe_write

    assert probe_write(Path("/proc/nope/ckpt")) == (
        "/proc/nope/ckpt does not exist and cannot be made: cannot write in /proc: No such file or directory"
    )


def test_a_save_interval_other_than_the_plans_is_warned_about(tmp_path: Path) -> None:
    plan = replace(tiny_plan(extra_args=("--save-interval", "50")), prediction=Prediction(checkpoint_interval_steps=40))
    warn = checked(plan, tmp_path)
    assert warn.status == WARN and "--save-interval 50, but the plan's interval is 40 steps" in warn.detail
    same = replace(tiny_plan(extra_args=("--save-interval=40",)), prediction=Prediction(checkpoint_interval_steps=40))
    ok = checked(same, tmp_path)
    assert ok.status == OK and "every 40 steps" in ok.detail
