"""The cluster profile format: built from a worker's raw numbers, validated, summarised against a catalogue."""

from __future__ import annotations

import copy

import pytest

from launcher.fields import PlanError
from launcher.profile import make_profile, summary_rows, validate
from launcher.spec import Hardware

RAW = {
    "device": {
        "name": "NVIDIA H200",
        "memory_bytes": 150_000_000_000,
        "backend": "nccl",
        "torch": "2.13.0",
        "cuda": "13.0",
    },
    "hosts": ["n0", "n1"],
    "gemm": [
        {"precision": "bf16", "m": 4096, "n": 4096, "k": 4096, "tflops": 700.0},
        {"precision": "bf16", "m": 4096, "n": 4096, "k": 128, "tflops": 300.0},
    ],
    "collectives": [
        {
            "op": "all_reduce",
            "scope": "intra_node",
            "ranks": 8,
            "bytes": 2**20,
            "time_s": 1e-4,
            "algbw_GBps": 10.5,
            "busbw_GBps": 18.4,
        },
        {
            "op": "all_reduce",
            "scope": "intra_node",
            "ranks": 8,
            "bytes": 2**30,
            "time_s": 3e-3,
            "algbw_GBps": 357.9,
            "busbw_GBps": 626.3,
        },
        {
            "op": "send_recv",
            "scope": "inter_node",
            "ranks": 16,
            "bytes": 2**30,
            "time_s": 0.03,
            "algbw_GBps": 35.8,
            "busbw_GBps": 35.8,
        },
    ],
    "host_to_device": {"h2d_GBps": 50.0, "d2h_GBps": 48.0},
    "cpu_adam": {"params_per_s": 2e9, "threads": 16},
}


def test_make_profile_has_exactly_the_documented_keys() -> None:
    profile = make_profile(RAW, 2, 8, [])
    assert list(profile) == [
        "schema_version",
        "kind",
        "created",
        "num_nodes",
        "gpus_per_node",
        "hosts",
        "device",
        "gemm",
        "collectives",
        "host_to_device",
        "cpu_adam",
    ]
    assert profile["kind"] == "trainplan.cluster_profile" and profile["hosts"] == ["n0", "n1"]
    validate(profile)


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("schema_version",), 2, "schema_version 2 is not 1"),
        (("kind",), "x", "kind is not"),
        (("collectives", 0, "op"), "broadcast", "collective entry"),
        (("gemm", 0, "tflops"), 0.0, "gemm entry"),
        (("host_to_device",), {"h2d": 1}, "host_to_device"),
    ],
)
def test_validate_refuses_bad_profiles(path: tuple[object, ...], value: object, message: str) -> None:
    doc = make_profile(RAW, 2, 8, [])
    target = doc
    for key in path[:-1]:
        target = target[key]  # type: ignore[index]
    target[path[-1]] = value  # type: ignore[index]
    with pytest.raises(PlanError, match=message):
        validate(doc)


def test_summary_compares_with_the_catalogue() -> None:
    hw = Hardware(
        name="H200",
        bf16_TFLOPs=989.0,
        intra_node_GBps=450.0,
        inter_node_GBps=50.0,
        host_to_device_GBps=55.0,
        cpu_adam_params_per_s=1e9,
    )
    rows = {r[0]: r for r in summary_rows(make_profile(copy.deepcopy(RAW), 2, 8, []), hw)}
    assert rows["GEMM bf16 (best shape)"][1:] == ("700 TFLOP/s", "989 TFLOP/s", "0.71")
    assert rows[f"all_reduce intra_node busbw @ {2**30} B"][3] == f"{626.3 / 450:.2f}"
    assert rows[f"send_recv inter_node busbw @ {2**30} B"][3] == f"{35.8 / 50:.2f}"
    assert rows["CPU AdamW"][3] == "2.00"
    plain = summary_rows(make_profile(copy.deepcopy(RAW), 2, 8, []), None)
    assert all(r[2] == "-" and r[3] == "-" for r in plain)
