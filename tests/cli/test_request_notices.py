"""What the service says about how it read a request (`notices` of POST /plans) the CLI says too, on stderr, so that
`--json` stays one JSON document on stdout."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from app.service.requests import parse_plan_request

# a Llama-3-8B config.json trained at twice the context it says it supports
LONGER: dict[str, Any] = {
    "model": {
        "hf_config": {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "num_hidden_layers": 32,
            "vocab_size": 128256,
            "max_position_embeddings": 8192,
        },
        "seq_length": 16384,
    },
    "cluster": {"num_nodes": 1, "gpu": "H100-SXM"},
    "training": {"global_batch_size": 64},
}


def run(*args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", *args], input=stdin, capture_output=True, text=True, timeout=120
    )


def expected_notices() -> list[str]:
    notices = parse_plan_request(LONGER).notices  # the reading POST /plans stores as the plan's notices
    assert len(notices) == 1 and "longer than config.json's max_position_embeddings (8,192)" in notices[0]
    return [f"note: {n}" for n in notices]


@pytest.mark.parametrize("flags", [[], ["--json"]])
def test_plan_says_what_the_service_says_about_the_request(flags: list[str]) -> None:
    """A config.json model planned at a longer context than it supports: the service says so (QA 2026-12-07), the
    CLI said nothing (QA 2026-12-08)."""
    done = run("plan", *flags, stdin=json.dumps(LONGER))
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == expected_notices()
    if flags:
        assert json.loads(done.stdout)["plans"]  # stdout is still the JSON alone


def test_render_says_it_too(tmp_path: Path) -> None:
    done = run("render", "--out", str(tmp_path), stdin=json.dumps(LONGER))
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == expected_notices()
