"""`render(result, rank, options) -> Artifacts`: one plan becomes every file a cluster admin needs.

Python derives every value once (`facts.derive`) and builds the commands and sections as data; the Jinja
templates under templates/ only lay them out (StrictUndefined, `tojson` for JSON and YAML values, `sh` for
shell words, `comment` for free text in comments).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from pydantic import BaseModel, ConfigDict, Field

from app.paths import TEMPLATES_DIR
from app.planner.results import PlanResult
from app.render import launch
from app.render.deepspeed_config import ds_config
from app.render.env import TORCHRUN_ONLY, EnvVar, env_notes
from app.render.facts import Facts, derive
from app.render.flags import Section
from app.render.k8s import CLIQUE_LABEL, JOB_LABEL, pod_facts
from app.render.k8s import pod as k8s_pod
from app.render.megatron_args import saves_on_stop, sections
from app.render.megatron_model import top1_softmax
from app.render.options import RenderOptions
from app.render.plan_json import plan_json
from app.render.slurm import SIGNAL_MAX_S, signal_seconds
from app.render.support import EXAMPLE_TRAINER
from app.render.words import Word, comment, flat, shell_line, shell_word
from launcher.spec import PlanError

TEMPLATES = TEMPLATES_DIR
ARTIFACT_NAMES = (
    "ds_config.json",
    "megatron_args.txt",
    "train.sh",
    "nccl_env.sh",
    "torchrun.sh",
    "hostfile",
    "deepspeed.sh",
    "sbatch.sh",
    "pytorchjob.yaml",
    "plan.json",
)
# Files each rank reads at run time (shipped in the PyTorchJob's ConfigMap).
WORKER_FILES = ("ds_config.json", "megatron_args.txt", "train.sh", "nccl_env.sh")
ARGS_FILE_WORD = re.compile(r"^[^\s'\"\\#][^\s'\"\\]*$")


class Artifacts(BaseModel):
    """The rendered files of one plan, in ARTIFACT_NAMES order, and what the renderer decided for you."""

    model_config = ConfigDict(frozen=True)

    files: dict[str, str] = Field(description="File name -> text, only the files that apply to the framework.")
    notes: list[str] = Field(default_factory=list, description="Choices made or limits met while rendering.")


def yaml_block_safe(text: str) -> bool:
    """Can `text` be a YAML literal block (`|`) and read back byte for byte? Printable lines, one final newline,
    no trailing spaces (YAML keeps them, but editors do not), no leading space on the first line."""
    if not text.endswith("\n") or text.endswith("\n\n") or text.startswith((" ", "\n")):
        return False
    return all(line.isprintable() and not line.endswith(" ") for line in text[:-1].split("\n"))


def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(TEMPLATES)),
        undefined=StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["sh"] = shell_word
    env.filters["shline"] = shell_line
    env.filters["comment"] = comment
    env.filters["yaml_block_safe"] = yaml_block_safe
    env.policies["json.dumps_kwargs"] = {"sort_keys": False}
    return env


ENV = environment()


def _template(name: str, **values: Any) -> str:
    return ENV.get_template(f"{name}.j2").render(m=ENV.get_template("_macros.j2").module, **values)


def _check_args_file(secs: list[Section]) -> None:
    for sec in secs:
        for fl in sec.flags:
            for word in fl.words:
                if not ARGS_FILE_WORD.fullmatch(word):
                    raise ValueError(f"{fl.name}: {word!r} cannot be written to megatron_args.txt unquoted")


def _megatron_files(f: Facts) -> dict[str, str]:
    secs = sections(f)
    _check_args_file(secs)
    tail: list[Word] = []
    if f.framework == "megatron-deepspeed":
        tail = ["--deepspeed_config", launch.in_dir(launch.HERE, "ds_config.json")]
    return {
        "megatron_args.txt": _template("megatron_args.txt", f=f, sections=secs),
        "train.sh": _template("train.sh", f=f, tail=tail),
    }


def _deepspeed_files(f: Facts) -> dict[str, str]:
    ds = ds_config(f)
    hosts, known = launch.hostfile_hosts(f)
    runner = launch.deepspeed_runner(f, launch.worker(f, launch.HERE))
    return {
        "ds_config.json": _template("ds_config.json", ds=ds, z=ds.zero, nvme_path=f.cluster.nvme_path),
        "hostfile": _template("hostfile", f=f, hosts=hosts, hosts_known=known),
        "deepspeed.sh": _template(
            "deepspeed.sh", f=f, command=runner, env=deepspeed_env(f), passed_on=ds_env_file_names(f)
        ),
    }


# What DeepSpeed's runner passes on to the other nodes itself (deepspeed/launcher/runner.py EXPORT_ENVS, and the
# CUDA accelerator's export_envs()): pdsh starts the remote ranks with these and nothing else of node 0's environment.
DS_FORWARDED = ("NCCL", "PYTHON", "MV2", "UCX", "MLFLOW")


def renders_deepspeed(f: Facts) -> bool:
    """ds_config.json, hostfile and deepspeed.sh: for the DeepSpeed frameworks (Megatron-DeepSpeed included)."""
    return f.framework != "megatron"


def deepspeed_env(f: Facts) -> list[EnvVar]:
    """What deepspeed.sh exports beside nccl_env.sh: the workers' variables but torchrun's own."""
    return [e for e in f.worker_env if e.name not in TORCHRUN_ONLY]


def ds_env_file_names(f: Facts) -> list[str]:
    """The variables deepspeed.sh sets that DeepSpeed's runner would not pass on to the other nodes (GLOO_SOCKET_IFNAME,
    TORCH_*...): deepspeed.sh lists them in the file DS_ENV_FILE names, which the runner reads (QA, 2026-12-06:
    the remote ranks ran without GLOO_SOCKET_IFNAME). One node: none (the runner starts its ranks locally)."""
    if f.num_nodes == 1:
        return []
    return [e.name for e in (*f.nccl_env, *deepspeed_env(f)) if not e.name.startswith(DS_FORWARDED)]


def _launch_files(f: Facts, worker_files: dict[str, str]) -> dict[str, str]:
    here = launch.worker(f, launch.HERE)
    par = f.par
    world_reason = f"tp({par.tp}) * pp({par.pp}) * cp({par.cp}) * dp({par.dp})"
    k8s = launch.torchrun_k8s(f, launch.worker(f, launch.K8S_FILES_DIR))
    pod = k8s_pod(f)
    in_pod = pod_facts(f)
    pod_files = worker_files if in_pod is f else {**worker_files, "nccl_env.sh": _template("nccl_env.sh", f=in_pod)}
    return {
        "nccl_env.sh": worker_files["nccl_env.sh"],
        "torchrun.sh": _template(
            "torchrun.sh", f=f, command=launch.torchrun_node(f, here), rendezvous=launch.node_rendezvous(f)
        ),
        "sbatch.sh": _template(
            "sbatch.sh",
            f=f,
            command=launch.torchrun_slurm(f, here),
            world_reason=world_reason,
            signal_s=signal_seconds(f),
        ),
        "pytorchjob.yaml": _template(
            "pytorchjob.yaml",
            f=in_pod,
            command=[str(w) for w in flat(k8s)],
            files=list(pod_files.items()),
            files_dir=launch.K8S_FILES_DIR,
            configmap=f"{f.job_name}-files",
            pod=pod,
            job_label=JOB_LABEL,
            clique_label=CLIQUE_LABEL,
        ),
    }


def notes(f: Facts) -> list[str]:
    out: list[str] = []
    if not saves_on_stop(f):  # (Megatron-DeepSpeed without checkpoint_dir)
        out.append(
            "megatron_args.txt: no --exit-signal-handler or --exit-duration-in-mins: Megatron-DeepSpeed saves a "
            "checkpoint on SIGTERM and at that duration whatever --save says, and without checkpoint_dir the save "
            "raises on every rank; set checkpoint_dir for a clean stop that can resume"
        )
    if f.framework != "deepspeed" and f.model.embedding_layernorm:
        out.append(
            "model.embedding_layernorm: Megatron has no flag for a LayerNorm after the embedding; "
            "the rendered model has none"
        )
    if f.framework == "megatron" and top1_softmax(f):
        out.append(
            "model.moe_router_topk 1: megatron-core refuses a top-1 softmax router without --moe-router-pre-softmax "
            "(transformer_config.py), so it is rendered: each token's expert output is weighted by that expert's "
            "softmax probability (as Switch Transformer routes), not by 1.0 as a top-1 renormalised after the "
            "top-k would be; the step time and memory are the same"
        )
    if f.uses_example_trainer and f.par.recompute == "selective":
        out.append(
            "recompute=selective: examples/train_gpt.py accepts the flag and does nothing, since its fused "
            "attention keeps no s x s scores (the memory estimate assumes none either); the step-time "
            "estimate still counts Megatron's recomputation of the attention core"
        )
    if f.num_nodes > 1 and not f.hosts and f.framework != "megatron":
        out.append("cluster.hosts was not given: the hostfile lists placeholder names to replace")
    if f.master_addr is None:
        out.append(
            "no head-node address (cluster.hosts or render.master_addr): the multi-node scripts read "
            "MASTER_ADDR from the environment, and plan.json (which must name it) is not rendered"
        )
    if f.uses_example_trainer:
        out += trainer_notes(f)
    out += run_notes(f)
    return [*f.derive_notes, *f.decisions.notes, *out, *env_notes(f.decisions, f.cluster, f.options), *k8s_pod(f).notes]


def run_notes(f: Facts) -> list[str]:
    """What the options make every launch style do that a user might expect of one only."""
    o, out = f.options, []
    if o.max_restarts and not o.checkpoint_dir:
        out.append(
            f"max_restarts {o.max_restarts} without checkpoint_dir: nothing is saved, so every restart trains "
            f"again from step 0; give checkpoint_dir to resume from the last checkpoint"
        )
    if renders_deepspeed(f):
        stop = f.decisions.graceful_stop_s
        restarts = f"; it restarts nothing (render.max_restarts {o.max_restarts})" if o.max_restarts else ""
        out.append(
            f"deepspeed.sh: DeepSpeed's launcher kills the ranks 30 s after SIGTERM (deepspeed/launcher/launch.py "
            f"terminate_process_tree), where this plan needs {stop} s to save and stop{restarts}: stop a run you "
            f"want to resume through torchrun.sh, sbatch.sh or plan.json (python -m launcher)"
        )
    if f.decisions.graceful_stop_s > SIGNAL_MAX_S:
        # --exit-duration-in-mins is in megatron_args.txt only, and only where the job saves on stop
        has_exit_duration = f.framework != "deepspeed" and saves_on_stop(f)
        if has_exit_duration and o.slurm_time_limit is not None:
            then = ": --exit-duration-in-mins keeps the whole margin and stops it first"
        elif has_exit_duration:
            then = ": give slurm_time_limit so that --exit-duration-in-mins stops it in time"
        else:
            then = ": nothing here stops it earlier, so its last save may not finish before the time limit"
        out.append(
            f"sbatch.sh: --signal=TERM@{SIGNAL_MAX_S}, the most sbatch takes, where this plan needs "
            f"{f.decisions.graceful_stop_s} s to save and stop{then}"
        )
    if o.slurm_time_limit is not None and f.framework != "deepspeed":
        out.append(
            f"slurm_time_limit {o.slurm_time_limit}: --exit-duration-in-mins is in megatron_args.txt, which every "
            f"launch file reads: torchrun.sh, plan.json and the PyTorchJob stop (and save) at that time as well"
        )
    return out


def trainer_notes(f: Facts) -> list[str]:
    """examples/train_gpt.py builds the shape (layers, widths, heads, GQA, SwiGLU, norm type, positions): what else
    makes the named network is not applied there."""
    m = f.model
    differs = [
        name
        for name, value, default in (
            ("rotary_base", m.rotary_base, 10000.0),
            ("rope_scaling", m.rope_scaling, None),
            ("qk_layernorm", m.qk_layernorm, False),
            ("add_qkv_bias", m.add_qkv_bias, False),
            ("norm_epsilon", m.norm_epsilon, 1e-5),
            ("init_method_std", m.init_method_std, 0.02),
            ("rotary_percent", m.rotary_percent, 1.0),
            ("parallel_residual", m.parallel_residual, False),
        )
        if value != default
    ]
    if not differs:
        return []
    return [
        f"{EXAMPLE_TRAINER} trains the shape of {m.name} but not its {', '.join(differs)} (the memory and "
        f"time it measures are the same); give your own entrypoint to train the network itself"
    ]


def render(result: PlanResult, rank: int = 1, options: RenderOptions | None = None) -> Artifacts:
    """Every artifact of plan `rank` of `result` that applies to its framework, in ARTIFACT_NAMES order."""
    f = derive(result, rank, options or RenderOptions())
    files: dict[str, str] = {"nccl_env.sh": _template("nccl_env.sh", f=f)}
    builders: list[Callable[[Facts], dict[str, str]]] = []
    if renders_deepspeed(f):
        builders.append(_deepspeed_files)
    if f.framework != "deepspeed":
        builders.append(_megatron_files)
    for build in builders:
        files.update(build(f))
    worker_files = {n: files[n] for n in WORKER_FILES if n in files}
    files.update(_launch_files(f, worker_files))
    extra_notes = []
    if f.master_addr is not None:  # the launcher needs node 0's address on more than one node
        try:
            files["plan.json"] = plan_json(f, files)
        except PlanError as exc:  # launcher/spec.py owns the format and has the last word on it
            extra_notes.append(f"plan.json not rendered: launcher/spec.py refuses this plan: {exc}")
    ordered = {name: files[name] for name in ARTIFACT_NAMES if name in files}
    return Artifacts(files=ordered, notes=notes(f) + extra_notes)


def write_artifacts(
    arts: Artifacts, out_dir: str | os.PathLike[str], *, removed: list[Path] | None = None
) -> list[Path]:
    """Write the files into out_dir (created if needed), all of them or none; scripts are made executable. Returns
    the paths.

    Every target is checked first, then each file is written (and synced) to a temporary name beside it, and only
    when all are written are they renamed into place: an OSError (a target that is a folder, a full disk) leaves the
    folder as it was, no temporaries behind, and names the path (a rename refused after others were done, which
    takes a change to the folder meanwhile, is the one failure not undone). Then the files of the other
    ARTIFACT_NAMES the previous render there wrote (its MANIFEST lists them) are removed, so that the folder holds
    this plan's artifacts and no other's; they are appended to `removed` when it is given. A file of an artifact's
    name that no render of ours wrote (a hand-made hostfile) is left alone, as are other names."""
    out = Path(out_dir)
    made = _make_dirs(out)
    ours = _manifest(out / MANIFEST)
    stale = [out / name for name in ours if name not in arts.files and _file_or_link(out / name)]
    temps: list[tuple[Path, Path]] = []
    try:
        targets = [_writable_target(out / name) for name in arts.files]
        for path, text in (*((p, arts.files[p.name]) for p in targets), (out / MANIFEST, "\n".join(arts.files) + "\n")):
            temps.append((_write_temp(path, text), path))
        for temp, path in temps:
            os.replace(temp, path)
    except BaseException:
        for temp, _path in temps:
            temp.unlink(missing_ok=True)
        for folder in made:  # deepest first; one that holds anything now stays
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    for path in stale:
        path.unlink(missing_ok=True)
    if removed is not None:
        removed += stale
    return targets


MANIFEST = ".trainplan-render"  # the artifact names the last render into a folder wrote, one a line


def _manifest(path: Path) -> list[str]:
    """The artifact names a previous render listed in `path` (none: no render of ours, or an unreadable list)."""
    try:
        names = path.read_text(encoding="utf-8").split()
    except (OSError, UnicodeDecodeError):
        return []
    return [name for name in names if name in ARTIFACT_NAMES]


def _make_dirs(out: Path) -> list[Path]:
    """mkdir -p out; the folders it made, deepest first (removed again when the write fails)."""
    missing = [folder for folder in (out, *out.parents) if not folder.exists() and not folder.is_symlink()]
    out.mkdir(parents=True, exist_ok=True)
    return missing


def _file_or_link(path: Path) -> bool:
    """A file (or a link, removed itself, not what it points to); a folder of an artifact's name is not ours."""
    return path.is_symlink() or path.is_file()


def _writable_target(path: Path) -> Path:
    """A folder in a file's place cannot be replaced by a rename: refused before anything is written."""
    if path.is_dir() and not path.is_symlink():
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    return path


def _write_temp(path: Path, text: str) -> Path:
    """`text` in a new file beside `path` (a hidden temporary name), synced to disk, with the mode `path` is to
    have (755 for scripts, 644 else). An OSError names `path`, not the temporary."""
    try:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    temp = Path(name)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(text.encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
        temp.chmod(0o755 if path.name.endswith(".sh") else 0o644)
    except OSError as exc:
        temp.unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return temp
