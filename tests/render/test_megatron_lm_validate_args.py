"""Optional, strongest check: Megatron-LM's own `parse_args` + `validate_args` on every rendered argument set.

megatron-core (installed) has no `megatron/training`; point TRAINPLAN_MEGATRON_LM at a Megatron-LM checkout of the
installed core version (tag core_v0.16.1) to run this, e.g.
    git clone -b core_v0.16.1 https://github.com/NVIDIA/Megatron-LM /opt/Megatron-LM
    TRAINPLAN_MEGATRON_LM=/opt/Megatron-LM .venv/bin/python -m pytest tests/render/test_megatron_lm_validate_args.py
(its tokenizer modules also need `six` and `regex`). Without it the test is skipped; CI relies on megatron-core's
config classes and tests/render/megatron_rules.py instead. The GPU is reported as Hopper (arch 9)."""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from megatron_check import args_file_words
from test_megatron_args import world_and_env

ROOT = os.environ.get("TRAINPLAN_MEGATRON_LM")
pytestmark = pytest.mark.skipif(not ROOT, reason="TRAINPLAN_MEGATRON_LM (a Megatron-LM checkout) is not set")


@pytest.fixture(scope="module")
def arguments() -> Any:
    """megatron.training.arguments without running megatron/training/__init__.py (which pulls in triton)."""
    assert ROOT and (Path(ROOT) / "megatron" / "training" / "arguments.py").is_file(), ROOT
    sys.path.insert(0, ROOT)
    pkg = types.ModuleType("megatron.training")
    pkg.__path__ = [str(Path(ROOT) / "megatron" / "training")]
    sys.modules["megatron.training"] = pkg
    import megatron.training.global_vars as global_vars

    for name in dir(global_vars):
        if name.startswith(("get_", "set_")):
            setattr(pkg, name, getattr(global_vars, name))
    import megatron.training.arguments as arguments

    return arguments


def arch_of(arts: Any) -> int:
    """The GPU's compute capability major as the files name it (Blackwell 10, else reported as Hopper 9)."""
    return 10 if "B200" in arts.files["train.sh"].splitlines()[1] else 9


def validate(arguments: Any, words: list[str], world: int, env: dict[str, str], arch: int = 9) -> Any:
    with (
        mock.patch.dict(os.environ, {"WORLD_SIZE": str(world), "RANK": "0", **env}),
        mock.patch.object(sys, "argv", ["pretrain_gpt.py", *words]),
    ):
        args = arguments.parse_args()
        with (
            mock.patch.object(arguments, "get_device_arch_version", lambda: arch),
            mock.patch("torch.cuda.get_device_capability", lambda *a: (arch, 0)),
        ):
            arguments.validate_args(args, {})
    return args


def test_megatron_lm_accepts_every_rendered_argument_set(arguments: Any, all_rendered) -> None:
    checked = 0
    for label, result, rank, arts in all_rendered:
        if result.training.framework != "megatron":
            continue
        world, env = world_and_env(arts)
        args = validate(arguments, args_file_words(arts.files["megatron_args.txt"]), world, env, arch_of(arts))
        par = result.plans[rank - 1].parallel
        assert args.data_parallel_size == par.dp, label
        assert (args.virtual_pipeline_model_parallel_size or 1) == par.vpp, label
        assert args.sequence_parallel == (par.sequence_parallel and par.tp > 1), label
        checked += 1
    assert checked >= 20


def test_megatron_lm_accepts_every_new_dimension(arguments: Any, megatron_core: Any) -> None:
    """Issue 10: the layout strings, embedding/loss accounting, recompute methods and modules, hierarchical CP,
    bf16 gradient reduction, FP8 recipes and primary weights, TP overlap and Megatron-FSDP, as rendered."""
    from test_megatron_features import DIMENSIONS, rendered

    for name, (model, par, nodes, _expected) in DIMENSIONS.items():
        precision = "fp8" if "fp8_recipe" in par else "bf16"
        _fl, arts = rendered(model, par, nodes=nodes, precision=precision)
        world, env = world_and_env(arts)
        try:
            args = validate(arguments, args_file_words(arts.files["megatron_args.txt"]), world, env, arch_of(arts))
        except BaseException as exc:  # validate_args asserts; argparse exits
            raise AssertionError(f"{name}: {exc!r}") from exc
        assert args.data_parallel_size == par.get("dp", 1), name


def test_megatron_lm_accepts_every_model_family(arguments: Any, megatron_core: Any) -> None:
    """Defect 7: the released configs of every preset family, as rendered (RoPE base and scaling, QK norm, QKV
    bias, router, MLA's YaRN)."""
    from test_network_roundtrip import FAMILIES, planned_arts

    for family, (cfg, _preset) in FAMILIES.items():
        arts = planned_arts(cfg)
        world, env = world_and_env(arts)
        try:
            validate(arguments, args_file_words(arts.files["megatron_args.txt"]), world, env, arch_of(arts))
        except BaseException as exc:
            raise AssertionError(f"{family}: {exc!r}") from exc


def test_megatron_lm_builds_exactly_the_models_vocabulary(arguments: Any, all_rendered) -> None:
    """Megatron's own tokenizer and padding (build_tokenizer -> _vocab_size_with_padding) give the embedding
    exactly the model's vocab_size rows: NullTokenizer's extra EOD token and the TP padding are accounted for."""
    from megatron.training.tokenizer.tokenizer import build_tokenizer

    checked = 0
    for label, result, _rank, arts in all_rendered:
        if result.training.framework != "megatron" or "--mock-data" not in arts.files["megatron_args.txt"]:
            continue
        world, env = world_and_env(arts)
        args = validate(arguments, args_file_words(arts.files["megatron_args.txt"]), world, env, arch_of(arts))
        build_tokenizer(args)
        assert args.padded_vocab_size == result.model.vocab_size, label
        checked += 1
    assert checked >= 10
