"""The real server process: `trainplan serve` prints a first admin login on an empty database; the CLI manages
users and tokens; a search stops when its client leaves or at the hard time cap; an Idempotency-Key retry after
`kill -9` of the server returns the plan that was committed; several workers keep TCP_NODELAY."""

from __future__ import annotations

import atexit
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.cli import tcp_listener
from tests.api.conftest import TINY

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
# Never fits, so the search walks node counts until its cap, then looks for suggestions (well past the cap).
ENDLESS = {
    "model": "llama-3-405b",
    "cluster": {"num_nodes": 100000, "gpus_per_node": 1, "gpu": "A100-40GB"},
    "training": {"global_batch_size": 64, "objective": "min_gpus"},
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(db_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINPLAN_") and k != "DATABASE_URL"}
    return {**env, "DATABASE_URL": db_url, "PYTHONPATH": str(ROOT), **extra}


def cli(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", *args], input=stdin, text=True, capture_output=True, cwd=ROOT, env=env, timeout=60
    )


class Server(subprocess.Popen[str]):
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def serving(env: dict[str, str], *args: str) -> Iterator[tuple[str, Server]]:
    """`trainplan serve` on a free port; its output goes to a file (a pipe nobody reads would fill and stall it)."""
    port = _free_port()
    log = Path(tempfile.mkstemp(prefix="trainplan-serve-", suffix=".log")[1])
    with log.open("w") as out:
        proc = Server(
            [sys.executable, "-m", "app", "serve", "--port", str(port), *args],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
    proc.log = log
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{base}/healthz", timeout=2).raise_for_status()
                break
            except httpx.HTTPError:
                assert proc.poll() is None and time.monotonic() < deadline, "the server did not start"
                time.sleep(0.1)
        yield base, proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if os.environ.get("TRAINPLAN_KEEP_LOGS") is None:
            atexit.register(log.unlink, missing_ok=True)


def _token(env: dict[str, str], name: str = "ops", role: str = "admin") -> str:
    made = cli(env, "users", "add", name, "--role", role, "--password-stdin", stdin="a long enough password\n")
    assert made.returncode == 0, made.stderr
    created = cli(env, "tokens", "create", name, "--label", "tests")
    assert created.returncode == 0, created.stderr
    return created.stdout.strip()


def _descendants_cpu_s(pid: int) -> float:
    """CPU seconds of every live process below `pid` (the forkserver and the planner processes)."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(fields[1])
            ticks[int(entry.name)] = int(fields[11]) + int(fields[12])
    below, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - below
        below |= frontier
    return sum(ticks.get(p, 0) for p in below) / os.sysconf("SC_CLK_TCK")


def test_first_start_prints_an_admin_login_that_works(tmp_path: Path) -> None:
    env = _env(f"sqlite:///{tmp_path / 'var' / 'trainplan.db'}")
    with serving(env) as (base, proc):
        time.sleep(0.5)
    out = proc.output()
    password = re.search(r"password: (\S+)", out)
    token = re.search(r"^\s+(tp_\S+)$", out, re.M)
    assert password and token and "name: admin" in out and "/login" in out, out
    with serving(env) as (base, proc):
        r = httpx.post(f"{base}/plans", json=TINY, headers={"Authorization": f"Bearer {token.group(1)}"}, timeout=60)
        assert r.status_code == 201 and r.json()["owner"] == "admin"
        with httpx.Client(base_url=base, follow_redirects=False) as browser:
            page = browser.get("/login")
            csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
            assert csrf
            login = browser.post(
                "/login",
                data={"csrf_token": csrf.group(1), "name": "admin", "password": password.group(1), "next": "/"},
            )
            assert login.status_code == 303 and browser.get("/").status_code == 200
    second = proc.output()
    assert "password:" not in second  # printed once, on the empty database only


def test_users_and_tokens_from_the_command_line(tmp_path: Path) -> None:
    env = _env(f"sqlite:///{tmp_path / 'cli.db'}")  # the same store as the API's (tested there on PostgreSQL too)
    token = _token(env, "uma", "user")
    assert token.startswith("tp_")
    generated = cli(env, "users", "add", "rita", "--role", "read-only")
    assert generated.returncode == 0 and re.match(r"rita: password \S{20}", generated.stdout)
    duplicate = cli(env, "users", "add", "uma")
    assert duplicate.returncode == 2 and "exists already" in duplicate.stderr
    short = cli(env, "users", "passwd", "uma", "--password-stdin", stdin="short\n")
    assert short.returncode == 2 and "password: 5 characters" in short.stderr
    token_id = token.split("_")[1]
    assert cli(env, "tokens", "revoke", token_id).returncode == 0
    assert re.search(rf"^{token_id}\s+uma\s+revoked", cli(env, "tokens", "list", "uma").stdout, re.M)
    nobody = cli(env, "tokens", "list", "nobody")  # exited 0 with nothing, unlike every other verb (QA, 2026-12-06)
    assert nobody.returncode == 2 and "no user named 'nobody'" in nobody.stderr and not nobody.stdout
    assert cli(env, "users", "disable", "rita").returncode == 0
    listed = cli(env, "users", "list").stdout
    assert re.search(r"^uma\s+user\s+web login", listed, re.M) and re.search(
        r"^rita\s+read-only\s+disabled", listed, re.M
    ), listed


def _raw_post(base: str, path: str, body: dict[str, Any], token: str, key: str | None = None) -> socket.socket:
    """A POST sent on a raw socket whose answer we never read."""
    host, port = base.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {token}\r\nContent-Length: {len(data)}\r\n"
        + (f"Idempotency-Key: {key}\r\n" if key else "")
        + "\r\n"
    )
    sock = socket.create_connection((host, int(port)))
    sock.sendall(head.encode() + data)
    return sock


def test_a_search_stops_when_its_client_leaves(tmp_path: Path) -> None:
    env = _env(f"sqlite:///{tmp_path / 't.db'}", TRAINPLAN_MAX_SEARCH_TIME_S="30", TRAINPLAN_PLANNER_PROCESSES="1")
    token = _token(env)
    with serving(env) as (base, proc):
        warm = httpx.post(f"{base}/plans", json=TINY, headers={"Authorization": f"Bearer {token}"}, timeout=60)
        assert warm.status_code == 201  # the forkserver and the planner process are up (their start costs CPU too)
        sock = _raw_post(
            base, "/plans", {**ENDLESS, "training": {**ENDLESS["training"], "search_time_limit_s": 30}}, token
        )
        time.sleep(1.0)
        busy = _descendants_cpu_s(proc.pid)
        time.sleep(1.0)
        assert _descendants_cpu_s(proc.pid) - busy > 0.15  # the search is running (on a shared, busy machine)
        sock.close()  # the client goes away
        time.sleep(1.0)
        idle = _descendants_cpu_s(proc.pid)
        time.sleep(2.0)
        assert _descendants_cpu_s(proc.pid) - idle < 0.1  # nothing computes any more
        assert httpx.get(f"{base}/plans", headers={"Authorization": f"Bearer {token}"}).json()["total"] == 1
        # and the next request gets a fresh planner process
        r = httpx.post(f"{base}/plans", json=TINY, headers={"Authorization": f"Bearer {token}"}, timeout=60)
        assert r.status_code == 201
    assert "client closed the connection" in proc.output()


def test_a_search_stops_at_its_time_limit(tmp_path: Path) -> None:
    """A min_gpus search over 100,000 node counts of a model that fits none of them: the planner stops at its own
    time limit (1 s here), suggestions included, and answers; the planner process's hard cap (2 x 1 + 5 s) is never
    reached (it once was: 97 s for an 8 s limit)."""
    env = _env(f"sqlite:///{tmp_path / 't.db'}", TRAINPLAN_MAX_SEARCH_TIME_S="1", TRAINPLAN_PLANNER_PROCESSES="1")
    token = _token(env)
    with serving(env) as (base, _proc):
        start = time.monotonic()
        r = httpx.post(f"{base}/plans", json=ENDLESS, headers={"Authorization": f"Bearer {token}"}, timeout=60)
        took = time.monotonic() - start
        assert r.status_code == 201, r.text[:300]
        assert r.json()["chosen"] is None and took < 6.5, took
        assert r.json()["result"]["stats"]["truncated"] is True


def test_an_idempotent_retry_after_kill_9_returns_the_committed_plan(tmp_path: Path) -> None:
    db = tmp_path / "k.db"
    env = _env(f"sqlite:///{db}")
    token = _token(env)
    with serving(env) as (base, proc):
        sock = _raw_post(base, "/plans", TINY, token, key="retry-me")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with sqlite3.connect(db) as conn:
                if conn.execute("SELECT count(*) FROM plans").fetchone()[0]:
                    break
            time.sleep(0.005)
        os.killpg(proc.pid, signal.SIGKILL)  # committed; whether the 201 left is anyone's guess
        proc.wait()
        sock.close()
    with sqlite3.connect(db) as conn:
        (committed,) = conn.execute("SELECT id FROM plans").fetchone()
    with serving(env) as (base, _proc):
        headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": "retry-me"}
        retry = httpx.post(f"{base}/plans", json=TINY, headers=headers, timeout=60)
        assert retry.status_code == 201 and retry.json()["id"] == committed
        assert retry.headers["idempotent-replayed"] == "true"
        assert httpx.get(f"{base}/plans", headers=headers).json()["total"] == 1
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_the_listener_for_several_workers_sets_tcp_nodelay() -> None:
    sock = tcp_listener("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP  # asyncio sets TCP_NODELAY only on sockets of this protocol
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    finally:
        sock.close()


def test_two_workers_answer_keep_alive_requests_without_the_40_ms_stall(tmp_path: Path) -> None:
    env = _env(f"sqlite:///{tmp_path / 'w.db'}")
    with serving(env, "--workers", "2") as (base, _proc), httpx.Client(base_url=base) as c:
        for _ in range(5):
            c.get("/healthz")
        times = []
        for _ in range(20):
            start = time.perf_counter()
            c.get("/healthz").raise_for_status()
            times.append(time.perf_counter() - start)
    times.sort()
    assert times[len(times) // 2] < 0.030, times  # Nagle + delayed ACK would make every one of them ~40 ms
