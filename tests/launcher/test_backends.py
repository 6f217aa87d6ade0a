"""Every backend returns the same list[Command]; asserted on argv and env, nothing is run."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from make_plan import tiny_plan

from launcher.backends import BACKENDS, build
from launcher.backends.slurm import expand_nodelist
from launcher.command import Command
from launcher.context import LaunchContext
from launcher.spec import PlanError

CALLER = {
    "PATH": "/usr/bin",
    "HOME": "/home/u",
    "SECRET_TOKEN": "x",
    "NCCL_DEBUG": "INFO",
    "SLURM_JOB_ID": "7",
    "SLURM_JOB_NODELIST": "gpu[01-02]",
    "LD_PRELOAD": "/evil.so",
}


def ctx_for(plan, backend: str | None = None, node_rank: int | None = None, caller=None, extra=()):  # type: ignore[no-untyped-def]
    env = dict(CALLER) if caller is None else caller
    if backend != "slurm":
        env = {k: v for k, v in env.items() if not k.startswith("SLURM_")}
    return LaunchContext(
        plan=plan,
        plan_dir=Path("/plans"),
        run_dir=Path("/runs/r1"),
        backend=backend or plan.job.backend,
        node_rank=node_rank,
        extra_args=tuple(extra),
        caller_env=env,
    )


def after(argv: tuple[str, ...], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_all_backends_return_commands() -> None:
    for name in BACKENDS:
        plan = tiny_plan(backend=name, nodes=2, procs=2, hosts=("n0", "n1"), master_addr="n0")
        caller = {**CALLER} if name == "slurm" else None
        _, commands = build(ctx_for(plan, name, caller=caller))
        assert commands and all(isinstance(c, Command) for c in commands)


def test_torchrun_single_node_is_standalone() -> None:
    plan = tiny_plan(procs=2, max_restarts=3, grace_period_s=7.5)
    (cmd,) = build(ctx_for(plan))[1]
    argv = cmd.argv
    assert argv[:3] == (plan.entrypoint.python or argv[0], "-m", "torch.distributed.run")
    assert "--standalone" in argv and "--rdzv-endpoint" not in argv
    assert after(argv, "--nproc-per-node") == "2" and after(argv, "--nnodes") == "1"
    assert after(argv, "--max-restarts") == "3" and after(argv, "--shutdown-timeout") == "8"
    assert after(argv, "--log-dir") == "/runs/r1/logs/node0"
    assert argv[argv.index("--local-ranks-filter") + 2] == plan.entrypoint.script
    assert after(argv, "--deepspeed_config") == "/runs/r1/ds_config.json"  # {run_dir} substituted
    assert cmd.host == "localhost" and cmd.workers == 2 and cmd.cwd == "/plans"


def test_torchrun_multi_node_uses_c10d_with_the_head_as_store_host() -> None:
    plan = tiny_plan(nodes=2, procs=4, hosts=("10.0.0.1", "10.0.0.2"), master_addr="10.0.0.1", master_port=29999)
    commands = build(ctx_for(plan))[1]
    assert [c.host for c in commands] == ["10.0.0.1", "10.0.0.2"]
    for rank, cmd in enumerate(commands):
        argv = cmd.argv
        assert "--standalone" not in argv and after(argv, "--rdzv-backend") == "c10d"
        assert after(argv, "--rdzv-endpoint") == "10.0.0.1:29999" and after(argv, "--rdzv-id") == "tiny"
        assert after(argv, "--rdzv-conf") == f"is_host={int(rank == 0)},join_timeout=600"
        assert after(argv, "--local-addr") == plan.world.hosts[rank]
        assert after(argv, "--nnodes") == "2" and after(argv, "--nproc-per-node") == "4"
    assert [c.console for c in commands] == [True, False]


def test_per_node_mode_builds_only_that_node() -> None:
    plan = tiny_plan(nodes=2, procs=1, master_addr="10.0.0.1")
    (cmd,) = build(ctx_for(plan, node_rank=1))[1]
    assert cmd.node_rank == 1 and cmd.console
    assert after(cmd.argv, "--rdzv-conf") == "is_host=0,join_timeout=600" and "--local-addr" not in cmd.argv


def test_numa_binding_and_extra_args() -> None:
    plan = tiny_plan()
    plan = replace(plan, job=replace(plan.job, numa_binding="socket"))
    (cmd,) = build(ctx_for(plan, extra=("--lr", "0.1")))[1]
    assert after(cmd.argv, "--numa-binding") == "socket" and cmd.argv[-2:] == ("--lr", "0.1")
    (ds,) = build(ctx_for(plan, "deepspeed"))[1]
    assert "--bind_cores_to_rank" in ds.argv


def test_environment_is_explicit() -> None:
    plan = tiny_plan(env={"NCCL_SOCKET_IFNAME": "eth0", "WHERE": "{run_dir}/x"})
    (cmd,) = build(ctx_for(plan))[1]
    assert cmd.env["NCCL_SOCKET_IFNAME"] == "eth0" and cmd.env["WHERE"] == "/runs/r1/x"
    assert cmd.env["PATH"] == "/usr/bin" and cmd.env["HOME"] == "/home/u"
    assert cmd.env["OMP_NUM_THREADS"] == "1" and cmd.env["TRAINPLAN_RUN_DIR"] == "/runs/r1"
    for absent in ("SECRET_TOKEN", "NCCL_DEBUG", "LD_PRELOAD", "SLURM_JOB_ID"):
        assert absent not in cmd.env
    assert set(cmd.env) == {
        "PATH",
        "HOME",
        "OMP_NUM_THREADS",
        "PYTHONUNBUFFERED",
        "TRAINPLAN_RUN_DIR",
        "DS_ACCELERATOR",
        "NCCL_SOCKET_IFNAME",
        "WHERE",
    }  # one node: the workers share the agent's store (no TORCH_DISABLE_SHARE_RDZV_TCP_STORE, it slows the start)


def test_multi_node_agents_get_a_fresh_store_per_round() -> None:
    """Several nodes: every rendezvous round gets a fresh store (launcher/backends/torchrun.py), under torchrun and
    under Slurm's srun; the plan's explicit value wins, on one node as on several."""
    for backend in ("torchrun", "slurm"):
        plan = tiny_plan(backend=backend, nodes=2, procs=2, hosts=("n0", "n1"), master_addr="n0")
        commands = build(ctx_for(plan, backend, node_rank=0 if backend == "torchrun" else None))[1]
        assert [c.env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] for c in commands] == ["1"] * len(commands)
    for nodes in (1, 2):
        plan = tiny_plan(nodes=nodes, hosts=("n0", "n1")[:nodes], master_addr="n0",
                         env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0"})  # fmt: skip
        own = build(ctx_for(plan, node_rank=0))[1][0]
        assert own.env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "0"


def test_deepspeed_single_node() -> None:
    plan = tiny_plan(backend="deepspeed", procs=2, master_port=29700)
    backend, (cmd,) = build(ctx_for(plan))
    argv = cmd.argv
    assert argv[1:3] == ("-m", "deepspeed.launcher.runner")
    assert after(argv, "--hostfile") == "/runs/r1/hostfile.generated"
    assert backend.derived_files(ctx_for(plan)) == {"hostfile.generated": "localhost slots=2\n"}
    assert after(argv, "--num_nodes") == "1" and after(argv, "--num_gpus") == "2"
    assert after(argv, "--master_addr") == "127.0.0.1" and after(argv, "--master_port") == "29700"
    assert "--no_ssh_check" in argv and "--no_ssh" not in argv
    assert cmd.follow == "/runs/r1/logs/node0/ranks/*_rank0.log"


def test_deepspeed_multi_node_pdsh_and_per_node() -> None:
    plan = tiny_plan(backend="deepspeed", nodes=2, procs=2, hosts=("a", "b"), master_addr="a")
    ctx = ctx_for(plan)
    backend, (cmd,) = build(ctx)
    assert after(cmd.argv, "--launcher") == "pdsh" and "--no_ssh_check" not in cmd.argv
    assert cmd.workers == 0  # pdsh starts even the head's ranks over ssh: none are the launcher's descendants
    files = backend.derived_files(ctx)
    assert files["hostfile.generated"] == "a slots=2\nb slots=2\n"
    assert "DS_ACCELERATOR=cpu\n" in files["deepspeed_env.generated"]
    assert cmd.env["DS_ENV_FILE"] == "/runs/r1/deepspeed_env.generated"
    (node1,) = build(ctx_for(plan, node_rank=1))[1]
    assert "--no_ssh" in node1.argv and after(node1.argv, "--node_rank") == "1" and node1.host == "b"
    assert node1.workers == 2
    assert node1.follow and node1.follow.endswith("*_rank2.log")  # local rank 0 of node 1 is global rank 2


def test_deepspeed_uses_the_rendered_hostfile_when_the_plan_has_one() -> None:
    plan = tiny_plan(backend="deepspeed")
    plan = replace(plan, files={**plan.files, "hostfile": "localhost slots=2\n"})
    backend, (cmd,) = build(ctx_for(plan))
    assert after(cmd.argv, "--hostfile") == "/runs/r1/hostfile" and backend.derived_files(ctx_for(plan)) == {}


def test_slurm_inside_an_allocation_sruns_one_torchrun_per_node() -> None:
    plan = tiny_plan(backend="slurm", nodes=2, procs=4, master_addr="ignored-head", master_port=29555)
    (cmd,) = build(ctx_for(plan, "slurm"))[1]
    argv = cmd.argv
    assert argv[0] == "srun" and after(argv, "--nodes") == "2" and after(argv, "--ntasks-per-node") == "1"
    assert after(argv, "--nodelist") == "gpu01,gpu02" and "--kill-on-bad-exit=1" in argv
    assert after(argv, "--rdzv-endpoint") == "gpu01:29555" and after(argv, "--rdzv-id") == "7"
    assert "--rdzv-conf" not in argv  # the same argv on every node
    assert cmd.env["SLURM_JOB_ID"] == "7" and "SECRET_TOKEN" not in cmd.env and cmd.node_rank is None
    # a site default of one CPU per task pinned a node's torchrun and all its ranks to one core (QA, 2026-12-06)
    assert "--cpu-bind=none" in argv and not any(a.startswith("--cpus-per-task") for a in argv)  # Slurm says none
    for caller in ({"SLURM_CPUS_ON_NODE": "64"}, {"SLURM_JOB_CPUS_PER_NODE": "64(x2)", "SLURM_CPUS_PER_TASK": "1"}):
        (cmd,) = build(ctx_for(plan, "slurm", caller={**CALLER, **caller}))[1]
        assert "--cpus-per-task=64" in cmd.argv and cmd.argv.index("--cpus-per-task=64") < cmd.argv.index(
            "torch.distributed.run"
        )


def test_slurm_refuses_an_allocation_that_is_too_small() -> None:
    plan = tiny_plan(backend="slurm", nodes=2, procs=1, master_addr="h")
    caller = {**CALLER, "SLURM_JOB_NODELIST": "gpu07"}
    with pytest.raises(PlanError, match=r"allocation has 1 node\(s\) .* world.num_nodes is 2"):
        build(ctx_for(plan, "slurm", caller=caller))


def test_slurm_outside_an_allocation_submits_the_rendered_script() -> None:
    plan = tiny_plan(backend="slurm")
    caller = {"PATH": "/usr/bin"}
    with pytest.raises(PlanError, match=r"files\['sbatch.sh'\]"):
        build(ctx_for(plan, "slurm", caller=caller))
    plan = replace(plan, files={**plan.files, "sbatch.sh": "#!/bin/bash\n#SBATCH -N 1\nsrun true\n"})
    (cmd,) = build(ctx_for(plan, "slurm", caller=caller))[1]
    assert cmd.argv == ("sbatch", "--wait", "/runs/r1/sbatch.sh") and cmd.cwd == "/runs/r1"


def test_node_rank_placeholder_is_refused_for_one_command_on_every_node() -> None:
    plan = tiny_plan(backend="slurm", extra_args=("--tag", "{node_rank}"))
    with pytest.raises(PlanError, match=r"\{node_rank\} is not known"):
        build(ctx_for(plan, "slurm"))
    (cmd,) = build(ctx_for(tiny_plan(extra_args=("--tag", "n{node_rank}"))))[1]
    assert after(cmd.argv, "--tag") == "n0"


@pytest.mark.parametrize(
    ("nodelist", "hosts"),
    [
        ("gpu01", ["gpu01"]),
        ("gpu[01-03,07],login1", ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]),
        ("r[1-2]-n[8-9]", ["r1-n8", "r1-n9", "r2-n8", "r2-n9"]),
        ("a[009-011]", ["a009", "a010", "a011"]),
    ],
)
def test_expand_nodelist(nodelist: str, hosts: list[str]) -> None:
    assert expand_nodelist(nodelist) == hosts
