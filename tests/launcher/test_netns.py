"""Two hosts on one machine: two network namespaces joined by a veth pair (10.231.0.1 and 10.231.0.2, plus
loopback; no other address is ever a target). A 2-node x 1-process plan runs across them via c10d rendezvous,
once with one launcher per node (--node-rank) and once from the head, which reaches the other node "over ssh"
(a test double for ssh that enters the namespace owning the address)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, free_port, launcher_env, losses, processes_mentioning, write_plan
from make_plan import tiny_plan

from launcher.profile import OPS, validate

sys.path.insert(0, str(ROOT / "benchmarks"))
# Two namespaces joined by a veth pair, ADDRS on IFNAME (the same name in both, so one GLOO_SOCKET_IFNAME fits)
from faultlib import ADDRS, IFNAME, netns_unavailable, two_hosts

pytestmark = [pytest.mark.netns, pytest.mark.slow, pytest.mark.timeout(180)]

FAKE_SSH = """#!/bin/sh
# ssh test double: run the remote command in the namespace that owns the host's address.
while [ $# -gt 0 ]; do
  case "$1" in -o|-p|-i|-l) shift 2 ;; -*) shift ;; *) break ;; esac
done
host="$1"; shift
ns=$(printf '%s\\n' "$FAKE_SSH_NETNS" | tr ',' '\\n' | sed -n "s/^$host=//p")
[ -n "$ns" ] || { echo "fake ssh: unknown host $host" >&2; exit 255; }
exec ip netns exec "$ns" sh -c "$*"
"""


@pytest.fixture
def namespaces() -> Iterator[tuple[str, str]]:
    reason = netns_unavailable()
    if reason:
        pytest.skip(reason)
    with two_hosts(str(os.getpid() % 100000)) as ns:
        yield ns


def two_node_plan(tmp_path: Path, backend: str = "torchrun") -> Path:
    plan = tiny_plan(
        "twonode",
        nodes=2,
        procs=1,
        steps=6,
        hosts=ADDRS,
        master_addr=ADDRS[0],
        backend=backend,
        master_port=free_port(),
        env={"GLOO_SOCKET_IFNAME": IFNAME},
    )
    return write_plan(tmp_path, plan)


def launcher_in(ns: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["ip", "netns", "exec", ns, sys.executable, "-m", "launcher", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env=env or launcher_env(),
    )


@pytest.mark.parametrize("backend", ["torchrun", "deepspeed"])
def test_one_launcher_per_node(tmp_path: Path, namespaces: tuple[str, str], backend: str) -> None:
    plan, run_dir = two_node_plan(tmp_path, backend), tmp_path / "run"
    procs = [
        launcher_in(ns, "run", str(plan), "--node-rank", str(k), "--run-dir", str(run_dir))
        for k, ns in enumerate(namespaces)
    ]
    outputs = [p.communicate(timeout=150)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    values = losses(outputs[0])
    assert len(values) == 6 and values[-1] < values[0]
    for k in (0, 1):
        log = (run_dir / f"launcher.node{k}.log").read_text()
        assert "job finished: exit code 0" in log
        assert (run_dir / f"commands.node{k}.json").is_file()
    assert not processes_mentioning(str(tmp_path))


def test_head_starts_the_other_node_over_ssh(tmp_path: Path, namespaces: tuple[str, str]) -> None:
    plan, run_dir = two_node_plan(tmp_path), tmp_path / "run"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(FAKE_SSH)
    (bin_dir / "ssh").chmod(0o755)
    env = launcher_env(
        PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        FAKE_SSH_NETNS=",".join(f"{a}={n}" for a, n in zip(ADDRS, namespaces, strict=True)),
    )
    proc = launcher_in(namespaces[0], "run", str(plan), "--run-dir", str(run_dir), env=env)
    out = proc.communicate(timeout=150)[0]
    assert proc.returncode == 0, out[-4000:]
    assert len(losses(out)) == 6
    log = (run_dir / "launcher.log").read_text()
    assert "node 1: started pid" in log and f"on {ADDRS[1]} over ssh" in log
    assert f"on {ADDRS[0]} over ssh" not in log  # the head runs its own node directly
    assert "--rdzv-conf is_host=0" in (run_dir / "logs" / "node1" / "agent.log").read_text()
    assert not processes_mentioning(str(tmp_path))


def test_probe_measures_collectives_across_the_nodes(tmp_path: Path, namespaces: tuple[str, str]) -> None:
    plan, run_dir, out = two_node_plan(tmp_path), tmp_path / "run", tmp_path / "profile.json"
    procs = [
        launcher_in(ns, "probe", str(plan), "--node-rank", str(k), "--run-dir", str(run_dir), "--output", str(out))
        for k, ns in enumerate(namespaces)
    ]
    outputs = [p.communicate(timeout=150)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    profile = json.loads(out.read_text())
    validate(profile)
    assert profile["num_nodes"] == 2 and profile["hosts"] == list(ADDRS)
    inter = {(c["op"], c["ranks"]) for c in profile["collectives"] if c["scope"] == "inter_node"}
    assert inter == {(op, 2) for op in OPS}
    assert not any(c["scope"] == "intra_node" for c in profile["collectives"])  # one process per node
