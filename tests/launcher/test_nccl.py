"""NCCL export checks: NCCL's list syntax, names, values, and what the caller has that the job will not get."""

from __future__ import annotations

import os

from launcher.nccl import check_caller_env, check_plan_env, matches, nccl_checks


def test_matches_follows_nccl_list_syntax() -> None:
    nics = ["eth0", "eth1", "ib0", "lo"]
    assert matches("eth", nics) == ["eth0", "eth1"]
    assert matches("=eth", nics) == []
    assert matches("=eth1,ib0", nics) == ["eth1", "ib0"]
    assert matches("^lo,docker", nics) == ["eth0", "eth1", "ib0"]
    assert matches("mlx5_0:1,mlx5_1", ["mlx5_0", "mlx5_1", "mlx5_2"]) == ["mlx5_0", "mlx5_1"]


def test_plan_env_checks() -> None:
    ifname = sorted(os.listdir("/sys/class/net"))[0]
    ok = check_plan_env({"NCCL_SOCKET_IFNAME": ifname, "NCCL_DEBUG": "INFO"})
    assert [c.status for c in ok] == ["ok"]
    bad = check_plan_env(
        {"NCCL_SOCKET_IFNAME": "=nosuchnic9", "NCCL_IB_DISABLE": "yes", "NCCL_DEBGU": "INFO", "NCCL_DEBUG": "LOUD"}
    )
    text = " | ".join(f"{c.status}: {c.detail}" for c in bad)
    assert "warn: NCCL_DEBGU is not an NCCL variable" in text
    assert "warn: NCCL_IB_DISABLE='yes' should be 0 or 1" in text
    assert "warn: NCCL_DEBUG='LOUD'" in text
    assert "fail: NCCL_SOCKET_IFNAME==nosuchnic9 -> no interface here" in text


def test_caller_variables_are_not_passed_and_that_is_said() -> None:
    checks = check_caller_env({"NCCL_DEBUG": "WARN"}, {"NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "mlx5", "PATH": "/x"})
    text = [c.detail for c in checks]
    assert any("NCCL_IB_HCA=mlx5 is set here but not in the plan" in t for t in text)
    assert any("NCCL_DEBUG: the plan says 'WARN', this shell 'INFO'" in t for t in text)
    assert all(c.status == "warn" for c in checks) and len(checks) == 2


def test_cpu_plans_do_not_care() -> None:
    (check,) = nccl_checks({"NCCL_DEBGU": "x"}, {}, "cpu")
    assert check.status == "ok" and "1 NCCL variable(s) unused" in check.detail
