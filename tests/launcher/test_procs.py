"""/proc helpers on real processes: the tree, workers by RANK, exit statuses of zombies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from launcher import procs

SLEEPER = "import time; time.sleep(30)"


def test_workers_are_the_topmost_descendants_with_rank() -> None:
    # parent (no RANK) -> worker (RANK=3) -> its child (inherits RANK=3, not a worker)
    code = (
        f"import os, subprocess, sys, time\nc = subprocess.Popen([sys.executable, '-c', {SLEEPER!r}])\ntime.sleep(30)\n"
    )
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import os, subprocess, sys, time\n"
            f"subprocess.Popen([sys.executable, '-c', {code!r}], "
            f"env={{**os.environ, 'RANK': '3', 'LOCAL_RANK': '1'}})\n"
            f"time.sleep(30)\n",
        ]
    )
    try:
        deadline = time.monotonic() + 10
        while len(procs.descendants(parent.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(procs.descendants(parent.pid)) == 2
        tree = procs.children_map()  # the full /proc scan agrees with the per-task children files
        assert sorted(procs.descendants(parent.pid)) == sorted(tree[parent.pid] + tree[tree[parent.pid][0]])
        workers = procs.find_workers(parent.pid)
        assert [(w.rank, w.local_rank) for w in workers] == [(3, 1)]
        assert procs.parent_of(workers[0].pid) == parent.pid
    finally:
        for pid in reversed([parent.pid, *procs.descendants(parent.pid)]):
            os.kill(pid, signal.SIGKILL)
        parent.wait()


def test_zombie_status_and_descriptions() -> None:
    child = subprocess.Popen([sys.executable, "-c", SLEEPER])
    assert procs.zombie_status(child.pid) is None  # running
    os.kill(child.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while procs.zombie_status(child.pid) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    status = procs.zombie_status(child.pid)  # not reaped yet: the kernel keeps the wait status
    assert status is not None and procs.describe_status(status) == "killed by signal 9 (SIGKILL)"
    child.wait()
    assert procs.zombie_status(child.pid) is None  # reaped: gone
    assert procs.describe_returncode(3) == "exited with code 3"
    assert procs.describe_returncode(-15) == "killed by signal 15 (SIGTERM)"
    assert procs.describe_status(None).startswith("exited (status already collected")


def test_nothing_below_a_known_worker_is_a_worker() -> None:
    """A rank whose main thread has exited (state Z) while another thread still runs shows its children, which
    inherit RANK: a rescan took its helper for a worker of a restarted group, and a successful job was reported as
    failed (QA, 2026-12-06). The worker watch passes the workers it knows; nothing below them is a new one."""
    rank = (
        "import ctypes, subprocess, threading, time\n"
        "def helper():\n"
        f"    subprocess.Popen([{sys.executable!r}, '-c', {SLEEPER!r}])\n"
        "    time.sleep(30)\n"
        "threading.Thread(target=helper).start()\n"
        "time.sleep(0.3)\n"
        "ctypes.CDLL(None).pthread_exit(None)\n"
    )
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import os, subprocess, sys, time\n"
            f"env = {{**os.environ, 'RANK': '0', 'LOCAL_RANK': '0'}}\n"
            f"subprocess.Popen([sys.executable, '-c', {rank!r}], env=env)\n"
            f"time.sleep(30)\n",
        ]
    )
    try:
        deadline = time.monotonic() + 10
        workers: list[procs.Worker] = []
        while not workers and time.monotonic() < deadline:
            workers = procs.find_workers(parent.pid)
            time.sleep(0.02)
        assert [w.rank for w in workers] == [0]
        worker = workers[0]
        while len(procs.descendants(parent.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        while (procs._stat_fields(worker.pid) or ["", "", ""])[2] != "Z" and time.monotonic() < deadline:
            time.sleep(0.05)  # its main thread is gone: the leader shows Z while the helper thread runs
        helper = [w for w in procs.find_workers(parent.pid) if w.pid != worker.pid]
        assert helper and procs.parent_of(helper[0].pid) == worker.pid  # what a rescan took for a new worker
        assert procs.find_workers(parent.pid, known={worker.pid}) == []
    finally:
        for pid in reversed([parent.pid, *procs.descendants(parent.pid)]):
            os.kill(pid, signal.SIGKILL)
        parent.wait()
