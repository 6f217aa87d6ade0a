"""plan.json: round trips, and refusals that name the field and the numbers."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from make_plan import tiny_plan

from launcher import spec
from launcher.spec import Entrypoint, Job, Parallel, Plan, PlanError, World


def minimal(**world: object) -> dict[str, object]:
    return {
        "schema_version": 1,
        "kind": "trainplan.plan",
        "job": {"name": "t"},
        "world": {"num_nodes": 1, "gpus_per_node": 2, **world},
        "parallel": {"dp": 2, "global_batch_size": 4},
        "entrypoint": {"script": "train.py"},
    }


def test_round_trip_through_json_file(tmp_path: Path) -> None:
    plan = tiny_plan(nodes=2, procs=2, hosts=("a", "b"), master_addr="a")
    spec.dump(plan, tmp_path / "plan.json")
    loaded = spec.load(tmp_path / "plan.json")
    assert loaded == plan
    assert loaded.to_dict() == plan.to_dict()
    assert json.loads((tmp_path / "plan.json").read_text())["schema_version"] == 1


def test_minimal_plan_gets_defaults_and_derived_accumulation() -> None:
    plan = Plan.from_dict(minimal())
    assert plan.parallel.gradient_accumulation_steps == 2  # 4 / (mbs 1 * dp 2)
    assert plan.job.backend == "torchrun" and plan.world.master_port == 29500
    assert plan.env == {} and plan.model is None


def test_world_size_mismatch_names_both_products() -> None:
    data = minimal(num_nodes=2, gpus_per_node=8)
    data["parallel"] = {"tp": 2, "pp": 2, "dp": 2, "global_batch_size": 2}
    data["world"]["master_addr"] = "head"  # type: ignore[index]
    with pytest.raises(PlanError) as err:
        Plan.from_dict(data)
    assert str(err.value) == (
        "world.num_nodes(2) * world.gpus_per_node(8) = 16 != parallel world size tp(2)*pp(2)*cp(1)*dp(2) = 8"
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"schema_version": 2}, "schema_version 2 is not supported"),
        ({"schema_version": "1"}, "schema_version: expected the integer 1"),
        ({"kind": "something"}, "kind: 'something' is not 'trainplan.plan'"),
        ({"world": {"num_nodes": 1, "gpus_per_node": "2"}}, "world.gpus_per_node: expected an integer, got '2'"),
        ({"world": {"num_nodes": 1, "gpus": 2}}, "world: unknown field(s) 'gpus'"),
        ({"job": {}}, "job: missing required field(s) 'name'"),
        (
            {"parallel": {"dp": 2, "global_batch_size": 6, "micro_batch_size": 2}},
            "parallel.global_batch_size(6) is not a multiple of micro_batch_size(2) * dp(2) = 4",
        ),
        (
            {"parallel": {"dp": 2, "global_batch_size": 8, "gradient_accumulation_steps": 3}},
            "parallel.global_batch_size(8) != micro_batch_size(1) * gradient_accumulation_steps(3) * dp(2) = 6",
        ),
        ({"entrypoint": {"script": "t.py", "args": ["{rundir}/x"]}}, "unknown placeholder {rundir}"),
        ({"env": {"RANK": "0"}}, "env.RANK is set by the launcher"),
        ({"env": {"NCCL_DEBUG": 1}}, "env.NCCL_DEBUG: expected a string"),
        ({"files": {"../x": "y"}}, "files: '../x' is not a valid name"),
        ({"files": {"plan.json": "{}"}}, "files.plan.json: the launcher writes that name itself"),
        ({"world": {"num_nodes": 2, "gpus_per_node": 1}}, "world.master_addr(127.0.0.1) is a loopback address"),
        ({"world": {"num_nodes": 1, "gpus_per_node": 2, "hosts": ["a", "b"]}}, "world.hosts lists 2 hosts"),
        ({"job": {"name": "t", "backend": "mpirun"}}, "job.backend: 'mpirun' is not one of torchrun"),
        ({"job": {"name": "bad name"}}, "job.name: 'bad name' is not a plain name"),
        ({"prediction": {"peak_memory_bytes": [1, 2, 3]}}, "prediction.peak_memory_bytes has 3 values"),
        ({"parallel": {"dp": 2, "global_batch_size": 4, "etp": 0}}, "parallel.etp(0) must be >= 1"),
        (
            {"parallel": {"dp": 2, "global_batch_size": 4, "ep": 4}},
            "parallel.tp(1) * cp(1) * dp(2) = 2 is not a multiple of etp(1) * ep(4) = 4",
        ),
    ],
)
def test_refusals_name_the_field(change: dict[str, object], message: str) -> None:
    data = {**minimal(), **change}
    with pytest.raises(PlanError) as err:
        Plan.from_dict(data)
    assert message in str(err.value)


def test_malformed_json_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_text('{"schema_version": 1,\n  "kind": }')
    with pytest.raises(PlanError, match=r"not valid JSON: Expecting value at line 2 column 11"):
        spec.load(path)


def test_constructed_from_python_validates_too() -> None:
    with pytest.raises(PlanError, match=r"world.gpus_per_node\(0\) must be >= 1"):
        World(gpus_per_node=0)
    with pytest.raises(
        PlanError,
        match=r"parallel\.tp\(1\) \* cp\(1\) \* dp\(3\) = 3 is not a multiple of "
        r"etp\(1\) \* ep\(2\) = 2",
    ):
        Parallel(dp=3, global_batch_size=3, ep=2)
    job = Job(name="x", numa_binding=True)  # type: ignore[arg-type]
    assert job.numa_binding == "node"  # the documented boolean alias


@settings(deadline=None)  # timings on a shared CI machine are noisy
@given(
    nodes=st.integers(1, 4),
    per_node=st.integers(1, 8),
    tp=st.sampled_from([1, 2, 4]),
    pp=st.sampled_from([1, 2]),
    mbs=st.integers(1, 4),
    gas=st.integers(1, 4),
)
def test_consistent_plans_round_trip_and_inconsistent_ones_are_refused(
    nodes: int, per_node: int, tp: int, pp: int, mbs: int, gas: int
) -> None:
    world = nodes * per_node
    w = World(num_nodes=nodes, gpus_per_node=per_node, master_addr="head")
    e = Entrypoint(script="t.py")
    if world % (tp * pp) == 0:
        dp = world // (tp * pp)
        p = Parallel(tp=tp, pp=pp, dp=dp, micro_batch_size=mbs, global_batch_size=mbs * gas * dp)
        plan = Plan(job=Job(name="h"), world=w, parallel=p, entrypoint=e)
        assert Plan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
        assert plan.parallel.gradient_accumulation_steps == gas
    wrong = Parallel(tp=tp, pp=pp, dp=world + 1, micro_batch_size=mbs, global_batch_size=mbs * (world + 1))
    with pytest.raises(PlanError, match=rf"= {world} != parallel world size .* = {tp * pp * (world + 1)}"):
        Plan(job=Job(name="h"), world=w, parallel=wrong, entrypoint=e)


def test_expert_parallelism_is_carved_out_of_tp_cp_dp_with_expert_tp() -> None:
    """megatron-core parallel_state: tp*cp*dp % (etp*ep) == 0, ETP defaulting to TP."""
    p = Parallel(tp=4, dp=2, ep=4, etp=1, global_batch_size=8)  # EP spans the TP ranks: 8 = 1 * 4 * EDP 2
    assert (p.etp, p.world_size) == (1, 8)
    assert Parallel(tp=2, dp=4, ep=4, global_batch_size=8).etp == 2  # default: ETP = TP, 8 = 2 * 4
    assert Parallel(tp=1, cp=2, dp=2, ep=4, global_batch_size=4).etp == 1  # EP over DP x CP, as before
    with pytest.raises(
        PlanError,
        match=r"tp\(4\) \* cp\(1\) \* dp\(2\) = 8 is not a multiple of "
        r"etp\(4\) \* ep\(4\) = 16",
    ):
        Parallel(tp=4, dp=2, ep=4, global_batch_size=8)  # ETP = TP leaves no room for EP 4
    with pytest.raises(PlanError, match=r"= 4 is not a multiple of etp\(3\) \* ep\(1\) = 3"):
        Parallel(tp=2, dp=2, etp=3, global_batch_size=2)


def test_older_plans_without_etp_still_load() -> None:
    data = minimal()
    data["parallel"] = {"tp": 2, "dp": 1, "global_batch_size": 1}
    plan = Plan.from_dict(data)
    assert plan.parallel.etp == 2 and plan.to_dict()["parallel"]["etp"] == 2
    assert Plan.from_dict(plan.to_dict()) == plan


def test_replace_keeps_validation() -> None:
    plan = tiny_plan()
    with pytest.raises(PlanError, match=r"= 2 != parallel world size tp\(1\)\*pp\(1\)\*cp\(1\)\*dp\(3\) = 3"):
        replace(plan, parallel=replace(plan.parallel, dp=3, global_batch_size=6))


def test_virtual_stages_may_hold_the_embedding_or_the_loss_alone() -> None:
    """NVIDIA's Llama-3.1 405B: 126 layers on PP16 x VPP8 = 128 virtual stages, the embedding and the loss counted
    as pipeline units (--account-for-embedding/loss-in-pipeline-split). plan.json carries both flags, and the
    layout is taken; without them, or with one more stage, it is refused (before, the renderer could not write
    plan.json for this layout: 'model.num_layers(126) < pp(16) * vpp(8) = 128')."""
    from launcher.sections import Model
    from launcher.strategy import Strategy

    def plan(vpp: int, **accounted: bool) -> Plan:
        return Plan(
            job=Job(name="l405"),
            world=World(num_nodes=16, gpus_per_node=8, master_addr="head"),
            parallel=Parallel(tp=8, pp=16, vpp=vpp, dp=1, global_batch_size=16),
            entrypoint=Entrypoint(script="pretrain_gpt.py"),
            model=Model(num_layers=126, hidden_size=16384, num_attention_heads=128, vocab_size=128256, seq_length=8192),
            strategy=Strategy(schedule="interleaved", **accounted),
        )

    both = {"account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True}
    taken = plan(8, **both)
    assert Plan.from_dict(json.loads(json.dumps(taken.to_dict()))) == taken
    with pytest.raises(PlanError, match=r"model\.num_layers\(126\) < pp\(16\) \* vpp\(8\) = 128"):
        plan(8)
    with pytest.raises(PlanError, match=r"num_layers\(126\) \+ the embedding/loss units\(1\) < pp\(16\) \* vpp\(8\)"):
        plan(8, account_for_embedding_in_pipeline_split=True)
    with pytest.raises(PlanError, match=r"\+ the embedding/loss units\(2\) < pp\(16\) \* vpp\(9\) = 144"):
        plan(9, **both)


def test_a_head_size_of_its_own_needs_no_divisible_width() -> None:
    """Megatron-LM asserts hidden_size % num_attention_heads only without --kv-channels; plan.json carries the
    head size, so a model with its own (hidden 8, 16 heads of 64) is taken, and without it refused by name."""
    from launcher.sections import Model

    own = Model(num_layers=2, hidden_size=8, num_attention_heads=16, vocab_size=100, seq_length=64, kv_channels=64)
    assert own.head_size == 64
    assert Model(num_layers=2, hidden_size=64, num_attention_heads=16, vocab_size=100, seq_length=64).head_size == 4
    with pytest.raises(
        PlanError, match=r"hidden_size\(8\) is not divisible by model\.num_attention_heads\(16\) and no"
    ):
        Model(num_layers=2, hidden_size=8, num_attention_heads=16, vocab_size=100, seq_length=64)
    with pytest.raises(PlanError, match=r"model\.kv_channels"):
        Model(num_layers=2, hidden_size=8, num_attention_heads=16, vocab_size=100, seq_length=64, kv_channels=0)


def test_a_top_that_is_not_an_object_names_the_file_it_came_from(tmp_path: Path) -> None:
    """`show arr.json` of a file holding `[]` said "plan.json: expected a JSON object" (QA 2026-12-08)."""
    path = tmp_path / "arr.json"
    path.write_text("[]")
    with pytest.raises(PlanError, match=rf"^{path}: expected a JSON object at the top, got list$"):
        spec.load(path)
