"""The plan.json format (``kind: "trainplan.plan"``, ``schema_version: 1``): what `python -m launcher` reads.

Stdlib only (the launcher must start in well under 150 ms). The renderer builds these frozen dataclasses and
calls :func:`dump`; the launcher calls :func:`load`. Every class validates on construction and raises
:class:`PlanError` naming the field and the numbers. The format is described in docs/plan-json.md.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from launcher.fields import (
    ENV_NAME,
    FILE_NAME,
    PLAIN_NAME,
    PlanError,
    build,
    need_float,
    need_int,
    need_opt,
    need_str,
    need_str_map,
    need_str_tuple,
)
from launcher.sections import DAY_S, Hardware, Model, Prediction, Watchdog
from launcher.strategy import Strategy

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (mypy reads it so), without importing typing: docs/launcher.md
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "Entrypoint",
    "Hardware",
    "Job",
    "Model",
    "Parallel",
    "Plan",
    "PlanError",
    "Prediction",
    "Strategy",
    "Watchdog",
    "World",
    "dump",
    "load",
]

SCHEMA_VERSION = 1
KIND = "trainplan.plan"
BACKENDS = ("torchrun", "deepspeed", "slurm")
ACCELERATORS = ("cuda", "cpu")
NUMA_MODES = ("none", "node", "socket", "exclusive", "core-complex")
# Substituted in entrypoint.args, entrypoint.working_dir and env values (docs/plan-json.md).
PLACEHOLDERS = ("run_dir", "plan_dir", "node_rank", "num_nodes", "gpus_per_node", "master_addr", "master_port")
# Set by the launcher or the backend for every worker; a plan may not set them.
LAUNCHER_ENV = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "GROUP_RANK",
    "TRAINPLAN_RUN_DIR",
    "TRAINPLAN_LAUNCH_ID",
)
# Names the launcher (and the trainers it watches) write into the run directory.
RESERVED_FILES = (
    "plan.json",
    "commands.json",
    "launcher.log",
    "workers.json",
    "logs",
    "hostfile.generated",
    "deepspeed_env.generated",
    "heartbeats",
    "stacks",
    "metrics",
    "bench.json",
    "cluster_profile.json",
)
# ... and per node (--node-rank K, and workers.node0.json of a one-node run), and the run directory's locks
RESERVED_PER_NODE = re.compile(
    r"^(?:(?:commands|workers)\.node\d+\.json|launcher\.node\d+\.log|\.launcher(?:\.node\d+)?\.lock)$"
)
MAX_PLAN_BYTES = 64 << 20
LOOPBACK = re.compile(r"^(localhost|127\.\d+\.\d+\.\d+|::1)$")
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _check_placeholders(where: str, text: str) -> None:
    for name in PLACEHOLDER.findall(text):
        if name not in PLACEHOLDERS:
            raise PlanError(f"{where}: unknown placeholder {{{name}}} (known: {', '.join(PLACEHOLDERS)})")


@dataclass(frozen=True)
class Job:
    """plan.json's `job` section: the name, the backend and how the launcher runs and restarts the job."""

    name: str
    run_dir: str | None = None
    backend: str = "torchrun"
    max_restarts: int = 0
    grace_period_s: float = 30.0
    omp_num_threads: int | None = None
    numa_binding: str = "none"

    def __post_init__(self) -> None:
        need_str("job.name", self.name, pattern=FILE_NAME, max_len=128)
        need_opt("job.run_dir", self.run_dir, need_str, (), None, 4096)
        need_str("job.backend", self.backend, BACKENDS)
        need_int("job.max_restarts", self.max_restarts, 0, 1000)
        need_float("job.grace_period_s", self.grace_period_s, hi=DAY_S)
        need_opt("job.omp_num_threads", self.omp_num_threads, need_int, 1, 4096)
        if isinstance(self.numa_binding, bool):  # documented alias: true = "node", false = "none"
            object.__setattr__(self, "numa_binding", "node" if self.numa_binding else "none")
        need_str("job.numa_binding", self.numa_binding, NUMA_MODES)


@dataclass(frozen=True)
class World:
    """plan.json's `world` section: the nodes, the processes per node and the rendezvous address."""

    num_nodes: int = 1
    gpus_per_node: int = 1
    hosts: tuple[str, ...] = ()
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    accelerator: str = "cuda"

    def __post_init__(self) -> None:
        need_int("world.num_nodes", self.num_nodes, 1, 100_000)
        need_int("world.gpus_per_node", self.gpus_per_node, 1, 1024)
        object.__setattr__(self, "hosts", need_str_tuple("world.hosts", self.hosts, PLAIN_NAME, 253))
        need_str("world.master_addr", self.master_addr, pattern=PLAIN_NAME, max_len=253)
        need_int("world.master_port", self.master_port, 1, 65535)
        need_str("world.accelerator", self.accelerator, ACCELERATORS)
        if self.hosts and len(self.hosts) != self.num_nodes:
            raise PlanError(f"world.hosts lists {len(self.hosts)} hosts but world.num_nodes is {self.num_nodes}")
        if len(set(self.hosts)) != len(self.hosts):
            raise PlanError(f"world.hosts has duplicates: {list(self.hosts)}")
        if self.num_nodes > 1 and LOOPBACK.fullmatch(self.master_addr):
            raise PlanError(
                f"world.master_addr({self.master_addr}) is a loopback address but world.num_nodes is "
                f"{self.num_nodes}: give the head node's address"
            )

    @property
    def world_size(self) -> int:
        return self.num_nodes * self.gpus_per_node


@dataclass(frozen=True)
class Parallel:
    """plan.json's `parallel` section: the parallel sizes and the batch (mbs x gas x dp)."""

    dp: int
    global_batch_size: int
    tp: int = 1
    pp: int = 1
    vpp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int | None = None  # expert tensor parallelism; None: = tp (Megatron's default), filled in here
    zero_stage: int = 0
    micro_batch_size: int = 1
    gradient_accumulation_steps: int | None = None

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "vpp", "dp", "cp", "ep", "micro_batch_size", "global_batch_size"):
            need_int(f"parallel.{name}", getattr(self, name), 1, 1 << 40)
        if self.etp is None:  # derived once, here
            object.__setattr__(self, "etp", self.tp)
        etp = need_int("parallel.etp", self.etp, 1, 1 << 40)
        need_int("parallel.zero_stage", self.zero_stage, 0, 3)
        mbs, dp, gbs = self.micro_batch_size, self.dp, self.global_batch_size
        if self.gradient_accumulation_steps is None:  # derived once, here
            if gbs % (mbs * dp):
                raise PlanError(
                    f"parallel.global_batch_size({gbs}) is not a multiple of "
                    f"micro_batch_size({mbs}) * dp({dp}) = {mbs * dp}"
                )
            object.__setattr__(self, "gradient_accumulation_steps", gbs // (mbs * dp))
        gas = need_int("parallel.gradient_accumulation_steps", self.gradient_accumulation_steps, 1, 1 << 40)
        if gbs != mbs * gas * dp:
            raise PlanError(
                f"parallel.global_batch_size({gbs}) != micro_batch_size({mbs}) * "
                f"gradient_accumulation_steps({gas}) * dp({dp}) = {mbs * gas * dp}"
            )
        plane = self.tp * self.cp * dp  # megatron-core parallel_state: EP x ETP is carved out of TP x CP x DP
        if plane % (etp * self.ep):
            raise PlanError(
                f"parallel.tp({self.tp}) * cp({self.cp}) * dp({dp}) = {plane} is not a multiple of "
                f"etp({etp}) * ep({self.ep}) = {etp * self.ep}"
            )
        if self.vpp > 1 and self.pp == 1:
            raise PlanError(f"parallel.vpp({self.vpp}) > 1 needs pp > 1 (pp is 1)")

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.cp * self.dp


@dataclass(frozen=True)
class Entrypoint:
    """plan.json's `entrypoint` section: the training script, its arguments and interpreter."""

    script: str
    args: tuple[str, ...] = ()
    working_dir: str | None = None
    python: str | None = None

    def __post_init__(self) -> None:
        if not need_str("entrypoint.script", self.script):
            raise PlanError("entrypoint.script is empty")
        object.__setattr__(self, "args", need_str_tuple("entrypoint.args", self.args))
        for i, arg in enumerate(self.args):
            _check_placeholders(f"entrypoint.args[{i}]", arg)
        need_opt("entrypoint.working_dir", self.working_dir, need_str)
        if self.working_dir:
            _check_placeholders("entrypoint.working_dir", self.working_dir)
        need_opt("entrypoint.python", self.python, need_str)


# The plan's sections and their classes, and those it may leave out (module constants, not ClassVars of Plan:
# see launcher/strategy.py's)
SECTIONS: dict[str, type] = {
    "job": Job,
    "world": World,
    "parallel": Parallel,
    "entrypoint": Entrypoint,
    "model": Model,
    "prediction": Prediction,
    "hardware": Hardware,
    "watchdog": Watchdog,
    "strategy": Strategy,
}
OPTIONAL_SECTIONS = ("model", "prediction", "hardware", "watchdog", "strategy")


@dataclass(frozen=True)
class Plan:
    """A whole plan.json, valid once constructed (from the renderer, or from JSON by `load`)."""

    job: Job
    world: World
    parallel: Parallel
    entrypoint: Entrypoint
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    model: Model | None = None
    prediction: Prediction | None = None
    hardware: Hardware | None = None
    watchdog: Watchdog | None = None  # None: the defaults (Watchdog())
    strategy: Strategy | None = None  # None: not stated (a plan.json from before the section existed)
    meta: dict[str, str] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION
    kind: str = KIND

    def __post_init__(self) -> None:
        if self.kind != KIND:
            raise PlanError(f"kind: {self.kind!r} is not {KIND!r}")
        check_version(self.schema_version)
        for name, cls in SECTIONS.items():
            value = getattr(self, name)
            if not isinstance(value, cls) and not (value is None and name in OPTIONAL_SECTIONS):
                raise PlanError(f"{name}: expected a {cls.__name__}, got {type(value).__name__}")
        object.__setattr__(self, "env", need_str_map("env", self.env, ENV_NAME))
        object.__setattr__(self, "files", need_str_map("files", self.files, FILE_NAME, multiline=True))
        object.__setattr__(self, "meta", need_str_map("meta", self.meta, ENV_NAME, multiline=True))
        for key, value in self.env.items():
            if key in LAUNCHER_ENV:
                raise PlanError(f"env.{key} is set by the launcher for each worker; remove it from the plan")
            _check_placeholders(f"env.{key}", value)
        for name in self.files:
            if name in RESERVED_FILES or RESERVED_PER_NODE.match(name):
                raise PlanError(
                    f"files.{name}: the launcher writes that name itself (reserved: {', '.join(RESERVED_FILES)}, "
                    f"commands.nodeK.json, workers.nodeK.json, launcher.nodeK.log, .launcher[.nodeK].lock)"
                )
        self._check_consistency()

    def _check_consistency(self) -> None:
        w, p = self.world, self.parallel
        if w.world_size != p.world_size:
            raise PlanError(
                f"world.num_nodes({w.num_nodes}) * world.gpus_per_node({w.gpus_per_node}) = {w.world_size} "
                f"!= parallel world size tp({p.tp})*pp({p.pp})*cp({p.cp})*dp({p.dp}) = {p.world_size}"
            )
        mem = self.prediction.peak_memory_bytes if self.prediction else ()
        if len(mem) not in (0, 1, p.pp):
            raise PlanError(
                f"prediction.peak_memory_bytes has {len(mem)} values; give 1 or one per stage (pp = {p.pp})"
            )
        st = self.strategy
        if st is not None and (st.schedule == "interleaved") != (p.vpp > 1):
            raise PlanError(f"strategy.schedule({st.schedule}) does not match parallel.vpp({p.vpp})")
        if self.model and (st is None or st.pipeline_layout is None):  # a layout string sets its own stages
            units = (
                0 if st is None else st.account_for_embedding_in_pipeline_split + st.account_for_loss_in_pipeline_split
            )
            what = f"model.num_layers({self.model.num_layers})"
            if units:
                what += f" + the embedding/loss units({units})"
            if self.model.num_layers + units < p.pp * p.vpp:
                raise PlanError(f"{what} < pp({p.pp}) * vpp({p.vpp}) = {p.pp * p.vpp}")

    # Serialisation --------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"schema_version": self.schema_version, "kind": self.kind}
        for name in (
            "job",
            "world",
            "parallel",
            "entrypoint",
            "env",
            "files",
            "model",
            "prediction",
            "hardware",
            "watchdog",
            "strategy",
            "meta",
        ):
            value = getattr(self, name)
            out[name] = asdict(value) if hasattr(value, "__dataclass_fields__") else value
        return json.loads(json.dumps(out))  # tuples -> lists, dicts copied

    @classmethod
    def from_dict(cls, data: object, where: str = "plan.json") -> Plan:
        """`where`: the file the data came from, named where the top is not an object (it said "plan.json" of any)."""
        if not isinstance(data, dict):
            raise PlanError(f"{where}: expected a JSON object at the top, got {type(data).__name__}")
        if data.get("kind") != KIND:
            raise PlanError(f"kind: {data.get('kind')!r} is not {KIND!r} (is this a trainplan plan.json?)")
        check_version(data.get("schema_version"))
        sections = {
            name: None if data.get(name) is None else build(sec, data[name], name)
            for name, sec in SECTIONS.items()
            if name in data
        }
        return build(cls, {**data, **sections}, "plan")


def check_version(version: object) -> None:
    if isinstance(version, bool) or not isinstance(version, int):
        raise PlanError(f"schema_version: expected the integer {SCHEMA_VERSION}, got {version!r}")
    if version != SCHEMA_VERSION:
        raise PlanError(
            f"schema_version {version} is not supported by this launcher (it reads version {SCHEMA_VERSION}); "
            f"re-render the plan or upgrade the launcher"
        )


class DuplicateKey(ValueError):
    pass


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """JSON allows a key twice in one object and json.loads keeps the later value: a plan edited by hand with a
    second "job" at its end ran with that one, silently (QA L5). Refused, naming the key."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(f"the key {key!r} appears twice in one object; keep one (JSON readers keep either)")
        out[key] = value
    return out


def loads(text: str, where: str = "plan.json") -> Plan:
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except DuplicateKey as exc:
        raise PlanError(f"{where}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise PlanError(f"{where}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise PlanError(f"{where}: not valid JSON: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise PlanError(f"{where}: not valid JSON: {exc}") from None
    try:
        return Plan.from_dict(data, where)
    except RecursionError:
        raise PlanError(f"{where}: a value is nested too deeply") from None


def load(path: str | Path) -> Plan:
    path = Path(path)
    try:
        if not path.is_file():
            raise PlanError(f"{path}: not a regular file" if path.exists() else f"{path}: no such file")
        if path.stat().st_size > MAX_PLAN_BYTES:
            raise PlanError(f"{path}: {path.stat().st_size} bytes, more than the {MAX_PLAN_BYTES} a plan may have")
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlanError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise PlanError(f"{path}: not UTF-8 text: byte {exc.object[exc.start]:#04x} at offset {exc.start}") from None
    return loads(text, str(path))


def dump(plan: Plan, path: str | Path) -> None:
    """Write atomically (several per-node launchers may share a run directory)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(plan.to_dict(), indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
