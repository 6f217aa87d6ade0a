"""OpenAPI for the request bodies: the planner's PlanRequest / EstimateRequest schemas (their Field descriptions
are the documentation), widened where the planner accepts shorthands (preset names, {"preset": ...},
{"hf_config": ...}), with examples."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from app.api.schemas import ErrorBody
from app.planner import EstimateRequest, PlanRequest, catalog
from app.render import RenderOptions

REF = "#/components/schemas/{model}"
_ERROR = {"model": ErrorBody}
AUTH_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {**_ERROR, "description": "No valid credentials: send `Authorization: Bearer tp_...` or log in."},
    403: {
        **_ERROR,
        "description": "The role does not allow it, the plan is someone else's, or a session's "
        "change came without its CSRF token or from another origin.",
    },
    429: {**_ERROR, "description": "Over the rate limit; retry after `Retry-After` seconds."},
}
SECURITY_SCHEMES = {
    "token": {"type": "http", "scheme": "bearer", "description": "An API token, `tp_...` (trainplan tokens create)."},
    "session": {
        "type": "apiKey",
        "in": "cookie",
        "name": "trainplan_session",
        "description": "The web login (POST /login); changes also need the X-CSRF-Token header.",
    },
}
OPEN_PATHS = {"/healthz"}


def _model_shorthands() -> list[dict[str, Any]]:
    names = [row["name"] for row in catalog.model_presets()]
    return [
        {"type": "string", "enum": names, "description": "A preset name (GET /catalog/models), e.g. llama-2-70b."},
        {
            "type": "object",
            "description": '{"preset": name, ...ModelSpec fields to override}',
            "required": ["preset"],
            "properties": {"preset": {"type": "string", "enum": names}},
        },
        {
            "type": "object",
            "description": '{"hf_config": {...a Hugging Face config.json...}, ...overrides, e.g. seq_length}',
            "required": ["hf_config"],
            "properties": {"hf_config": {"type": "object"}},
        },
    ]


def _gpu_shorthands() -> list[dict[str, Any]]:
    names = [gpu.name for gpu in catalog.gpus()]
    return [
        {"type": "string", "enum": names, "description": "A catalogue name (GET /catalog/gpus), e.g. H100-SXM."},
        {
            "type": "object",
            "description": '{"preset": name, ...GPUSpec fields to override}',
            "required": ["preset"],
            "properties": {"preset": {"type": "string", "enum": names}},
        },
    ]


EXAMPLE_PLAN = {
    "model": "llama-2-70b",
    "cluster": {
        "num_nodes": 32,
        "gpus_per_node": 8,
        "gpu": "H100-SXM",
        "nics": ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7"],
    },
    "training": {"global_batch_size": 512},
}
EXAMPLES: dict[str, dict[str, Any]] = {
    "preset": {"summary": "A preset model", "value": EXAMPLE_PLAN},
    "dimensions": {
        "summary": "Model dimensions",
        "value": {
            **EXAMPLE_PLAN,
            "model": {
                "name": "my-7b",
                "num_layers": 32,
                "hidden_size": 4096,
                "num_attention_heads": 32,
                "vocab_size": 32000,
                "seq_length": 4096,
                "swiglu": True,
            },
        },
    },
    "hf_config": {
        "summary": "A Hugging Face config.json",
        "value": {
            **EXAMPLE_PLAN,
            "model": {
                "hf_config": {
                    "model_type": "llama",
                    "hidden_size": 4096,
                    "num_hidden_layers": 32,
                    "num_attention_heads": 32,
                    "intermediate_size": 11008,
                    "vocab_size": 32000,
                    "max_position_embeddings": 4096,
                },
                "seq_length": 4096,
            },
        },
    },
}
EXAMPLE_ESTIMATE = {
    **EXAMPLE_PLAN,
    "parallel": {
        "tp": 4,
        "pp": 4,
        "dp": 16,
        "distributed_optimizer": True,
        "sequence_parallel": True,
        "micro_batch_size": 1,
    },
}


def request_body(model: type[BaseModel], examples: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """`openapi_extra` for a route whose JSON body is validated as `model` inside the route."""
    content = {"schema": {"$ref": REF.format(model=model.__name__)}, "examples": examples}
    return {"requestBody": {"required": True, "content": {"application/json": content}}}


def _request_schemas() -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    for model in (PlanRequest, EstimateRequest):
        schema = model.model_json_schema(ref_template=REF)
        schemas.update(schema.pop("$defs", {}))
        schema["properties"]["model"] = {"anyOf": [*_model_shorthands(), {"$ref": REF.format(model="ModelSpec")}]}
        schemas[model.__name__] = schema
    render = RenderOptions.model_json_schema(ref_template=REF)
    schemas.update(render.pop("$defs", {}))
    schemas["RenderOptions"] = render
    schemas["PlanRequest"]["properties"]["render"] = {
        "$ref": REF.format(model="RenderOptions"),
        "description": "Optional: how the plan's files are written (job name, paths, data, launch settings).",
    }
    gpu = schemas["ClusterSpec"]["properties"]["gpu"]
    schemas["ClusterSpec"]["properties"]["gpu"] = {
        "anyOf": [*_gpu_shorthands(), {"$ref": gpu["$ref"]}],
        "description": gpu.get("description", ""),
    }
    return schemas


def _security(path: str, method: str, anonymous_read: bool) -> list[dict[str, list[str]]]:
    if path in OPEN_PATHS:
        return []
    required: list[dict[str, list[str]]] = [{"token": []}, {"session": []}]
    return [{}, *required] if anonymous_read and method in ("get", "head") else required


def install(app: FastAPI, anonymous_read: bool = False) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            components = schema.setdefault("components", {})
            for name, body in _request_schemas().items():
                components.setdefault("schemas", {}).setdefault(name, body)
            components["securitySchemes"] = SECURITY_SCHEMES
            for path, ops in schema["paths"].items():
                for method, op in ops.items():
                    op["security"] = _security(path, method, anonymous_read)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
