"""Equal specs share one instance across plan() calls, so the search's derived values are reused (interning.py)."""

from __future__ import annotations

from app.planner import interning, plan
from app.planner.specs import PlanRequest

BODY = {"model": "llama-2-7b", "cluster": {"num_nodes": 2, "gpu": "H100-SXM"}, "training": {"global_batch_size": 64}}


def test_a_second_equal_request_reuses_the_first_ones_derived_values() -> None:
    first = plan(PlanRequest.model_validate(BODY))
    cached = first.model.memo_size()
    assert cached > 100  # the search cached layer times, shapes and options on the model
    again = PlanRequest.model_validate(BODY)  # parsed anew, as the service does per request
    assert again.model is not first.model and again.model.memo_size() == 0
    second = plan(again)
    assert second.model is first.model and second.training is first.training and second.cluster is first.cluster
    assert second.model.memo_size() == cached  # nothing new to derive
    timing = {"stats": {"seconds"}}
    assert second.model_dump(exclude=timing) == first.model_dump(exclude=timing)


def test_specs_that_differ_in_any_field_are_not_shared() -> None:
    first = plan(PlanRequest.model_validate(BODY))
    other = plan(PlanRequest.model_validate({**BODY, "training": {"global_batch_size": 128}}))
    assert other.training is not first.training and other.training.global_batch_size == 128
    assert other.model is first.model  # the model is the same: its derived values are kept per training
    assert other.plans[0].estimate.time.step_s != first.plans[0].estimate.time.step_s


def test_the_table_is_bounded_and_an_overgrown_model_is_replaced(monkeypatch) -> None:
    monkeypatch.setattr(interning, "MAX_SPECS", 3)
    specs = [PlanRequest.model_validate({**BODY, "training": {"global_batch_size": 64 * (i + 1)}}) for i in range(5)]
    for s in specs:
        interning.interned(s.training)
    assert len(interning._table) == 3
    assert interning.interned(specs[0].training.model_copy()) is not specs[0].training  # evicted: the oldest
    assert interning.interned(specs[4].training.model_copy()) is specs[4].training  # kept: the newest
    model = PlanRequest.model_validate(BODY).model
    assert interning.interned(model) is model
    plan(PlanRequest.model_validate(BODY))  # fills the interned model's cache
    monkeypatch.setattr(interning, "MAX_MEMO", 10)
    newcomer = PlanRequest.model_validate(BODY).model
    assert interning.interned(newcomer) is newcomer  # the overgrown one is dropped for the newcomer


def test_least_recently_used_models_go_while_their_caches_exceed_the_bound(monkeypatch) -> None:
    small = plan(PlanRequest.model_validate(BODY)).model
    other = {**BODY, "model": "llama-2-13b"}
    larger = plan(PlanRequest.model_validate(other)).model
    monkeypatch.setattr(interning, "MAX_MEMO", small.memo_size() + larger.memo_size() - 1)
    interning.interned(PlanRequest.model_validate(other).model)  # uses the 13B again: the 7B is the older
    assert interning.interned(PlanRequest.model_validate(BODY).model) is not small  # dropped for the bound
    assert interning.interned(PlanRequest.model_validate(other).model) is larger
