"""Commands as data: the shell form used over ssh round-trips exactly, whatever the arguments contain."""

from __future__ import annotations

import shlex
import subprocess

from conftest import foreign_addresses
from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.command import Command, is_local, launch_argv

TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=20)


@settings(deadline=None)  # timings on a shared CI machine are noisy
@given(argv=st.lists(TEXT, min_size=1, max_size=5), value=TEXT, cwd=TEXT)
def test_shell_form_round_trips(argv: list[str], value: str, cwd: str) -> None:
    command = Command(argv=tuple(argv), env={"A_B": value}, cwd=cwd or "/", host="h1")
    words = shlex.split(command.shell())
    assert words[:2] == ["cd", cwd or "/"]
    assert words[3:7] == ["exec", "env", "-i", f"A_B={value}"]
    assert words[7:] == argv


def test_shell_form_runs_with_exactly_its_environment(tmp_path) -> None:  # type: ignore[no-untyped-def]
    command = Command(argv=("/usr/bin/env",), env={"ONLY": "x y;$(z)"}, cwd=str(tmp_path))
    done = subprocess.run(["sh", "-c", command.shell()], capture_output=True, text=True, env={"LEAK": "1"})
    assert done.stdout.splitlines() == ["ONLY=x y;$(z)"]


def test_remote_commands_go_over_ssh_and_local_ones_do_not() -> None:
    command = Command(argv=("python", "-c", "print(1)"), env={}, cwd="/w", host="node7")
    assert launch_argv(command, local=True) == ["python", "-c", "print(1)"]
    argv = launch_argv(command, local=False)
    assert argv[0] == "ssh" and "BatchMode=yes" in argv and argv[-2] == "node7"
    assert shlex.split(argv[-1])[-3:] == ["python", "-c", "print(1)"]
    # an unreachable host fails the node's agent within half a minute: it waited on TCP's own retries, silently,
    # for minutes (QA, 2026-12-07; preflight already used ConnectTimeout=5)
    assert "ConnectTimeout=30" in argv


def test_is_local() -> None:
    assert is_local("localhost") and is_local("127.0.0.1")
    assert not is_local(foreign_addresses(1)[0])  # a documentation address (no traffic: bind only)
