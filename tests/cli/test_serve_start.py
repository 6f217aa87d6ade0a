"""`trainplan serve` binds its address before it makes a first admin: a port in use or a host that is not this
machine's is said in one line naming the flags, exit 2, with one worker or several, and nobody is made (QA D9); a bad
flag value names the flag, not the environment variable it replaces (QA D10)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


def trainplan(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`trainplan ARGS` on a database in tmp_path."""
    clean = {k: v for k, v in os.environ.items() if k != "DATABASE_URL" and not k.startswith("TRAINPLAN_")}
    clean |= {"DATABASE_URL": f"sqlite:///{tmp_path / 'trainplan.db'}", **env}
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, env=clean, timeout=60)


def serve(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return trainplan(tmp_path, "serve", *args, **env)


def nobody_was_made(tmp_path: Path, done: subprocess.CompletedProcess[str]) -> None:
    assert "password" not in done.stdout, done.stdout
    users = trainplan(tmp_path, "users", "list")
    assert users.returncode == 0 and users.stdout == "", users


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_port_in_use_is_one_line_and_no_admin_is_made(tmp_path: Path, busy_port: int, workers: str) -> None:
    done = serve(tmp_path, "--port", str(busy_port), "--workers", workers)
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"error: --host/--port: cannot listen on host '127.0.0.1' port {busy_port}: Address already in use\n"
    )
    nobody_was_made(tmp_path, done)


@pytest.mark.parametrize("workers", ["1", "3"])
def test_a_host_that_does_not_resolve(tmp_path: Path, workers: str) -> None:
    done = serve(tmp_path, "--host", "bad host!!", "--workers", workers)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: --host/--port: cannot listen on host 'bad host!!' port 8000: ")
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr
    nobody_was_made(tmp_path, done)


def test_a_port_from_the_environment_is_named_by_its_variable(tmp_path: Path, busy_port: int) -> None:
    done = serve(tmp_path, TRAINPLAN_PORT=str(busy_port))
    assert done.returncode == 2 and done.stderr.startswith("error: --host/TRAINPLAN_PORT: cannot listen"), done.stderr


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        (["--port", "99999"], {}, "--port: Input should be less than or equal to 65535 (got 99999)"),
        (["--workers", "0"], {"TRAINPLAN_WORKERS": "2"}, "--workers: Input should be greater than or equal to 1"),
        ([], {"TRAINPLAN_PORT": "99999"}, "TRAINPLAN_PORT: Input should be less than or equal to 65535"),
    ],
)
def test_a_bad_value_names_the_flag_or_the_variable_it_came_from(
    tmp_path: Path, args: list[str], env: dict[str, str], named: str
) -> None:
    """`--port 99999` said "TRAINPLAN_PORT: ...", `--workers 0` TRAINPLAN_WORKERS."""
    done = serve(tmp_path, *args, **env)
    assert done.returncode == 2 and done.stderr.startswith(f"error: invalid service settings: {named}"), done.stderr
    assert ("TRAINPLAN_" in done.stderr) == (not args), done.stderr


def test_a_second_listener_on_the_same_port_is_refused_at_once() -> None:
    """SO_REUSEADDR lets two sockets bind one port until one listens: the second `serve` passed the bind check and
    created the first admin before uvicorn failed (review 2026-12-07). The listener listens when it is made."""
    import errno
    import socket

    from app.cli.service import tcp_listener

    first = tcp_listener("127.0.0.1", 0)
    try:
        port = first.getsockname()[1]
        with pytest.raises(OSError) as err:
            tcp_listener("127.0.0.1", port).close()
        assert err.value.errno == errno.EADDRINUSE
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # the first one accepts connections (queued until the server accepts them)
    finally:
        first.close()
