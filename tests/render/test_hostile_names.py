"""Issue 15, item 2: free text never changes the structure of a file. Names are restricted at validation
(printable, no line or paragraph separators, bounded) and every free text is escaped per output format; a
property test renders hostile model and GPU names into every artifact and parses each file back to the same
documents and keys as a plain name gives."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from megatron_check import args_file_words
from pydantic import ValidationError
from render_cases import DATA, fixed_result

from app.planner import PlanRequest
from app.render import RenderOptions, render

SEPARATORS = ["\n", "\r", "\u2028", "\u2029", "\u0085", "\x0b", "\x0c", "\t", "\x00", "\u202e", "\ufeff"]
NASTY = [
    "---",
    "...",
    "kind: Pod",
    "#",
    ": ",
    "- ",
    "{{",
    "}}",
    "$(id)",
    "`id`",
    "'",
    '"',
    "\\",
    "&a",
    "*a",
    "!!python/object",
    "%",
    "|",
    ">",
    "日本",
    "🚀",
    "é",
    " ",
]
names = st.lists(st.sampled_from(SEPARATORS + NASTY) | st.text(max_size=3), min_size=1, max_size=8).map("".join)
printable = (
    st.lists(
        st.sampled_from(NASTY) | st.text(st.characters(exclude_categories=("C", "Zl", "Zp")), max_size=3),
        min_size=1,
        max_size=8,
    )
    .map("".join)
    .filter(lambda t: t.isprintable() and len(t) <= 100)
)
CASES = {  # framework -> (cluster extras, parallel)
    "megatron": ({"nics": ["mlx5_0"], "hosts": ["a", "b"]}, {"tp": 2, "dp": 8}),
    "megatron-deepspeed": ({"hosts": ["a", "b"]}, {"tp": 2, "dp": 8, "zero_stage": 1}),
    "deepspeed": ({"hosts": ["a", "b"]}, {"dp": 16, "zero_stage": 2}),
}


def request(framework: str, model_name: str, gpu_name: str) -> dict[str, Any]:
    cluster, _par = CASES[framework]
    return {
        "model": {"preset": "llama-2-7b", "name": model_name},
        "cluster": {"num_nodes": 2, "gpus_per_node": 8, "gpu": {"preset": "H100-SXM", "name": gpu_name}, **cluster},
        "training": {"global_batch_size": 64, "framework": framework},
    }


def files(framework: str, model_name: str, gpu_name: str, validated: bool = True) -> dict[str, str]:
    """The rendered files. validated=False: the names are put into an already validated plan without
    validation (a plan stored before names were checked), so that only the renderer's escaping stands."""
    options = RenderOptions(job_name="job", **(DATA if framework == "megatron-deepspeed" else {}))
    if validated:
        result = fixed_result(request(framework, model_name, gpu_name), CASES[framework][1])
    else:
        result = fixed_result(request(framework, "plain", "plain"), CASES[framework][1])
        gpu = result.cluster.gpu.model_copy(update={"name": gpu_name})  # model_copy does not validate
        result = result.model_copy(
            update={
                "model": result.model.model_copy(update={"name": model_name}),
                "cluster": result.cluster.model_copy(update={"gpu": gpu}),
            }
        )
    return render(result, 1, options).files


def code_lines(text: str) -> list[str]:
    """Lines that are not comments (the free text may only live in comments)."""
    return [line for line in text.split("\n") if not line.lstrip().startswith("#")]


def keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [keys(v) for v in value]
    return type(value).__name__


def same_structure(name: str, hostile: str, plain: str) -> None:
    if name.endswith(".yaml"):
        h_docs, p_docs = list(yaml.safe_load_all(hostile)), list(yaml.safe_load_all(plain))
        assert [d["kind"] for d in h_docs] == [d["kind"] for d in p_docs]
        assert h_docs[0]["kind"] == "ConfigMap" and h_docs[-1]["kind"] == "PyTorchJob"
        assert h_docs[1:] == p_docs[1:], "the PyTorchJob (or its ComputeDomain) differs"
        assert h_docs[0]["data"].keys() == p_docs[0]["data"].keys()
        for file_name, text in h_docs[0]["data"].items():
            assert code_lines(text) == code_lines(p_docs[0]["data"][file_name]), file_name
    elif name.endswith(".json"):
        h, p = json.loads(hostile), json.loads(plain)
        assert keys(h) == keys(p)
        for file_name, text in h.get("files", {}).items():
            assert code_lines(text) == code_lines(p["files"][file_name]), file_name
    elif name == "megatron_args.txt":
        assert args_file_words(hostile) == args_file_words(plain)
    else:
        assert code_lines(hostile) == code_lines(plain), name
    assert hostile.count("\n") == plain.count("\n"), f"{name}: the free text added or removed lines"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(model_name=names, gpu_name=names, framework=st.sampled_from(list(CASES)))
def test_hostile_names_are_refused_or_change_no_structure(model_name: str, gpu_name: str, framework: str) -> None:
    try:
        PlanRequest(**request(framework, model_name, gpu_name))
    except ValidationError as exc:  # refused, naming the field (and the characters or the length)
        bad = [
            f
            for f, n in (("model.name", model_name), ("gpu.name", gpu_name))
            if any(not c.isprintable() for c in n) or len(n) > 100
        ]
        assert bad and any(f in str(exc) for f in bad), (bad, str(exc)[:300])
        return
    hostile, plain = files(framework, model_name, gpu_name), files(framework, "plain", "plain")
    assert hostile.keys() == plain.keys()
    for name in hostile:
        same_structure(name, hostile[name], plain[name])


@settings(max_examples=25, deadline=None)
@given(model_name=names, gpu_name=names, framework=st.sampled_from(list(CASES)))
def test_the_renderer_escapes_unvalidated_names(model_name: str, gpu_name: str, framework: str) -> None:
    """The second line: even text that skipped validation (a plan stored before the rule) changes no structure."""
    hostile, plain = files(framework, model_name, gpu_name, validated=False), files(framework, "plain", "plain")
    assert hostile.keys() == plain.keys()
    for name in hostile:
        same_structure(name, hostile[name], plain[name])


@settings(max_examples=25, deadline=None)
@given(model_name=printable, gpu_name=printable, framework=st.sampled_from(list(CASES)))
def test_printable_hostile_names_are_accepted_and_change_no_structure(
    model_name: str, gpu_name: str, framework: str
) -> None:
    hostile, plain = files(framework, model_name, gpu_name), files(framework, "plain", "plain")
    assert hostile.keys() == plain.keys() and "plan.json" in hostile
    for name in hostile:
        same_structure(name, hostile[name], plain[name])
    assert json.loads(hostile["plan.json"])["model"]["name"] == model_name  # JSON carries it exactly


def test_the_yaml_injection_of_the_report_is_refused_and_escaped(tmp_path: Path) -> None:
    payload = "x\u2028---\u2028apiVersion: v1\u2028kind: Pod\u2028metadata: {name: evil, namespace: kube-system}"
    with pytest.raises(ValidationError, match=r"model\.name: .* \(U\+2028\)"):
        PlanRequest(**request("megatron", payload, "g"))
    with pytest.raises(ValidationError, match=r"gpu\.name: .* \(U\+2028\)"):
        PlanRequest(**request("megatron", "x", payload))
    arts = files("megatron", payload, payload, validated=False)  # escaped by the renderer all the same
    docs = list(yaml.safe_load_all(arts["pytorchjob.yaml"]))
    assert [d["kind"] for d in docs] == ["ConfigMap", "PyTorchJob"]
    for name, text in arts.items():
        if name.endswith(".sh"):
            (tmp_path / name).write_text(text)
            assert subprocess.run(["bash", "-n", str(tmp_path / name)], capture_output=True).returncode == 0, name


def test_names_are_bounded_and_hf_names_are_cut_to_the_bound() -> None:
    with pytest.raises(ValidationError, match=r"model\.name: 101 characters, at most 100"):
        PlanRequest(**request("megatron", "n" * 101, "g"))
    cfg = {
        "model_type": "llama",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 128,
        "vocab_size": 256,
        "max_position_embeddings": 128,
        "_name_or_path": "m" * 300,
    }
    req = PlanRequest(
        model={"hf_config": cfg}, cluster={"num_nodes": 1, "gpu": "H100-SXM"}, training={"global_batch_size": 8}
    )
    assert req.model.name == "m" * 100
    bad = {**cfg, "_name_or_path": "org/model\u2029evil"}
    with pytest.raises(ValidationError, match=r"model\.name"):
        PlanRequest(
            model={"hf_config": bad}, cluster={"num_nodes": 1, "gpu": "H100-SXM"}, training={"global_batch_size": 8}
        )
