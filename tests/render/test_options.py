"""Hostile input never reaches a shell: names, paths and free-text fields with quotes, `;`, `$()`, backticks or
newlines are refused at validation with a message naming the field; what is allowed is quoted in every script."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError
from render_cases import fixed_result

from app.planner import PlanRequest
from app.render import RenderOptions, render, write_artifacts

HOSTILE = ("a;rm -rf /", "$(reboot)", "`id`", "a'b", 'a"b', "a\nb", "a b", "${HOME}", "a|b", "a&&b", "../x")
FIELDS = (
    "job_name",
    "entrypoint",
    "workdir",
    "python",
    "data_path",
    "tokenizer_model",
    "vocab_file",
    "merge_file",
    "checkpoint_dir",
    "master_addr",
    "container_image",
    "k8s_namespace",
    "slurm_partition",
    "slurm_account",
    "slurm_time_limit",
)


@pytest.mark.parametrize("field", FIELDS)
def test_hostile_text_is_refused_with_the_field_named(field: str) -> None:
    for bad in HOSTILE:
        value = f"/{bad}" if field in ("workdir", "data_path", "vocab_file", "merge_file", "checkpoint_dir") else bad
        with pytest.raises(ValidationError) as info:
            RenderOptions(**{field: value})
        assert field in str(info.value), (field, value, str(info.value))


def test_hostile_extra_args_are_refused_word_by_word() -> None:
    for bad in HOSTILE[:-1]:  # '../x' is a fine argument value; only paths refuse it
        with pytest.raises(ValidationError, match=r"extra_args\[1\]"):
            RenderOptions(extra_args=("--ok", bad))


def test_a_tokenizer_without_data_is_refused_not_dropped() -> None:
    """vocab_file without data_path rendered a mock-data run with the NullTokenizer and no word (QA, 2026-12-06)."""
    from app.service.errors import Refused
    from app.service.requests import parse_plan_request

    request = {"model": "llama-2-7b", "cluster": {"num_nodes": 1, "gpu": "H100-SXM"}, "training": {
        "global_batch_size": 64}, "render": {"vocab_file": "/v.json"}}  # fmt: skip
    with pytest.raises(Refused) as exc:
        parse_plan_request(request)
    assert [(e.field, e.message) for e in exc.value.errors] == [
        ("render.vocab_file", "is set but data_path is not: without data_path the job trains on mock data")
    ]
    assert RenderOptions(tokenizer_type="NullTokenizer").tokenizer_type == "NullTokenizer"  # the mock data's own


def test_extra_args_beyond_what_a_launch_can_carry_are_refused() -> None:
    """A 200,003-character word passed validation and failed every launch with "Argument list too long"; 50,000
    words made the PyTorchJob's ConfigMap 1.49 MB, past its 1 MiB (QA, 2026-12-06)."""
    with pytest.raises(ValidationError, match=r"extra_args\[1\]: 4097 characters, more than 4096"):
        RenderOptions(extra_args=("--ok", "a" * 4097))
    with pytest.raises(ValidationError, match=r"extra_args: 1025 words, more than 1024"):
        RenderOptions(extra_args=("--x",) * 1025)
    assert len(RenderOptions(extra_args=("--x",) * 1024).extra_args) == 1024


@pytest.mark.parametrize(
    ("where", "value"),
    [("nics", ["mlx5_0;reboot"]), ("hosts", ["$(id)"]), ("socket_ifname", "eth0`id`"), ("nvme_path", "/nvme;rm")],
)
def test_hostile_cluster_names_are_refused_by_the_request(where: str, value: object) -> None:
    cluster = {"num_nodes": 1, "gpus_per_node": 8, "gpu": "H100-SXM", where: value}
    with pytest.raises(ValidationError, match=f"cluster.{where}"):
        PlanRequest(model="llama-2-7b", cluster=cluster, training={"global_batch_size": 8})


def test_allowed_but_odd_values_reach_the_program_exactly(tmp_path: Path) -> None:
    """A model name with shell syntax only ever lands in comments; allowed values arrive intact. (A newline in a
    name is refused at validation: test_hostile_names.py.)"""
    request = {
        "model": {"preset": "llama-2-7b", "name": "evil $(touch /tmp/pwned);`id` 'x\""},
        "cluster": {"num_nodes": 2, "gpus_per_node": 8, "gpu": "A100-80GB", "hosts": ["n-1.cluster:a", "n2"]},
        "training": {"global_batch_size": 64, "framework": "megatron"},
    }
    result = fixed_result(request, {"tp": 2, "dp": 8, "micro_batch_size": 1})
    options = RenderOptions(extra_args=("--log-timers-to-tensorboard", "--tensorboard-dir", "/tb/a:b,c@d%e+f=g"))
    arts = render(result, 1, options)
    write_artifacts(arts, tmp_path)
    for name, text in arts.files.items():
        if name.endswith(".sh"):
            for line in text.splitlines():
                assert "$(touch" not in line or line.lstrip().startswith("#"), (name, line)
            proc = subprocess.run(["bash", "-n", str(tmp_path / name)], capture_output=True, text=True)
            assert proc.returncode == 0, proc.stderr
    assert arts.files["megatron_args.txt"].splitlines()[-1] == "--tensorboard-dir /tb/a:b,c@d%e+f=g"
    assert "MASTER_ADDR=n-1.cluster:a" in arts.files["torchrun.sh"]


def test_job_name_defaults_to_a_clean_form_of_the_model_name() -> None:
    request = {
        "model": {"preset": "llama-2-7b", "name": "My Model_v2 (test)"},
        "cluster": {"num_nodes": 1, "gpus_per_node": 8, "gpu": "A100-80GB"},
        "training": {"global_batch_size": 64, "framework": "megatron"},
    }
    arts = render(fixed_result(request, {"tp": 1, "dp": 8}))
    assert "#SBATCH --job-name=my-model-v2-test\n" in arts.files["sbatch.sh"]


def test_options_refuse_inconsistent_settings() -> None:
    with pytest.raises(ValidationError, match=r"lr_warmup_iters\(100\) must be < train_iters\(100\)"):
        RenderOptions(train_iters=100, lr_warmup_iters=100)
    with pytest.raises(ValidationError, match="GPT2BPETokenizer needs vocab_file and merge_file"):
        RenderOptions(tokenizer_type="GPT2BPETokenizer")
    with pytest.raises(ValidationError, match="data_path needs"):
        RenderOptions(data_path="/data/x")
    with pytest.raises(ValidationError, match="master_port"):
        RenderOptions(master_port=80)


def test_every_option_has_a_description() -> None:
    """The web form and the OpenAPI schema show these; no field goes without one."""
    for name, field in RenderOptions.model_fields.items():
        assert field.description and len(field.description) > 10, name
    with pytest.raises(ValidationError):
        RenderOptions(unknown_field=1)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        RenderOptions().model_copy().__setattr__("lr", 1.0)  # frozen


@pytest.mark.parametrize("name", ["gpt2", "t5-small", "meta-llama/Llama-3.1-8B", "/models/tok"])
def test_hub_ids_without_an_organisation_are_tokenizers_too(name: str) -> None:
    """Canonical Hub ids have no organisation (gpt2, bert-base-uncased); they were refused (QA, 2026-12-06)."""
    data = {"data_path": "/data/text_document", "tokenizer_type": "HuggingFaceTokenizer"}
    assert RenderOptions(tokenizer_model=name, **data).tokenizer_model == name
    for bad in ("./tok", "../tok", "org/../x", "tok/"):
        with pytest.raises(ValidationError, match="tokenizer_model"):
            RenderOptions(tokenizer_model=bad, **data)


def test_restarts_without_a_checkpoint_directory_are_said_to_start_over() -> None:
    """Each restart trained again from step 0 without a word (QA, 2026-12-06)."""
    req = {"model": "llama-2-7b", "cluster": {"num_nodes": 1, "gpu": "H100-SXM"}, "training": {"global_batch_size": 64}}
    result = fixed_result(req, {"tp": 2, "dp": 4})
    said = render(result, 1, RenderOptions(max_restarts=2)).notes
    assert any("max_restarts 2 without checkpoint_dir" in n and "step 0" in n for n in said), said
    saved = render(result, 1, RenderOptions(max_restarts=2, checkpoint_dir="/ckpt")).notes
    assert not any("without checkpoint_dir" in n for n in saved)
