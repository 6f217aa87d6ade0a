"""A regression guard on the published runs (benchmarks/data): the model must keep predicting their iteration
times within the errors reported in docs/planner.md. Constants are per GPU generation or per framework, never
per run; this test fails if a change to the model moves the predictions away from the measurements."""

from __future__ import annotations

import statistics

from app.planner import validation
from app.planner.estimate import evaluate


def test_iteration_times_of_published_runs() -> None:
    errors = {}
    for run in validation.load():
        if run.iter_s is None:
            continue
        est = evaluate(run.model, run.cluster, run.training, run.parallel)
        errors[run.name] = est.time.step_s / run.iter_s - 1
    assert len(errors) == 25
    abs_errors = [abs(e) for e in errors.values()]
    assert statistics.mean(abs_errors) < 0.035, errors
    assert max(abs_errors) < 0.1005, {k: v for k, v in errors.items() if abs(v) > 0.09}


def test_activation_memory_of_korthikanti_figure_1() -> None:
    from app.planner import activations as act
    from app.planner.layout import microbatches_in_flight

    rows = [r for r in validation.load() if r.mem_gib is not None]
    assert len(rows) == 8
    for run in rows:
        par, m = run.parallel, run.model
        in_flight = microbatches_in_flight(par, 0, run.training.global_batch_size // (par.micro_batch_size * par.dp))
        ours = act.layer_bytes(m, par, run.training, moe=False) * (m.num_layers // par.pp) * in_flight / 2**30
        theirs = run.mem_gib - 18 * 12 * m.num_layers * m.hidden_size**2 / (par.tp * par.pp) / 2**30
        assert abs(ours / theirs - 1) < 0.002, run.name
