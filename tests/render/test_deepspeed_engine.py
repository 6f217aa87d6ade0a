"""Issue 12, defect 1: every (framework, ZeRO stage, offload) class the planner returns, rendered, is built by
`deepspeed.initialize` with the client optimizer that framework itself passes and trains two steps on CPU.

All cases run in one torchrun job of two gloo ranks (tests/render/ds_engine_worker.py), so the matrix costs
seconds. Megatron-DeepSpeed's client optimizer is read from the rendered megatron_args.txt the way its
get_megatron_optimizer does (megatron/optimizer/__init__.py L83-101): --cpu-optimizer builds DeepSpeedCPUAdam,
a compiled op, which the worker replaces by torch's AdamW with zero_force_ds_cpu_optimizer off (DeepSpeed's
check is `isinstance(optimizer, DeepSpeedCPUAdam)`, engine.py `_configure_optimizer`); without the flag it is
torch.optim.Adam (apex FusedAdam on CUDA), which DeepSpeed refuses under ZeRO-Offload: the file before the fix.
NVMe offload needs DeepSpeed's async_io op (compiled, libaio): its config is checked by DeepSpeedConfig instead.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from megatron_check import Flags, args_file_words
from render_cases import DATA, fixed_result

from app.render import RenderOptions, render
from launcher import spec

pytestmark = [pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
MODEL = {
    "preset": "tiny-gpt",
    "num_layers": 4,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "vocab_size": 256,
    "seq_length": 32,
    "position_embedding_type": "learned_absolute",
    "normalization": "LayerNorm",
}
SHAPE = {k: v for k, v in MODEL.items() if k != "preset"}
# (framework, parallel): every class sharding_options() offers (search.py), on 2 ranks.
CLASSES = [
    *[("deepspeed", {"dp": 2, "zero_stage": z}) for z in (1, 2, 3)],
    *[("deepspeed", {"dp": 2, "zero_stage": z, "offload_optimizer": "cpu"}) for z in (1, 2, 3)],
    ("deepspeed", {"dp": 2, "zero_stage": 3, "offload_optimizer": "cpu", "offload_param": "cpu"}),
    *[("megatron-deepspeed", {"dp": 2, "zero_stage": z}) for z in (1, 2, 3)],
    *[("megatron-deepspeed", {"dp": 2, "zero_stage": z, "offload_optimizer": "cpu"}) for z in (1, 2, 3)],
    ("megatron-deepspeed", {"dp": 2, "zero_stage": 3, "offload_optimizer": "cpu", "offload_param": "cpu"}),
    ("megatron-deepspeed", {"pp": 2, "dp": 1, "zero_stage": 1}),  # DeepSpeed's pipeline engine
]


def megatron_deepspeed_client(args_text: str) -> str:
    """Megatron-DeepSpeed's choice, from its arguments (megatron/optimizer/__init__.py L83-101), off CUDA."""
    return "DeepSpeedCPUAdam" if Flags(args_file_words(args_text)).has("--cpu-optimizer") else "torch.optim.Adam"


def case(framework: str, par: dict[str, Any], run_dir: Path, **cluster: Any) -> dict[str, Any]:
    req = {
        "model": MODEL,
        "cluster": {"num_nodes": 1, "gpus_per_node": 2, "gpu": "A100-80GB", **cluster},
        "training": {"global_batch_size": 8, "framework": framework},
    }
    options = RenderOptions(**(DATA if framework == "megatron-deepspeed" else {}), train_iters=4)
    arts = render(fixed_result(req, {"micro_batch_size": 2, **par}), 1, options)
    label = f"{framework}/{par}"
    out: dict[str, Any] = {
        "label": label,
        "framework": framework,
        "pp": par.get("pp", 1),
        "model": SHAPE,
        "config": json.loads(arts.files["ds_config.json"]),
    }
    if framework == "deepspeed":
        d = run_dir / str(abs(hash(label)))
        d.mkdir(parents=True)
        (d / "ds_config.json").write_text(arts.files["ds_config.json"])
        args = spec.loads(arts.files["plan.json"]).entrypoint.args
        out["trainer_args"] = [a.replace("{run_dir}", str(d)) for a in args]
    else:
        out["client"] = megatron_deepspeed_client(arts.files["megatron_args.txt"])
    return out


@pytest.fixture(scope="module")
def engine_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    d = tmp_path_factory.mktemp("ds-engines")
    cases = [case(fw, par, d) for fw, par in CLASSES]
    before_fix = dict(cases[10])  # Megatron-DeepSpeed ZeRO-1 + CPU offload, as rendered before --cpu-optimizer
    before_fix.update(label="before-fix", client="torch.optim.Adam")
    (d / "cases.json").write_text(json.dumps([before_fix, *cases]))  # first: nothing left over from others
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        str(ROOT / "tests" / "render" / "ds_engine_worker.py"),
        str(d / "cases.json"),
        str(d / "out.json"),
    ]
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(d),
        "DS_ACCELERATOR": "cpu",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=d)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {r["label"]: r for r in json.loads((d / "out.json").read_text())}


def test_every_class_initializes_and_trains_two_steps(engine_results: dict[str, dict[str, Any]]) -> None:
    labels = [f"{fw}/{par}" for fw, par in CLASSES]
    for label in labels:
        r = engine_results[label]
        assert "error" not in r, (label, r.get("trace"))
        assert r["steps"] == 2 and len(r["losses"]) == 2 and all(0 < x < 20 for x in r["losses"]), (label, r)
    by_label = {label: engine_results[label] for label in labels}
    pipe = by_label["megatron-deepspeed/{'pp': 2, 'dp': 1, 'zero_stage': 1}"]
    assert pipe["engine"] == "PipelineEngine" and pipe["optimizer"] == "BF16_Optimizer"  # grad_accum_dtype fp32
    assert by_label["megatron-deepspeed/{'dp': 2, 'zero_stage': 1}"]["optimizer"] == "BF16_Optimizer"
    assert by_label["deepspeed/{'dp': 2, 'zero_stage': 3}"]["optimizer"] == "DeepSpeedZeroOptimizer_Stage3"
    assert by_label["deepspeed/{'dp': 2, 'zero_stage': 1}"]["optimizer"] == "DeepSpeedZeroOptimizer"


def test_megatron_deepspeed_offload_passes_deepspeed_cpu_adam_and_the_old_files_crash(
    engine_results: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    """Defect 1: without --cpu-optimizer, Megatron-DeepSpeed hands DeepSpeed a GPU-style Adam and ZeRO-Offload
    raises ZeRORuntimeException in deepspeed.initialize (run for real above as 'before-fix')."""
    for fw, par in CLASSES:
        if fw == "megatron-deepspeed" and par.get("offload_optimizer") == "cpu":
            assert case(fw, par, tmp_path)["client"] == "DeepSpeedCPUAdam", par
    failed = engine_results["before-fix"]
    assert failed["error"] == "ZeRORuntimeException" and "ZeRO-Offload" in failed["message"]


def test_nvme_offload_config_is_deepspeeds(deepspeed_config, tmp_path: Path) -> None:
    c = case(
        "deepspeed",
        {"dp": 2, "zero_stage": 3, "offload_optimizer": "nvme", "offload_param": "nvme"},
        tmp_path,
        nvme_path="/local_nvme",
    )
    assert c["config"]["zero_optimization"]["offload_optimizer"]["nvme_path"] == "/local_nvme"
    ds = deepspeed_config(c["config"], 2, 1)
    assert ds.zero_config.offload_optimizer.device == "nvme" and ds.zero_config.offload_param.device == "nvme"
    assert ds.zero_config.sub_group_size == c["config"]["zero_optimization"]["sub_group_size"]
