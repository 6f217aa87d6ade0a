"""The harness of benchmarks/fault_matrix.py: run `python -m launcher run` on a small CPU plan, inject a fault with
real processes and signals, and read what happened from the launcher's log, the ranks' heartbeats and /proc.

Nothing is mocked: the trainer is examples/train_gpt.py (gloo, 2 ranks), the agents are torchrun and DeepSpeed's
runner, two hosts are two network namespaces joined by a veth pair, a full disk is a small tmpfs, Slurm's
`scontrol` is a stand-in script that records its arguments.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

from make_plan import tiny_plan  # noqa: E402

from launcher.spec import Plan, Prediction, Watchdog, dump  # noqa: E402

PYTHON = sys.executable
THROTTLE_S = 0.1  # each step sleeps this long: steps take ~0.13 s on 2 cores
PREDICTED_STEP_S = 0.15  # the planner has no CPU model: the plans carry the measured step time as their prediction
PREDICTED_HIGH_S = 0.25  # ... and an upper bound above it
FLOOR_S = 2.0  # the watchdog's fixed floor
STARTUP_S = 60.0  # allowance before the first step (imports, init, rendezvous)
SAVE_INTERVAL = 5
STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\.(\d{3}) (.*)$")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launcher_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def fault_plan(
    name: str,
    *,
    steps: int = 300,
    restarts: int = 1,
    grace_s: float = 15.0,
    extra: tuple[str, ...] = (),
    watchdog: Watchdog | None = None,
    **kwargs: Any,
) -> Plan:
    """A 2-rank CPU plan of the tiny GPT: throttled steps, a checkpoint every SAVE_INTERVAL steps, a prediction."""
    plan = tiny_plan(
        name,
        steps=steps,
        max_restarts=restarts,
        grace_period_s=grace_s,
        master_port=free_port(),
        extra_args=("--throttle-s", str(THROTTLE_S), "--save-interval", str(SAVE_INTERVAL), *extra),
        **kwargs,
    )
    prediction = Prediction(
        step_s=PREDICTED_STEP_S,
        step_s_high=PREDICTED_HIGH_S,
        checkpoint_save_s=0.5,
        checkpoint_load_s=0.5,
        checkpoint_interval_steps=SAVE_INTERVAL,
    )
    return replace(
        plan,
        prediction=prediction,
        watchdog=watchdog or Watchdog(floor_s=FLOOR_S, startup_s=STARTUP_S, straggler_steps=4),
    )


@dataclass
class Outcome:
    fault: str
    detect_s: float | None  # from the fault to the launcher's first word about it
    resume_s: float | None  # from the fault to the next completed step (after the restart or the requeue)
    steps_lost: int | None  # completed steps trained again after the resume
    orphans: int  # processes of the run left after the launcher exited
    exit_code: int
    message: str  # what the user reads
    checks: dict[str, bool]  # the bounds this row must meet

    @property
    def ok(self) -> bool:
        return all(self.checks.values()) and self.orphans == 0


def processes_mentioning(marker: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state != "Z":
            found.append(int(name))
    return found


class Run:
    """One `python -m launcher run` (or a per-node launcher inside a namespace, with `prefix`)."""

    def __init__(
        self,
        work: Path,
        plan: Plan,
        *args: str,
        env: dict[str, str] | None = None,
        prefix: tuple[str, ...] = (),
        run_dir: Path | None = None,
        name: str = "out",
    ) -> None:
        work.mkdir(parents=True, exist_ok=True)
        self.work, self.plan, self.plan_path = work, plan, work / "plan.json"
        self.run_dir = run_dir or work / "run"
        self.out = work / f"{name}.txt"
        dump(plan, self.plan_path)
        argv = [*prefix, PYTHON, "-m", "launcher", "run", str(self.plan_path), "--run-dir", str(self.run_dir), *args]
        with open(self.out, "wb") as sink:
            self.proc = subprocess.Popen(
                argv, stdout=sink, stderr=subprocess.STDOUT, cwd=ROOT, env=env or launcher_env()
            )
        self.started = time.time()
        self.suffix = next((f".node{a}" for i, a in enumerate(args) if i and args[i - 1] == "--node-rank"), "")

    def text(self) -> str:
        return self.out.read_text(errors="replace") if self.out.exists() else ""

    def events(self) -> list[tuple[float, str]]:
        """(unix time, message) of every line of launcher[.nodeK].log."""
        path = self.run_dir / f"launcher{self.suffix}.log"
        out = []
        for line in path.read_text(errors="replace").splitlines() if path.exists() else []:
            m = STAMP.match(line)
            if m:
                out.append((time.mktime(time.strptime(m[1], "%Y-%m-%d %H:%M:%S")) + int(m[2]) / 1000, m[3]))
        return out

    def event(self, pattern: str, after: float = 0.0) -> tuple[float, str] | None:
        rx = re.compile(pattern)  # log stamps are truncated to the millisecond: a 5 ms tolerance
        return next(((max(t, after), m) for t, m in self.events() if t >= after - 0.005 and rx.search(m)), None)

    def wait_event(self, pattern: str, timeout: float, after: float = 0.0) -> tuple[float, str]:
        found = wait_for(lambda: self.event(pattern, after), timeout, f"launcher event /{pattern}/", self)
        assert found is not None
        return found

    def beat(self, rank: int) -> dict[str, Any] | None:
        try:
            return json.loads((self.run_dir / "heartbeats" / f"rank{rank}.json").read_text().strip() or "null")
        except (OSError, ValueError):
            return None

    def wait_step(self, step: int, timeout: float = 120.0, rank: int = 0) -> None:
        wait_for(
            lambda: (b := self.beat(rank)) and b.get("phase") == "train" and b["step"] >= step,
            timeout,
            f"rank {rank} to complete step {step}",
            self,
        )

    def workers(self, node: int = 0) -> list[dict[str, Any]]:
        try:
            doc = json.loads((self.run_dir / f"workers.node{node}.json").read_text())
        except (OSError, ValueError):
            return []
        return [w for w in doc["workers"] if w["alive"]]

    def pid_of_rank(self, rank: int, node: int = 0) -> int:
        workers = wait_for(lambda: [w for w in self.workers(node) if w["rank"] == rank], 60, f"rank {rank}", self)
        return int(workers[0]["pid"])

    def finish(self, timeout: float = 120.0) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"the launcher did not finish within {timeout} s:\n{self.text()[-3000:]}") from None

    def orphans(self) -> int:
        """Processes of this run still alive a moment after the launcher exited (the guardian's sweep included)."""
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and processes_mentioning(str(self.work)):
            time.sleep(0.2)
        left = processes_mentioning(str(self.work))
        for pid in left:  # never leave them to the next test
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return len(left)


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, run: Run | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if run is not None and run.proc.poll() is not None:
            value = predicate()
            if value:
                return value
            raise AssertionError(f"the launcher exited ({run.proc.returncode}) before {what}:\n{run.text()[-3000:]}")
        time.sleep(0.05)
    raise AssertionError(
        f"timed out after {timeout} s waiting for {what}" + (f":\n{run.text()[-3000:]}" if run else "")
    )


def steps_lost(line: str) -> int | None:
    m = re.search(r"(\d+) step\(s\) lost", line)
    return int(m[1]) if m else None


# Environments: a small tmpfs, two hosts, a stand-in scontrol ----------------------------------------------------
def need_root() -> str | None:
    return None if os.geteuid() == 0 else "needs root (mount, ip netns)"


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True, timeout=30)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], timeout=30, check=False)


def fill(directory: Path) -> None:
    """Write a file into `directory` until its disk is full."""
    with open(directory / "filler", "wb") as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * (1 << 20))
            f.flush()


ADDRS = ("10.231.0.1", "10.231.0.2")
IFNAME = "tpveth"


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


def netns_unavailable() -> str | None:
    if need_root():
        return need_root()
    if shutil.which("ip") is None:
        return "needs iproute2's `ip`"
    probe = f"tpchk{os.getpid()}"
    done = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if done.returncode:
        return f"`ip netns add` does not work here: {done.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


@contextlib.contextmanager
def two_hosts(tag: str) -> Iterator[tuple[str, str]]:
    """Two network namespaces joined by a veth pair, ADDRS[0] and ADDRS[1] on interface IFNAME in each."""
    ns, veth = (f"tp{tag}n0", f"tp{tag}n1"), (f"tp{tag}va", f"tp{tag}vb")
    try:
        for name in ns:
            ip("netns", "add", name)
        ip("link", "add", veth[0], "type", "veth", "peer", "name", veth[1])
        for name, end, addr in zip(ns, veth, ADDRS, strict=True):
            ip("link", "set", end, "netns", name)
            ip("-n", name, "link", "set", end, "name", IFNAME)
            ip("-n", name, "addr", "add", f"{addr}/24", "dev", IFNAME)
            ip("-n", name, "link", "set", "lo", "up")
            ip("-n", name, "link", "set", IFNAME, "up")
        yield ns
    finally:
        for name in ns:  # deleting a namespace deletes its end of the veth pair, and with it the pair
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


def netem_available(ns: str) -> bool:
    done = subprocess.run(
        ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", IFNAME, "root", "netem", "delay", "1ms"],
        capture_output=True,
        text=True,
    )
    subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", IFNAME, "root"], capture_output=True)
    return done.returncode == 0


def stand_in_scontrol(bin_dir: Path, record: Path) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {record}\n')
    (bin_dir / "scontrol").chmod(0o755)
