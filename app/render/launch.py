"""Launch commands as data: what each rank runs, and the torchrun / DeepSpeed runner / srun lines around it.

Every command is a list of lines of words (`words.Word`); the scripts' templates quote and join them, the tests
parse them back with torch's and DeepSpeed's own argument parsers. The numbers come from `Facts` only.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.render.facts import Facts
from app.render.flags import Flag, flag, flag_name, group_words
from app.render.megatron_args import recompute_flags, save_interval
from app.render.megatron_model import model_flags, moe_flags
from app.render.slurm import srun_cpu_words
from app.render.support import EXAMPLE_TRAINER
from app.render.words import Line, Var, Word

HERE = Var("HERE")
K8S_FILES_DIR = "/etc/trainplan"
TORCHRUN = ("-m", "torch.distributed.run")
DEEPSPEED = ("-m", "deepspeed.launcher.runner")
# What examples/train_gpt.py reads of the Megatron-style model flags (its argparse); the rest it ignores.
TRAINER_MODEL_FLAGS = (
    "--num-layers",
    "--hidden-size",
    "--ffn-hidden-size",
    "--num-attention-heads",
    "--num-query-groups",
    "--seq-length",
    "--max-position-embeddings",
    "--position-embedding-type",
    "--normalization",
    "--swiglu",
    "--untie-embeddings-and-output-weights",
    "--window-size",
    "--window-attn-skip-freq",
)
# ... and, for an MoE model, the flags of its transformers network (examples/hf_model.py, `--model-impl hf`)
TRAINER_HF_FLAGS = ("--kv-channels", "--qk-layernorm", "--num-experts", "--moe-router-topk", "--moe-ffn-hidden-size")


def in_dir(base: Word, name: str) -> Word:
    return Var(base.name, f"{base.suffix}/{name}") if isinstance(base, Var) else f"{base}/{name}"


@dataclass(frozen=True)
class Worker:
    """What each rank executes: train.sh (executable: the agents' --no-python) or a Python script + args."""

    lines: tuple[Line, ...]
    python: bool


def trainer_flags(f: Facts, config_path: Word) -> list[tuple[str, tuple[Word, ...]]]:
    """Arguments of the DeepSpeed training script (examples/train_gpt.py's Megatron-style names)."""
    o = f.options
    shape = model_flags(f)
    model = [fl for fl in shape if fl.name in TRAINER_MODEL_FLAGS]
    if f.model.is_moe:  # the sparse blocks the deepspeed-hf stack models: transformers' (examples/hf_model.py)
        model += [fl for fl in (*shape, *moe_flags(f)) if fl.name in TRAINER_HF_FLAGS]
        if f.entrypoint == EXAMPLE_TRAINER:
            model.append(flag("--model-impl", "hf"))
    flags: list[Flag] = [
        *model,
        flag("--vocab-size", f.model.vocab_size),
        flag("--micro-batch-size", f.micro_batch_size),
        flag("--global-batch-size", f.global_batch_size),
        flag("--train-iters", o.train_iters),
        flag("--lr", o.lr),
        flag("--weight-decay", o.weight_decay),
        flag("--seed", o.seed),
        flag("--log-interval", o.log_interval),
        *recompute_flags(f),  # Megatron's names; the trainer recomputes full layers as the memory model assumes
    ]
    if o.checkpoint_dir:
        flags += [
            flag("--save", o.checkpoint_dir),
            flag("--load", o.checkpoint_dir),
            flag("--save-interval", save_interval(f)),
        ]
    out: list[tuple[str, tuple[Word, ...]]] = [(fl.name, fl.values) for fl in flags]
    out.append(("--deepspeed_config", (config_path,)))
    names = {name for name, _ in out}
    for fl in group_words(o.extra_args):
        if flag_name(fl.name) in names:
            raise ValueError(
                f"extra_args: {fl.name} is already set by the plan; change the plan or the render "
                f"options instead of repeating it"
            )
        out.append((fl.name, fl.values))
    return out


def worker(f: Facts, files_dir: Word) -> Worker:
    if f.framework == "deepspeed":
        args = trainer_flags(f, in_dir(files_dir, "ds_config.json"))
        return Worker(((f.entrypoint,), *((name, *values) for name, values in args)), python=True)
    return Worker(((in_dir(files_dir, "train.sh"),),), python=False)


def _restarts(f: Facts) -> Line:
    return ("--max-restarts", str(f.options.max_restarts))


def node_rendezvous(f: Facts) -> str:
    """standalone (one node); static (node rank from NODE_RANK, the ranks fixed by it); or c10d when torchrun
    restarts workers, which a static rendezvous cannot regroup (node 0, from NODE_RANK, hosts the store)."""
    if f.num_nodes == 1:
        return "standalone"
    return "c10d" if f.options.max_restarts > 0 else "static"


def torchrun_node(f: Facts, w: Worker) -> list[Line]:
    """torchrun.sh: one agent per node; see node_rendezvous."""
    lines: list[Line] = [
        (f.options.python, *TORCHRUN),
        ("--nnodes", Var("NNODES")),
        ("--nproc-per-node", Var("NPROC_PER_NODE")),
    ]
    kind = node_rendezvous(f)
    if kind == "standalone":
        lines.append(("--standalone",))
    elif kind == "static":
        lines += [
            ("--node-rank", Var("NODE_RANK")),
            ("--master-addr", Var("MASTER_ADDR")),
            ("--master-port", Var("MASTER_PORT")),
        ]
    else:
        lines += [
            ("--rdzv-backend", "c10d"),
            ("--rdzv-endpoint", Var("RDZV_ENDPOINT")),
            ("--rdzv-id", f.job_name),
            ("--rdzv-conf", Var("RDZV_CONF")),
        ]
    lines.append(_restarts(f))
    return lines + _worker_lines(w, "--no-python")


def torchrun_slurm(f: Facts, w: Worker) -> list[Line]:
    """sbatch.sh: srun starts one agent per node with all of the node's CPUs (slurm.py); c10d rendezvous on the
    allocation's first node."""
    return [
        ("srun", "--nodes", Var("NNODES"), "--ntasks-per-node", "1", *srun_cpu_words(f), "--kill-on-bad-exit=1"),
        (f.options.python, *TORCHRUN),
        ("--nnodes", Var("NNODES")),
        ("--nproc-per-node", Var("GPUS_PER_NODE")),
        ("--rdzv-backend", "c10d"),
        ("--rdzv-endpoint", Var("RDZV_ENDPOINT")),
        ("--rdzv-id", Var("SLURM_JOB_ID")),
        _restarts(f),
        *_worker_lines(w, "--no-python"),
    ]


def k8s_elastic(f: Facts) -> bool:
    """Restarts need a rendezvous that regroups restarted workers: the operator's elasticPolicy with c10d."""
    return f.options.max_restarts > 0


def torchrun_k8s(f: Facts, w: Worker) -> list[Line]:
    """PyTorchJob. Static (no restarts): the training operator sets PET_NODE_RANK, PET_MASTER_ADDR and
    PET_MASTER_PORT, which torchrun reads as the defaults of --node-rank, --master-addr and --master-port.
    Elastic (restarts): it sets PET_RDZV_BACKEND=c10d, PET_RDZV_ENDPOINT=<job>-worker-0:<port> and
    PET_MAX_RESTARTS from the elasticPolicy (training-operator pkg/controller.v1/pytorch/elastic.go); the same
    numbers are written here too."""
    lines: list[Line] = [
        (f.options.python, *TORCHRUN),
        ("--nnodes", str(f.num_nodes)),
        ("--nproc-per-node", str(f.gpus_per_node)),
    ]
    if k8s_elastic(f):
        lines.append(("--rdzv-backend", "c10d"))
    return [*lines, _restarts(f), *_worker_lines(w, "--no-python")]


def deepspeed_runner(f: Facts, w: Worker) -> list[Line]:
    """deepspeed.sh: DeepSpeed's runner with the hostfile; pdsh starts the other nodes from node 0."""
    lines: list[Line] = [
        (f.options.python, *DEEPSPEED),
        ("--hostfile", in_dir(HERE, "hostfile")),
        ("--num_nodes", str(f.num_nodes)),
        ("--num_gpus", str(f.gpus_per_node)),
    ]
    if f.num_nodes > 1:
        lines.append(("--master_addr", Var("MASTER_ADDR")))
    lines += [("--master_port", str(f.options.master_port)), ("--no_local_rank",)]
    return lines + _worker_lines(w, "--no_python")


def _worker_lines(w: Worker, no_python_flag: str) -> list[Line]:
    if w.python:
        return list(w.lines)
    return [(no_python_flag, *w.lines[0]), *w.lines[1:]]


def hostfile_hosts(f: Facts) -> tuple[tuple[str, ...], bool]:
    """(hosts, known): cluster.hosts, localhost for one node, else placeholders to replace."""
    if f.hosts:
        return f.hosts, True
    if f.num_nodes == 1:
        return ("localhost",), True
    return tuple(f"replace-with-host-{i}" for i in range(f.num_nodes)), False
