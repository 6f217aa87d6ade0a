"""`preflight`: the full table, with the job's interpreter really asked for its torch/deepspeed."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import foreign_addresses, launcher_env, run_launcher, write_plan
from make_plan import tiny_plan

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_preflight_passes_on_a_cpu_plan(tmp_path: Path) -> None:
    done = run_launcher("preflight", str(write_plan(tmp_path, tiny_plan())))
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines() if line and not line.startswith("-")}
    import torch

    assert f"torch {torch.__version__}" in rows["versions"] and "deepspeed 0.19" in rows["versions"]
    assert rows["entrypoint"].split()[1] == "ok" and rows["accelerators"].split()[1] == "ok"
    assert "0 fail" in done.stdout


def test_preflight_fails_unreachable_hosts_without_contacting_them(tmp_path: Path) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ssh").write_text("#!/bin/sh\necho 'ssh: connect to host port 22: Connection refused' >&2\nexit 255\n")
    (fake / "ssh").chmod(0o755)
    hosts = foreign_addresses(2)
    plan = tiny_plan(
        nodes=2,
        procs=1,
        hosts=hosts,
        master_addr=hosts[0],
        env={"NCCL_SOCKET_IFNAME": "=nosuchnic9"},
        accelerator="cuda",
    )
    env = launcher_env(PATH=f"{fake}{os.pathsep}{os.environ['PATH']}")
    done = run_launcher("preflight", str(write_plan(tmp_path, plan)), env=env)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    ssh = [line for line in lines if line.startswith("ssh ")]
    assert len(ssh) == 2 and all(" fail " in line and "Connection refused" in line for line in ssh)
    assert any(line.startswith("nccl") and "fail" in line and "nosuchnic9" in line for line in lines)
    assert not any(line.startswith("versions") for line in lines)  # nothing to ask on unreachable nodes


def test_a_missing_working_directory_is_named_not_the_interpreter(tmp_path: Path) -> None:
    """The version probe runs where the job does: a working directory that does not exist was reported as the
    interpreter failing, with "fix entrypoint.python" (QA 2026-12-07)."""
    base = tiny_plan()
    plan = replace(base, entrypoint=replace(base.entrypoint, working_dir=str(tmp_path / "no-such-checkout")))
    done = run_launcher("preflight", str(write_plan(tmp_path, plan)))
    assert done.returncode == 1
    (versions,) = [line for line in done.stdout.splitlines() if line.startswith("versions")]
    assert "no-such-checkout does not exist" in versions and "entrypoint.working_dir" in versions
    assert "entrypoint.python" not in versions


def test_a_remote_missing_interpreter_is_not_taken_for_a_missing_directory() -> None:
    """On another node only the output tells: the shell's `cd` failing is the directory; an interpreter missing in
    a venv under the directory (its path holds the directory's) is the interpreter (review 2026-12-07)."""
    from launcher.command import Command
    from launcher.preflight import _no_working_dir

    remote = Command(argv=("x",), env={}, cwd="/workspace/Megatron-LM", host="gpu-node-7.invalid")
    assert _no_working_dir(remote, "bash: line 1: cd: /workspace/Megatron-LM: No such file or directory")
    assert not _no_working_dir(remote, "env: '/workspace/Megatron-LM/.venv/bin/python': No such file or directory")
