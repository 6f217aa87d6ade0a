"""What the renderer needs besides the plan: job name, script, data, schedule, launch settings.

Every field that reaches a script is validated here, so that hostile text (quotes, `;`, `$()`, backticks,
spaces, newlines) is refused with a message naming the field before anything is rendered; what is allowed is
still quoted in every script. Field descriptions are the one source of help text for the API and the web form.
"""

from __future__ import annotations

import posixpath
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from app.planner import strict
from app.planner.errors import InputError
from app.planner.specs import check_safe_name, check_safe_path

# Kubernetes object names (RFC 1123 labels) are the strictest of Slurm, file and k8s names: use them for all.
# Kubernetes validates PyTorchJob names as DNS-1035 labels (training-operator pytorchjob_webhook.go,
# NameIsDNS1035Label): a letter first. They are also Slurm job names and run directory names.
JOB_NAME = re.compile(r"^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$")
# A script path relative to the working directory, or absolute.
SCRIPT_PATH = re.compile(r"^[A-Za-z0-9_./-]*[A-Za-z0-9_]\.py$")
# One command-line word that needs no shell quoting (shlex's safe characters).
PLAIN_WORD = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")
# A Hugging Face model id, e.g. meta-llama/Llama-2-7b-hf.
# a Hub id, with its organisation or without (canonical ids such as gpt2, bert-base-uncased, t5-small)
HF_ID = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9._-]*/)?[A-Za-z0-9][A-Za-z0-9._-]*$")
IMAGE = re.compile(r"^[a-z0-9][a-z0-9._/:@-]*$")
# sbatch --time: minutes, minutes:seconds, hours:minutes:seconds, days-hours, days-hours:minutes,
# days-hours:minutes:seconds; Slurm parses it into minutes in a C int (SchedMD/slurm src/common/parse_time.h
# time_str2mins), so no limit is longer than 2**31 - 1 minutes
SLURM_TIME = re.compile(r"^(?:(\d{1,10})-)?(\d{1,10})(?::(\d{2}))?(?::(\d{2}))?$")
SLURM_TIME_MAX_MIN = 2**31 - 1
DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
# extra_args bounds: far above any real flag list, far below Linux's 128 KiB per argument (MAX_ARG_STRLEN) and the
# PyTorchJob ConfigMap's 1 MiB
EXTRA_ARGS_MAX_WORDS = 1024
EXTRA_ARG_MAX_CHARS = 4096

TokenizerType = Literal["HuggingFaceTokenizer", "GPTSentencePieceTokenizer", "GPT2BPETokenizer", "NullTokenizer"]
# NCCL_ALGO values that leave every collective an algorithm: Ring runs all of them; allreduce:tree pins only the
# all-reduce. A bare Tree, NVLS, NVLSTree, PAT, CollnetDirect or CollnetChain exists for a subset of collectives
# only, and NCCL >= 2.24 fails the others (broadcast, all-gather, ...) with ncclInvalidUsage (src/enqueue.cc,
# "no algorithm/protocol available").
NCCL_ALGOS = ("default", "allreduce:tree", "Ring")
NCCL_VERSION = re.compile(r"^(\d+)\.(\d+)(\.\d+)?$")
K8S_RESOURCE = re.compile(r"^([a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?/)?[a-z0-9]([a-z0-9_.-]{0,61}[a-z0-9])?$")


def time_limit_minutes(limit: str) -> float:
    """A Slurm time limit (SLURM_TIME) in minutes."""
    m = SLURM_TIME.fullmatch(limit)
    if m is None:
        raise ValueError(f"slurm_time_limit: {limit!r} is not a Slurm time")
    days, first, second, third = m.groups()
    if days is not None:  # days-hours[:minutes[:seconds]]
        return int(days) * 1440 + int(first) * 60 + int(second or 0) + int(third or 0) / 60
    if third is not None:  # hours:minutes:seconds
        return int(first) * 60 + int(second) + int(third) / 60
    if second is not None:  # minutes:seconds
        return int(first) + int(second) / 60
    return float(first)


def _check(pattern: re.Pattern[str], field: str, value: str, what: str) -> str:
    if not pattern.fullmatch(value) or "\n" in value:
        raise ValueError(f"{field}: {value!r} is not {what}")
    return value


class RenderOptions(BaseModel):
    """Settings for turning one plan into files; the defaults start a smoke run on mock data."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    _no_bool_confusion = field_validator("*", mode="before")(strict.check)

    job_name: str | None = Field(
        None,
        description="Job name for Slurm, Kubernetes and the run directory: a lowercase letter, then lowercase "
        "letters, digits and '-', at most 40 characters (default: from the model name).",
    )
    entrypoint: str | None = Field(
        None,
        description="Training script, relative to the working directory or absolute (default: "
        "pretrain_gpt.py for Megatron-LM and Megatron-DeepSpeed, examples/train_gpt.py for DeepSpeed).",
    )
    workdir: str | None = Field(
        None,
        description="Absolute directory the training script runs in: your Megatron-LM or "
        "Megatron-DeepSpeed checkout, or this repository (default: the directory the job is started from).",
    )
    python: str = Field("python", description="Python interpreter on the nodes (a name on PATH or an absolute path).")
    extra_args: tuple[str, ...] = Field(
        (),
        description="More arguments for the training script, one word each (e.g. --log-timers-to-tensorboard); "
        "flags the plan already sets are refused.",
    )
    data_path: str | None = Field(
        None,
        description="Absolute path (prefix) of the tokenized dataset (--data-path). Without it Megatron-LM "
        "trains on mock data; Megatron-DeepSpeed needs it.",
    )
    tokenizer_type: TokenizerType | None = Field(
        None, description="Tokenizer of the dataset (--tokenizer-type); needed with data_path."
    )
    tokenizer_model: str | None = Field(
        None, description="Tokenizer model: an absolute path or a Hugging Face id (--tokenizer-model)."
    )
    vocab_file: str | None = Field(None, description="Vocabulary file for GPT2BPETokenizer (--vocab-file).")
    merge_file: str | None = Field(None, description="BPE merges file for GPT2BPETokenizer (--merge-file).")
    checkpoint_dir: str | None = Field(
        None, description="Absolute directory to save checkpoints to and resume from (--save/--load)."
    )
    save_interval: int = Field(1000, ge=1, le=10_000_000, description="Iterations between checkpoints.")
    train_iters: int = Field(1000, ge=1, le=100_000_000, description="Optimizer steps to train (--train-iters).")
    lr: float = Field(3.0e-4, gt=0, le=1, description="Peak learning rate (--lr).")
    min_lr: float | None = Field(
        None, ge=0, le=1, description="Final learning rate of the cosine decay (--min-lr; default lr/10)."
    )
    lr_warmup_iters: int | None = Field(
        None, ge=0, description="Linear warm-up steps (--lr-warmup-iters; default train_iters/10, at most 2000)."
    )
    weight_decay: float = Field(0.1, ge=0, le=1, description="AdamW weight decay (--weight-decay).")
    clip_grad: float = Field(
        1.0,
        ge=0,
        le=1000,
        description="Gradient-norm clipping (--clip-grad, DeepSpeed gradient_clipping); 0 turns it off.",
    )
    log_interval: int = Field(
        10, ge=1, le=1_000_000, description="Steps between log lines (--log-interval, DeepSpeed steps_per_print)."
    )
    eval_interval: int = Field(1000, ge=1, le=100_000_000, description="Steps between evaluations (Megatron).")
    eval_iters: int = Field(10, ge=0, le=1_000_000, description="Batches per evaluation (Megatron).")
    seed: int = Field(1234, ge=0, le=2**31 - 1, description="Random seed (--seed).")
    master_addr: str | None = Field(
        None,
        description="Address of node 0 (rendezvous host); default: the first of cluster.hosts. Multi-node "
        "scripts without either read MASTER_ADDR from the environment.",
    )
    master_port: int = Field(29500, ge=1024, le=65535, description="TCP port of the rendezvous on node 0.")
    max_restarts: int = Field(0, ge=0, le=100, description="Times torchrun restarts the workers after a failure.")
    container_image: str = Field(
        "nvcr.io/nvidia/pytorch:25.01-py3",
        description="Container image for the Kubernetes PyTorchJob; it must hold the training code at workdir.",
    )
    k8s_namespace: str | None = Field(None, description="Kubernetes namespace (default: the current one).")
    slurm_partition: str | None = Field(None, description="Slurm partition (#SBATCH --partition).")
    slurm_account: str | None = Field(None, description="Slurm account (#SBATCH --account).")
    slurm_time_limit: str | None = Field(
        None, description="Slurm time limit, e.g. 2-00:00:00 or 720 (#SBATCH --time; default: the partition's)."
    )
    accelerator: Literal["cuda", "cpu"] = Field(
        "cuda",
        description="cuda for GPU nodes; cpu runs the same layout as CPU processes with gloo, a smoke test "
        "of the files before a GPU allocation (DeepSpeed framework only).",
    )
    nccl_algo: str | None = Field(
        None,
        description="NCCL_ALGO: unset = the plan's choice (allreduce:tree where a bulk all-reduce crosses "
        "nodes and the NCCL version allows it, else NCCL's own); 'default' = never set it; 'allreduce:tree'; or "
        "'Ring' for every collective. A bare Tree, NVLS, PAT or CollNet value is refused: it leaves broadcast or "
        "all-gather without an algorithm.",
    )
    nccl_version: str | None = Field(
        None,
        description="NCCL version on the nodes, e.g. 2.27.5 (python -c 'import torch; "
        "print(torch.cuda.nccl.version())'); the per-collective NCCL_ALGO syntax is written only for NCCL >= 2.24.",
    )
    data_cache_path: str | None = Field(
        None,
        description="Shared directory for Megatron's dataset index cache (--data-cache-path; default: "
        "checkpoint_dir/data_cache when a checkpoint directory is given, else beside the data).",
    )
    slurm_cpus_per_task: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="CPUs of each node for its torchrun agent and its ranks (srun "
        "--cpus-per-task; default: all of the node, SLURM_CPUS_ON_NODE under --exclusive).",
    )
    slurm_requeue: bool = Field(
        False,
        description="Requeue the job when it is preempted or its node fails (#SBATCH --requeue); it resumes "
        "from checkpoint_dir.",
    )
    k8s_rdma_resource: str | None = Field(
        None,
        description="Extended resource of your RDMA device plugin, e.g. rdma/rdma_shared_device_a or "
        "nvidia.com/hostdev; requested per pod with the IPC_LOCK capability when cluster.nics is set.",
    )
    k8s_rdma_per_pod: int = Field(1, ge=1, le=64, description="How many of k8s_rdma_resource each pod requests.")
    k8s_checkpoint_claim: str | None = Field(
        None,
        description="A ReadWriteMany PersistentVolumeClaim every pod mounts at checkpoint_dir (Megatron's and "
        "DeepSpeed's checkpoints are written by every rank into one directory all of them share).",
    )
    k8s_data_claim: str | None = Field(
        None,
        description="A PersistentVolumeClaim that holds the dataset, which every pod mounts at data_path's directory, "
        "read-only where the index cache goes elsewhere (without it each pod looks for the dataset in its image).",
    )
    k8s_host_network: bool = Field(
        False, description="Run the pods on the host network (hostNetwork: true), the other way pods reach the HCAs."
    )
    k8s_cpu_per_pod: int | None = Field(
        None, ge=1, le=4096, description="CPUs each pod requests (and is limited to): default 8 per GPU."
    )
    k8s_memory_GiB_per_pod: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="Memory each pod requests (and is limited to), GiB: default the "
        "plan's offloaded host memory + 32 GiB per GPU, at most 90 % of cluster.cpu_memory_GiB.",
    )

    @field_validator("job_name")
    @classmethod
    def _job_name(cls, v: str | None) -> str | None:
        return (
            None
            if v is None
            else _check(
                JOB_NAME,
                "job_name",
                v,
                "a job name (a DNS-1035 label: lowercase letters, "
                "digits, '-'; starts with a letter, ends with a letter or digit; at most "
                "40 characters)",
            )
        )

    @field_validator("entrypoint")
    @classmethod
    def _entrypoint(cls, v: str | None) -> str | None:
        if v is None:
            return None
        _check(SCRIPT_PATH, "entrypoint", v, "a Python script path (letters, digits, '_', '.', '-', '/'; ends in .py)")
        if ".." in v.split("/"):
            raise ValueError(f"entrypoint: {v!r} may not contain '..'")
        return v

    @field_validator("workdir", "data_path", "vocab_file", "merge_file", "checkpoint_dir", "data_cache_path")
    @classmethod
    def _paths(cls, v: str | None, info: ValidationInfo) -> str | None:
        return None if v is None else check_safe_path(str(info.field_name), v)

    @field_validator("python")
    @classmethod
    def _python(cls, v: str) -> str:
        return check_safe_path("python", v) if v.startswith("/") else check_safe_name("python", v)

    @field_validator("tokenizer_model")
    @classmethod
    def _tokenizer_model(cls, v: str | None) -> str | None:
        if v is None or v.startswith("/"):
            return None if v is None else check_safe_path("tokenizer_model", v)
        return _check(HF_ID, "tokenizer_model", v, "an absolute path or a Hugging Face id like org/name or gpt2")

    @field_validator("extra_args")
    @classmethod
    def _extra_args(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if len(v) > EXTRA_ARGS_MAX_WORDS:
            raise ValueError(f"extra_args: {len(v)} words, more than {EXTRA_ARGS_MAX_WORDS}")
        for i, word in enumerate(v):
            if len(word) > EXTRA_ARG_MAX_CHARS:
                raise ValueError(f"extra_args[{i}]: {len(word)} characters, more than {EXTRA_ARG_MAX_CHARS}")
            _check(
                PLAIN_WORD,
                f"extra_args[{i}]",
                word,
                "a plain word (letters, digits and _@%+=:,./-; no spaces, quotes, ';', '$', backticks or newlines)",
            )
        return v

    @field_validator("nccl_algo")
    @classmethod
    def _nccl_algo(cls, v: str | None) -> str | None:
        if v is None or v in NCCL_ALGOS:
            return v
        raise ValueError(
            f"nccl_algo: {v!r} is refused: NCCL_ALGO is process-wide and {v} exists only for some collectives "
            f"(Tree, NVLS, NVLSTree, CollNet: all-reduce and a few others; PAT: all-gather/reduce-scatter), so NCCL "
            f">= 2.24 fails broadcast or all-gather with an invalid-usage error; use one of {', '.join(NCCL_ALGOS)}"
        )

    @field_validator("nccl_version")
    @classmethod
    def _nccl_version(cls, v: str | None) -> str | None:
        return None if v is None else _check(NCCL_VERSION, "nccl_version", v, "an NCCL version such as 2.27.5")

    @field_validator("k8s_rdma_resource")
    @classmethod
    def _rdma(cls, v: str | None) -> str | None:
        return (
            None
            if v is None
            else _check(
                K8S_RESOURCE, "k8s_rdma_resource", v, "a Kubernetes extended resource name such as rdma/hca_shared"
            )
        )

    @field_validator("master_addr", "slurm_partition", "slurm_account")
    @classmethod
    def _names(cls, v: str | None, info: ValidationInfo) -> str | None:
        return None if v is None else check_safe_name(str(info.field_name), v)

    @field_validator("container_image")
    @classmethod
    def _image(cls, v: str) -> str:
        return _check(IMAGE, "container_image", v, "an image reference (lowercase letters, digits, ._/:@-)")

    @field_validator("k8s_namespace")
    @classmethod
    def _namespace(cls, v: str | None) -> str | None:
        return None if v is None else _check(DNS_LABEL, "k8s_namespace", v, "a Kubernetes namespace (RFC 1123 label)")

    @field_validator("k8s_checkpoint_claim", "k8s_data_claim")
    @classmethod
    def _claim(cls, v: str | None, info: ValidationInfo) -> str | None:
        what = "a PersistentVolumeClaim name (RFC 1123 label)"
        return None if v is None else _check(DNS_LABEL, str(info.field_name), v, what)

    @field_validator("slurm_time_limit")
    @classmethod
    def _time(cls, v: str | None) -> str | None:
        if v is None:
            return None
        _check(SLURM_TIME, "slurm_time_limit", v, "a Slurm time (minutes, [days-]hours:minutes:seconds, ...)")
        minutes = time_limit_minutes(v)
        if minutes > SLURM_TIME_MAX_MIN:
            raise ValueError(
                f"slurm_time_limit: {v} is {minutes:,.0f} minutes; Slurm takes at most {SLURM_TIME_MAX_MIN:,} "
                f"(its time parser returns a C int)"
            )
        return v

    @model_validator(mode="after")
    def _consistent(self) -> RenderOptions:
        if self.lr_warmup_iters is not None and self.lr_warmup_iters >= self.train_iters:
            raise ValueError(f"lr_warmup_iters({self.lr_warmup_iters}) must be < train_iters({self.train_iters})")
        if self.min_lr is not None and self.min_lr > self.lr:
            raise ValueError(f"min_lr({self.min_lr}) must be <= lr({self.lr})")
        if self.tokenizer_type == "GPT2BPETokenizer" and not (self.vocab_file and self.merge_file):
            raise ValueError("tokenizer_type GPT2BPETokenizer needs vocab_file and merge_file")
        if self.tokenizer_type in ("HuggingFaceTokenizer", "GPTSentencePieceTokenizer") and not self.tokenizer_model:
            raise ValueError(f"tokenizer_type {self.tokenizer_type} needs tokenizer_model")
        if self.slurm_requeue and not self.checkpoint_dir:
            raise ValueError("slurm_requeue needs checkpoint_dir: a requeued job resumes from its checkpoints")
        if self.k8s_checkpoint_claim and not self.checkpoint_dir:
            raise InputError("render.k8s_checkpoint_claim", "needs checkpoint_dir, the path it is mounted at")
        if self.k8s_data_claim and not self.data_path:
            raise InputError("render.k8s_data_claim", "needs data_path, whose directory it is mounted at")
        if self.k8s_data_claim and self.data_path and self.checkpoint_dir:
            where = data_dir(self.data_path)
            if inside(where, self.checkpoint_dir) or inside(self.checkpoint_dir, where):  # one mount in the other's
                raise InputError(
                    "render.k8s_data_claim",
                    f"would be mounted at {where}, and checkpoint_dir {self.checkpoint_dir} is in it or it in "
                    "checkpoint_dir: keep checkpoints and the dataset in separate directories",
                )
        if self.data_path and self.tokenizer_type in (None, "NullTokenizer"):
            raise ValueError(
                "data_path needs the dataset's tokenizer_type (and its tokenizer_model or vocab and merge files)"
            )
        tokenizer = [n for n in ("tokenizer_type", "tokenizer_model", "vocab_file", "merge_file") if getattr(self, n)]
        if tokenizer and not self.data_path and self.tokenizer_type != "NullTokenizer":
            # without data the job trains on mock data with the NullTokenizer: the tokenizer would be dropped unsaid
            raise InputError(
                f"render.{tokenizer[0]}", "is set but data_path is not: without data_path the job trains on mock data"
            )
        return self

    @property
    def warmup_iters(self) -> int:
        return self.lr_warmup_iters if self.lr_warmup_iters is not None else min(2000, self.train_iters // 10)

    @property
    def nccl_version_tuple(self) -> tuple[int, int] | None:
        if self.nccl_version is None:
            return None
        major, minor = self.nccl_version.split(".")[:2]
        return int(major), int(minor)

    @property
    def final_lr(self) -> float:
        return self.min_lr if self.min_lr is not None else float(f"{self.lr / 10:.6g}")


def inside(path: str, directory: str) -> bool:
    """`path` is `directory` or below it."""
    path, directory = path.rstrip("/") or "/", directory.rstrip("/") or "/"
    return path == directory or path.startswith(directory if directory == "/" else directory + "/")


def data_dir(data_path: str) -> str:
    """The directory of a dataset prefix (/data/corpus_text_document: its .bin and .idx files are in /data)."""
    return posixpath.dirname(data_path.rstrip("/")) or "/"
