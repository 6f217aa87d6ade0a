"""`trainplan render --out DIR` (app/render/render.py write_artifacts): the folder holds this plan's files and no
other plan's, and a write that fails leaves it as it was."""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from app.render import ARTIFACT_NAMES, Artifacts, write_artifacts
from app.render.render import MANIFEST

# a DeepSpeed plan's files, then a Megatron plan's (no ds_config.json, hostfile, deepspeed.sh)
DEEPSPEED = Artifacts(files={n: f"old {n}\n" for n in ARTIFACT_NAMES if n not in ("megatron_args.txt", "train.sh")})
MEGATRON = Artifacts(files={n: f"new {n}\n" for n in ("megatron_args.txt", "train.sh", "nccl_env.sh", "sbatch.sh")})


def run(*args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", *args], input=stdin, capture_output=True, text=True, timeout=120
    )


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every entry's bytes and mode (a folder's as b"<dir>"), hidden ones included."""
    return {
        p.name: (b"<dir>" if p.is_dir() else p.read_bytes(), stat.S_IMODE(p.stat().st_mode))
        for p in sorted(folder.iterdir())
    }


def test_a_render_removes_the_files_of_a_previous_plan_it_does_not_have(tmp_path: Path) -> None:
    """A stale plan.json describing the old model stayed beside the new megatron_args.txt, and an old DeepSpeed
    plan's ds_config.json, deepspeed.sh and hostfile beside a new Megatron plan (QA D6)."""
    write_artifacts(DEEPSPEED, tmp_path)
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "hostfile.bak").write_text("mine too")
    removed: list[Path] = []
    written = write_artifacts(MEGATRON, tmp_path, removed=removed)
    assert [p.name for p in written] == list(MEGATRON.files)
    gone = ["ds_config.json", "torchrun.sh", "hostfile", "deepspeed.sh", "pytorchjob.yaml", "plan.json"]
    assert removed == [tmp_path / n for n in gone]  # in ARTIFACT_NAMES order
    assert sorted(os.listdir(tmp_path)) == sorted([*MEGATRON.files, "notes.txt", "hostfile.bak", MANIFEST])
    assert (tmp_path / MANIFEST).read_text().split() == list(MEGATRON.files)
    for name, text in MEGATRON.files.items():
        assert (tmp_path / name).read_text() == text
    assert (tmp_path / "notes.txt").read_text() == "mine"  # not a name trainplan renders: left alone


def test_a_link_or_folder_of_an_artifacts_name(tmp_path: Path) -> None:
    """A stale link is removed itself, never what it points to; a folder in a name this plan does not have is not
    a file of a previous render and stays."""
    target = tmp_path / "elsewhere.json"
    target.write_text("{}")
    out = tmp_path / "out"
    write_artifacts(DEEPSPEED, out)
    (out / "plan.json").unlink()
    (out / "plan.json").symlink_to(target)
    (out / "hostfile").unlink()
    (out / "hostfile").mkdir()
    removed: list[Path] = []
    write_artifacts(MEGATRON, out, removed=removed)
    gone = ["ds_config.json", "torchrun.sh", "deepspeed.sh", "pytorchjob.yaml", "plan.json"]
    assert removed == [out / n for n in gone] and not (out / "plan.json").is_symlink()
    assert target.read_text() == "{}" and (out / "hostfile").is_dir()


def test_the_cli_says_which_files_it_removed(tmp_path: Path) -> None:
    """End to end: two nodes named (plan.json rendered), then the same without a head node (none): the old plan.json
    is removed and the CLI says so in one line."""
    request: dict[str, Any] = {
        "model": "llama-2-7b",
        "cluster": {"num_nodes": 2, "gpu": "A100-80GB", "hosts": ["n0", "n1"]},
        "training": {"global_batch_size": 64},
    }
    first = run("render", "--out", str(tmp_path), stdin=json.dumps(request))
    assert first.returncode == 0 and (tmp_path / "plan.json").is_file(), first.stderr
    del request["cluster"]["hosts"]
    second = run("render", "--out", str(tmp_path), stdin=json.dumps(request))
    assert second.returncode == 0, second.stderr
    assert not (tmp_path / "plan.json").exists()
    said = [line for line in second.stdout.splitlines() if line.lstrip().startswith("removed")]
    assert said == [f"  removed {tmp_path / 'plan.json'}: a previous render's, not this plan's"], second.stdout
    wrote = {Path(line.split("wrote ", 1)[1]).name for line in second.stdout.splitlines() if "  wrote " in line}
    assert set(os.listdir(tmp_path)) == {*wrote, MANIFEST}


def test_a_folder_in_a_files_place_refuses_the_render_before_anything_is_written(tmp_path: Path) -> None:
    """`mkdir -p o4/sbatch.sh` then render: exit 2, but megatron_args.txt, train.sh... were already written (QA D7)."""
    write_artifacts(DEEPSPEED, tmp_path)
    (tmp_path / "sbatch.sh").unlink()
    (tmp_path / "sbatch.sh").mkdir()
    before = snapshot(tmp_path)
    with pytest.raises(IsADirectoryError) as err:
        write_artifacts(MEGATRON, tmp_path, removed=[])
    assert err.value.filename == str(tmp_path / "sbatch.sh")
    assert snapshot(tmp_path) == before  # the old plan's files, modes included, and no temporaries


def test_a_full_disk_leaves_the_folder_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each file was written in place (write_text), so a full disk left truncated files and a mix of two plans."""
    write_artifacts(DEEPSPEED, tmp_path)
    before = snapshot(tmp_path)
    calls: list[int] = []
    real_fsync = os.fsync

    def full_at_third(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full_at_third)
    removed: list[Path] = []
    with pytest.raises(OSError) as err:
        write_artifacts(MEGATRON, tmp_path, removed=removed)
    assert err.value.errno == errno.ENOSPC and err.value.filename == str(tmp_path / list(MEGATRON.files)[2])
    assert snapshot(tmp_path) == before and removed == []  # nothing replaced, nothing removed, no temporaries


def test_a_folder_made_for_a_write_that_fails_is_removed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError):
        write_artifacts(MEGATRON, tmp_path / "a" / "b")
    assert os.listdir(tmp_path) == []


def test_modes_are_kept_when_files_are_replaced(tmp_path: Path) -> None:
    """Scripts 755, the rest 644, whatever the temporary file's own mode (mkstemp's 600) or the old file's."""
    write_artifacts(DEEPSPEED, tmp_path)
    (tmp_path / "sbatch.sh").chmod(0o600)
    (tmp_path / "nccl_env.sh").chmod(0o777)
    write_artifacts(MEGATRON, tmp_path)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert modes == {n: 0o755 if n.endswith(".sh") else 0o644 for n in (*MEGATRON.files, MANIFEST)}


def test_the_cli_names_the_path_it_cannot_write_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "sbatch.sh").mkdir()
    request = {
        "model": "llama-2-7b",
        "cluster": {"num_nodes": 1, "gpu": "A100-80GB"},
        "training": {"global_batch_size": 64},
    }
    done = run("render", "--out", str(tmp_path), stdin=json.dumps(request))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr == (
        f"error: --out: cannot write the files into {tmp_path}: {tmp_path / 'sbatch.sh'}: Is a directory\n"
    )
    assert os.listdir(tmp_path) == ["sbatch.sh"]


def test_files_of_an_artifacts_name_that_no_render_wrote_are_left_alone(tmp_path: Path) -> None:
    """Any hostfile, plan.json or train.sh in the folder was removed when the plan had none, whoever wrote it, and
    called "a previous render's" (review 2026-12-07): only the names the last render listed in its MANIFEST go."""
    (tmp_path / "hostfile").write_text("mine\n")
    (tmp_path / "plan.json").write_text("{}")
    removed: list[Path] = []
    write_artifacts(MEGATRON, tmp_path, removed=removed)
    assert removed == [] and (tmp_path / "hostfile").read_text() == "mine\n" and (tmp_path / "plan.json").exists()


SMALL_REQUEST = {
    "model": "tiny-gpt",
    "cluster": {"num_nodes": 1, "gpu": "A100-80GB"},
    "training": {"global_batch_size": 8},
}


@pytest.mark.parametrize("out", ["", " "])
def test_an_empty_out_is_refused_and_nothing_is_written(tmp_path: Path, out: str) -> None:
    """`trainplan render req.json --out "$OUT"` with $OUT unset wrote every file into the current directory and
    exited 0 (QA 2026-12-08), as an empty `--run-dir` did in the launcher."""
    done = subprocess.run(
        [sys.executable, "-m", "app", "render", "--out", out],
        input=json.dumps(SMALL_REQUEST),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert done.returncode == 2, done.stdout
    assert done.stderr == "error: --out: is empty: give the directory to write the files into\n"
    assert os.listdir(tmp_path) == []


def test_an_out_that_is_a_file_says_so(tmp_path: Path) -> None:
    """`--out plan.txt` (a file) said only "File exists", which reads as if the folder had to be new."""
    target = tmp_path / "plan.txt"
    target.write_text("mine\n")
    done = run("render", "--out", str(target), stdin=json.dumps(SMALL_REQUEST))
    assert done.returncode == 2, done.stdout
    assert done.stderr == f"error: --out: cannot write the files into {target}: it is a file, not a directory\n"
    assert target.read_text() == "mine\n"
