"""Sizes the service refuses before any work: a fixed layout larger than the model it splits (which once ran for
55 s and answered 390 MB for `pp=2,000,000`), and models beyond what the plan store can hold."""

from __future__ import annotations

from app.planner import EstimateRequest, PlanRequest
from app.planner.errors import FieldError
from app.planner.specs import ModelSpec

# No trained model is within three orders of magnitude of this (the largest published are ~2e12); it keeps every
# stored parameter count inside a 64-bit integer column, the limit of SQLite and PostgreSQL alike.
MAX_PARAMETERS = 10**15
# The largest cluster a request may describe (ClusterSpec: 100,000 nodes of at most 256 GPUs).
MAX_WORLD = 100_000 * 256


def model_size_errors(model: ModelSpec, field: str = "model") -> list[FieldError]:
    params = model.num_parameters
    if params > MAX_PARAMETERS:
        return [
            FieldError(
                field,
                f"the model has {params:.3g} parameters, above the {MAX_PARAMETERS:.0e} this "
                "service plans for: check num_layers, hidden_size, ffn_hidden_size, kv_channels and "
                "the MoE sizes",
            )
        ]
    return []


def layout_errors(request: EstimateRequest) -> list[FieldError]:
    """A fixed layout must split the model it is given: every rank gets at least one head, layer, token,
    sequence and expert. Each error names the two numbers that disagree."""
    par, model, training = request.parallel, request.model, request.training
    experts = model.num_experts if model.is_moe and model.num_experts else 1
    expert_width = model.moe_ffn_hidden_size or model.ffn_hidden_size or 1
    # what the pipeline splits: the layers, and the embedding and loss where they count as layers (NVIDIA's 405B
    # runs 126 + 2 on PP16 x VPP8: refused here as "128 > 126", QA 2026-12-07); a layout string says itself what
    # each stage holds, empty stages included (Megatron's pretty_repr prints "(empty stage)"): its own rule checks it
    accounted = int(par.account_for_embedding_in_pipeline_split) + int(par.account_for_loss_in_pipeline_split)
    units = model.num_layers + accounted
    units_name = "model.num_layers" + (f" + {accounted} (embedding, loss)" if accounted else "")
    pipeline = [
        ("parallel.pp", par.pp, units_name, units, "each pipeline stage needs a layer"),
        ("parallel.pp * parallel.vpp", par.pp * par.vpp, units_name, units, "each virtual stage needs a layer"),
    ]
    checks = [
        *(pipeline if par.pipeline_layout is None else []),
        (
            "parallel.tp",
            par.tp,
            "model.num_attention_heads",
            model.num_attention_heads,
            "each tensor-parallel rank needs at least one attention head",
        ),
        ("parallel.cp", par.cp, "model.seq_length", model.seq_length, "each context-parallel rank needs a token"),
        ("parallel.ep", par.ep, "model.num_experts", experts, "each expert-parallel rank needs an expert"),
        (
            "parallel.etp",
            par.etp or 1,
            "the expert FFN width",
            expert_width,
            "each expert tensor-parallel rank needs a column of the expert MLP",
        ),
        (
            "parallel.dp",
            par.dp,
            "training.global_batch_size",
            training.global_batch_size,
            "each data-parallel rank needs a sequence",
        ),
        (
            "parallel.micro_batch_size",
            par.micro_batch_size,
            "training.global_batch_size",
            training.global_batch_size,
            "a micro-batch cannot be larger than the batch",
        ),
        (
            "parallel.first_stage_layers",
            par.first_stage_layers or 1,
            "model.num_layers",
            model.num_layers,
            "a stage cannot hold more layers than the model has",
        ),
        (
            "parallel.last_stage_layers",
            par.last_stage_layers or 1,
            "model.num_layers",
            model.num_layers,
            "a stage cannot hold more layers than the model has",
        ),
        (
            "parallel.recompute_num_layers",
            par.recompute_num_layers or 1,
            "model.num_layers",
            model.num_layers,
            "it cannot recompute more layers than the model has",
        ),
        (
            "parallel.tp * pp * dp * cp",
            par.world_size,
            "the largest cluster",
            MAX_WORLD,
            "no cluster a request can describe has that many GPUs",
        ),
    ]
    errors = []
    for name, value, other, limit, why in checks:
        if value > limit:
            field = name if "*" not in name else "parallel"
            errors.append(FieldError(field, f"{name}({value}) > {other}({limit}): {why}"))
    return errors


def pin_errors(request: PlanRequest) -> list[FieldError]:
    """Pinned sizes must fit the GPUs the search may use: each one, and their product."""
    pins, cluster = request.training.pinned, request.cluster
    gpus = (pins.num_nodes or cluster.num_nodes) * cluster.gpus_per_node
    where = "training.pinned.num_nodes x cluster.gpus_per_node" if pins.num_nodes else "the cluster's GPUs"
    sizes = {name: getattr(pins, name) for name in ("tp", "pp", "dp", "cp")}
    errors = [
        FieldError(f"training.pinned.{name}", f"training.pinned.{name}({value}) > {where}({gpus})")
        for name, value in sizes.items()
        if value is not None and value > gpus
    ]
    product = 1
    for value in sizes.values():
        product *= value or 1
    if not errors and product > gpus:
        named = " * ".join(f"{n}({v})" for n, v in sizes.items() if v is not None)
        errors.append(FieldError("training.pinned", f"{named} = {product} > {where}({gpus})"))
    return errors
