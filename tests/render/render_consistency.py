"""Read every artifact back the way its tool reads it and check that they describe the same job.

World size, nodes, GPUs per node, batch sizes, parallel sizes and environment are read independently from each
file (scripts are run with recorders, argv parsed by torch's / DeepSpeed's parsers, YAML and JSON parsed) and
compared with each other; none of them is taken from the renderer's own data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from megatron_check import Flags, args_file_words
from script_runner import Call, job_env, make_fakebin, run, sbatch_nodes

from app.render import Artifacts, write_artifacts
from app.render.env import TORCHRUN_ONLY

K8S_DIR = "/etc/trainplan"


@dataclass
class Seen:
    """One fact as each file states it: source -> value."""

    values: dict[str, object] = field(default_factory=dict)

    def add(self, source: str, value: object) -> None:
        self.values[source] = value

    def agree(self, what: str) -> object:
        distinct = {json.dumps(v, sort_keys=True) for v in self.values.values()}
        assert len(distinct) == 1, f"{what} disagrees between files: {self.values}"
        return next(iter(self.values.values()))


def torchrun_world(call: Call) -> tuple[int, int]:
    from torch.distributed.run import get_args_parser

    assert call.argv[:2] == ["-m", "torch.distributed.run"], call.argv[:3]
    args = get_args_parser().parse_args(call.argv[2:])
    return int(args.nnodes), int(args.nproc_per_node)


def deepspeed_world(call: Call) -> tuple[int, int, dict[str, int], list[str]]:
    from deepspeed.launcher.runner import fetch_hostfile, parse_args

    assert call.argv[:2] == ["-m", "deepspeed.launcher.runner"], call.argv[:3]
    args = parse_args(call.argv[2:])
    pool = fetch_hostfile(args.hostfile)
    assert pool, "DeepSpeed read no hosts from the hostfile"
    return args.num_nodes, args.num_gpus, dict(pool), [args.user_script, *args.user_args]


SOCKET_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")


class Observed:
    def __init__(self) -> None:
        self.world, self.nodes, self.gpus = Seen(), Seen(), Seen()
        self.gbs, self.mbs, self.env = Seen(), Seen(), Seen()
        self.parallel, self.zero = Seen(), Seen()
        self.megatron: Flags | None = None
        self.trainer: Flags | None = None
        self.ds: dict[str, Any] | None = None
        self.worker_env: dict[str, str] = {}
        self.trainer_argv: list[str] = []
        self.pod_env: dict[str, str] | None = None  # the PyTorchJob container's
        self.ds_env: dict[str, str] | None = None  # deepspeed.sh's: the others' but torchrun's own variables
        self.pod_network = False  # the pods on the pod network (not hostNetwork)


def _launchers(arts: Artifacts, d: Path, bin_dir: Path, ob: Observed) -> dict[str, list[str]]:
    workers: dict[str, list[str]] = {}
    nodes = sbatch_nodes(arts.files["sbatch.sh"])
    env = {"NODE_RANK": "0", "MASTER_ADDR": "10.9.9.9"}
    (tr,) = run(d / "torchrun.sh", bin_dir, env=env)
    (sb,) = run(
        d / "sbatch.sh",
        bin_dir,
        env={
            "SLURM_SUBMIT_DIR": str(d),
            "SLURM_JOB_NUM_NODES": str(nodes),
            "SLURM_JOB_NODELIST": "n[0-9]",
            "SLURM_JOB_ID": "42",
            "SLURM_CPUS_ON_NODE": "96",
        },
    )
    assert sb.prog == "srun" and "--kill-on-bad-exit=1" in sb.argv and "--cpu-bind=none" in sb.argv
    cpus = sb.argv[sb.argv.index("--cpus-per-task") + 1]  # the whole node, not a site default of one CPU
    assert cpus == str(arts_option(arts, "slurm_cpus_per_task") or 96), sb.argv
    srun_nodes = sb.argv[sb.argv.index("--nodes") + 1]
    py = sb.argv.index("python")
    for name, call, argv in (("torchrun.sh", tr, tr.argv), ("sbatch.sh", sb, sb.argv[py + 1 :])):
        n, g = torchrun_world(Call(call.prog, call.cwd, argv, call.env))
        ob.nodes.add(name, n)
        ob.gpus.add(name, g)
        ob.world.add(name, n * g)
        ob.env.add(name, job_env(call))
        workers[name] = _worker_argv(argv)
    ob.nodes.add("sbatch.sh #SBATCH --nodes", nodes)
    ob.nodes.add("sbatch.sh srun --nodes", int(srun_nodes))
    if "deepspeed.sh" in arts.files:
        (ds,) = run(d / "deepspeed.sh", bin_dir, env=env)
        n, g, pool, user = deepspeed_world(ds)
        ob.nodes.add("deepspeed.sh", n)
        ob.nodes.add("hostfile", len(pool))
        ob.gpus.add("deepspeed.sh", g)
        ob.world.add("hostfile", sum(pool.values()))
        ob.ds_env = job_env(ds)
        workers["deepspeed.sh"] = user
    return workers


def arts_option(arts: Artifacts, name: str) -> str | None:
    """A value the sbatch header states (#SBATCH --cpus-per-task=N for slurm_cpus_per_task)."""
    flag = {"slurm_cpus_per_task": "--cpus-per-task"}[name]
    for line in arts.files["sbatch.sh"].splitlines():
        if line.startswith(f"#SBATCH {flag}="):
            return line.split("=", 1)[1]
    return None


def _worker_argv(argv: list[str]) -> list[str]:
    """What torchrun runs per rank: the script (after --no-python, or the first positional) and its args."""
    from torch.distributed.run import get_args_parser

    args = get_args_parser().parse_args(argv[2:])
    return [args.training_script, *args.training_script_args]


def _pytorchjob(text: str, ob: Observed) -> list[str]:
    docs = list(yaml.safe_load_all(text))
    assert [d["kind"] for d in docs][:: len(docs) - 1] == ["ConfigMap", "PyTorchJob"]
    job = docs[-1]["spec"]
    replicas = sum(spec["replicas"] for spec in job["pytorchReplicaSpecs"].values())
    first = next(iter(job["pytorchReplicaSpecs"].values()))
    container = first["template"]["spec"]["containers"][0]
    assert container["name"] == "pytorch"
    resources = container["resources"]
    assert resources["requests"] == resources["limits"], "Guaranteed QoS: requests = limits"
    gpus = resources["limits"].get("nvidia.com/gpu", resources["limits"].get("amd.com/gpu"))
    assert gpus in (None, job["nprocPerNode"]), gpus
    ob.nodes.add("pytorchjob replicas", replicas)
    if "elasticPolicy" in job:
        policy = job["elasticPolicy"]
        ob.nodes.add("pytorchjob elasticPolicy minReplicas", policy["minReplicas"])
        ob.nodes.add("pytorchjob elasticPolicy maxReplicas", policy["maxReplicas"])
    ob.gpus.add("pytorchjob nprocPerNode", int(job["nprocPerNode"]))
    call = Call("python", "", container["command"][1:] + container["args"], {})
    n, g = torchrun_world(call)
    ob.nodes.add("pytorchjob torchrun", n)
    ob.gpus.add("pytorchjob torchrun", g)
    ob.pod_env = {e["name"]: e["value"] for e in container.get("env", [])}
    ob.pod_network = not first["template"]["spec"].get("hostNetwork", False)
    return _worker_argv(call.argv)


def observe(arts: Artifacts, d: Path) -> Observed:
    """Write the files to d, run and parse them; every fact keyed by the file it came from."""
    write_artifacts(arts, d)
    bin_dir = make_fakebin(d.parent)
    ob = Observed()
    workers = {**_launchers(arts, d, bin_dir, ob), "pytorchjob.yaml": _pytorchjob(arts.files["pytorchjob.yaml"], ob)}
    if "train.sh" in arts.files:
        _megatron(arts, d, bin_dir, ob)
        for name, argv in workers.items():
            assert argv == [f"{K8S_DIR if name == 'pytorchjob.yaml' else d}/train.sh"], (name, argv)
    else:
        _trainer(workers, d, ob)
    if "ds_config.json" in arts.files:
        _deepspeed_config(arts, ob)
    if "plan.json" in arts.files:
        _plan_json(arts, ob)
    return ob


def _trainer(workers: dict[str, list[str]], d: Path, ob: Observed) -> None:
    """The DeepSpeed trainer's argv is the same from every launcher, up to where ds_config.json lives."""
    seen = Seen()
    for name, argv in workers.items():
        base = K8S_DIR if name == "pytorchjob.yaml" else str(d)
        seen.add(name, [w.replace(base, "<files>") for w in argv])
    argv = seen.agree("the training script's arguments")
    assert isinstance(argv, list)
    ob.trainer_argv = argv
    ob.trainer = Flags(argv[1:])
    assert ob.trainer.one("--deepspeed_config") == "<files>/ds_config.json"
    ob.gbs.add("trainer args", ob.trainer.int("--global-batch-size"))
    ob.mbs.add("trainer args", ob.trainer.int("--micro-batch-size"))


def _megatron(arts: Artifacts, d: Path, bin_dir: Path, ob: Observed) -> None:
    (call,) = run(d / "train.sh", bin_dir, args=("--extra-from-agent",))
    words = args_file_words(arts.files["megatron_args.txt"])
    assert call.argv[1 : 1 + len(words)] == words, "train.sh does not pass megatron_args.txt through unchanged"
    assert call.argv[-1] == "--extra-from-agent"
    rest = call.argv[1 + len(words) : -1]
    if "ds_config.json" in arts.files:
        assert rest == ["--deepspeed_config", str(d / "ds_config.json")]
    fl = Flags(words)
    ob.megatron, ob.worker_env = fl, job_env(call)
    ob.env.add("train.sh", job_env(call))
    ob.gbs.add("megatron_args", fl.int("--global-batch-size"))
    ob.mbs.add("megatron_args", fl.int("--micro-batch-size"))
    sizes = {
        "tp": fl.int("--tensor-model-parallel-size", 1),
        "pp": fl.int("--pipeline-model-parallel-size", 1),
        "cp": fl.int("--context-parallel-size", 1),
        "ep": fl.int("--expert-model-parallel-size", 1),
    }
    ob.parallel.add("megatron_args", sizes)
    if fl.has("--zero-stage"):
        ob.zero.add("megatron_args", fl.int("--zero-stage"))


def _deepspeed_config(arts: Artifacts, ob: Observed) -> None:
    cfg = json.loads(arts.files["ds_config.json"])
    ob.ds = cfg
    ob.gbs.add("ds_config", cfg["train_batch_size"])
    ob.mbs.add("ds_config", cfg["train_micro_batch_size_per_gpu"])
    ob.zero.add("ds_config", cfg["zero_optimization"]["stage"])


def _plan_json(arts: Artifacts, ob: Observed) -> None:
    from launcher.spec import loads

    plan = loads(arts.files["plan.json"])
    w, p = plan.world, plan.parallel
    ob.world.add("plan.json", w.world_size)
    ob.nodes.add("plan.json", w.num_nodes)
    ob.gpus.add("plan.json", w.gpus_per_node)
    ob.gbs.add("plan.json", p.global_batch_size)
    ob.mbs.add("plan.json", p.micro_batch_size)
    if "ds_config.json" in arts.files:
        ob.zero.add("plan.json", p.zero_stage)
    ob.env.add("plan.json", dict(plan.env))
    args = [a.replace("{run_dir}", "<files>") for a in plan.entrypoint.args]
    if ob.megatron is not None:
        ob.parallel.add("plan.json", {"tp": p.tp, "pp": p.pp, "cp": p.cp, "ep": p.ep})
        words = args_file_words(arts.files["megatron_args.txt"])
        tail = ["--deepspeed_config", "<files>/ds_config.json"] if "ds_config.json" in arts.files else []
        assert args == words + tail, "plan.json's arguments differ from megatron_args.txt"
    else:
        assert args == ob.trainer_argv[1:], "plan.json's arguments differ from the launch scripts'"


def check(ob: Observed) -> dict[str, Any]:
    """Every fact agrees across files, and the batch identity holds with the data-parallel size they imply."""
    nodes, gpus, world = ob.nodes.agree("node count"), ob.gpus.agree("GPUs per node"), ob.world.agree("world size")
    assert isinstance(nodes, int) and isinstance(gpus, int) and world == nodes * gpus, (nodes, gpus, world)
    gbs, mbs = ob.gbs.agree("global batch size"), ob.mbs.agree("micro-batch size")
    env = ob.env.agree("environment")
    assert isinstance(env, dict)
    if ob.ds_env is not None:  # DeepSpeed's launcher reads no TORCH_ELASTIC_* (deepspeed/launcher/launch.py)
        assert ob.ds_env == {k: v for k, v in env.items() if k not in TORCHRUN_ONLY}, ob.ds_env
    if ob.pod_env is not None:
        # on the pod network a pod has eth0, not the hosts' socket interface: the pods leave that out (k8s.pod_facts)
        hosts_only = ob.pod_network and env.get("NCCL_SOCKET_IFNAME", "eth0").lstrip("=") != "eth0"
        expected = {k: v for k, v in env.items() if not (hosts_only and k in SOCKET_VARS)}
        assert ob.pod_env == expected, f"the PyTorchJob's environment {ob.pod_env} is not the scripts' {expected}"
    sizes = ob.parallel.agree("parallel sizes") if ob.parallel.values else {"tp": 1, "pp": 1, "cp": 1, "ep": 1}
    assert isinstance(sizes, dict) and isinstance(gbs, int) and isinstance(mbs, int)
    model_parallel = sizes["tp"] * sizes["pp"] * sizes["cp"]
    assert world % model_parallel == 0, f"world {world} % tp*pp*cp {model_parallel}"
    dp = world // model_parallel
    assert gbs % (mbs * dp) == 0, f"global batch {gbs} % (micro-batch {mbs} * dp {dp})"
    if ob.ds is not None:
        gas = ob.ds["gradient_accumulation_steps"]
        assert ob.ds["train_batch_size"] == mbs * gas * dp, (ob.ds["train_batch_size"], mbs, gas, dp)
    if ob.zero.values:
        ob.zero.agree("ZeRO stage")
    return {"world": world, "nodes": nodes, "gpus": gpus, "dp": dp, "gbs": gbs, "mbs": mbs, "env": env, **sizes}
