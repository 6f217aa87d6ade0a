"""Settings from the environment, `trainplan serve`, and its ./var/trainplan.db default."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from app.cli import build_parser
from app.settings import DEFAULT_DATABASE_URL, ENV_NAMES, Settings


def test_defaults_without_environment() -> None:
    s = Settings.from_env({})
    assert s.database_url == DEFAULT_DATABASE_URL == "sqlite:///var/trainplan.db"
    assert (s.host, s.port, s.workers) == ("127.0.0.1", 8000, 1)
    assert (s.templates_dir / "web" / "base.html").is_file()


def test_every_setting_has_one_environment_variable() -> None:
    assert set(ENV_NAMES) == set(Settings.model_fields)
    env = {
        "DATABASE_URL": "postgresql+psycopg://u:p@db:5432/tp",
        "TRAINPLAN_PORT": "9000",
        "TRAINPLAN_MAX_SEARCH_TIME_S": "2.5",
        "TRAINPLAN_MAX_BODY_BYTES": "65536",
        "TRAINPLAN_HOST": "",
    }
    s = Settings.from_env(env)
    assert s.database_url.endswith("/tp") and s.port == 9000 and s.max_search_time_s == 2.5
    assert s.max_body_bytes == 65536 and s.host == "127.0.0.1"  # empty means unset
    assert s.database_kind == "postgresql"


def test_a_bad_variable_is_named() -> None:
    with pytest.raises(ValueError, match=r"TRAINPLAN_PORT: .*less than or equal to 65535"):
        Settings.from_env({"TRAINPLAN_PORT": "70000"})
    with pytest.raises(ValueError, match="TRAINPLAN_MAX_SEARCH_TIME_S"):
        Settings.from_env({"TRAINPLAN_MAX_SEARCH_TIME_S": "soon"})


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("notaurl", "DATABASE_URL: 'notaurl' is not a database URL"),
        ("mysql://a@b/c", "DATABASE_URL: 'mysql' databases are not supported: sqlite or postgresql"),
    ],
)
def test_a_database_url_that_cannot_work_is_named_before_any_query(url: str, message: str) -> None:
    """It was SQLAlchemy's traceback from `trainplan serve` and every account verb (QA, 2026-12-06)."""
    import subprocess
    import sys

    with pytest.raises(ValueError, match=message):
        Settings.from_env({"DATABASE_URL": url})
    env = {"PATH": "/usr/bin:/bin", "DATABASE_URL": url}
    for verb in (["users", "list"], ["tokens", "list", "alice"]):
        done = subprocess.run([sys.executable, "-m", "app", *verb], capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_serve_flags_override_the_environment() -> None:
    args = build_parser().parse_args(["serve", "--port", "9001", "--workers", "2"])
    s = Settings.from_env({"TRAINPLAN_PORT": "9000"}, host=args.host, port=args.port, workers=args.workers)
    assert (s.host, s.port, s.workers) == ("127.0.0.1", 9001, 2)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow
def test_trainplan_serve_creates_var_trainplan_db(tmp_path: Path) -> None:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL" and not k.startswith("TRAINPLAN_")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, "server did not start"
                time.sleep(0.1)
        assert r.json()["database"] == "sqlite"
        assert (tmp_path / "var" / "trainplan.db").is_file()
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    assert "Uvicorn running on http://127.0.0.1:" in out


def test_docs_list_every_setting() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "service.md").read_text()
    for var in ENV_NAMES.values():
        assert f"| `{var}` |" in doc, var


def test_allowed_hosts_are_names_without_scheme_or_port() -> None:
    """An entry with a port or a scheme matches no Host header: every request would have been refused."""
    env = {"TRAINPLAN_ALLOWED_HOSTS": "planner.example.org, *.corp.example ,10.0.0.5,[::1]"}
    assert Settings.from_env(env).allowed_hosts == ("planner.example.org", "*.corp.example", "10.0.0.5", "[::1]")
    assert Settings.from_env({}).allowed_hosts == ("*",)
    assert Settings.from_env({"TRAINPLAN_ALLOWED_HOSTS": "Planner.Example.org."}).allowed_hosts == (
        "planner.example.org",
    )
    assert Settings(allowed_hosts=(" Planner.Example.org",)).allowed_hosts == ("planner.example.org",)  # as the env
    for bad in ("https://planner.example.org", "planner.example.org:8000", ",", "*.", "a b"):
        with pytest.raises(ValueError) as err:
            Settings.from_env({"TRAINPLAN_ALLOWED_HOSTS": bad})
        assert "TRAINPLAN_ALLOWED_HOSTS" in str(err.value), bad
