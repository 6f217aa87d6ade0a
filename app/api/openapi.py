"""What the OpenAPI document adds to FastAPI's own (the bodies' schemas come from their types, app/service/bodies.py):
the two security schemes, which operations need them, the error responses every route shares, and examples."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from app.api.schemas import ErrorBody

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
EXAMPLES: dict[str, Any] = {
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
            components["securitySchemes"] = SECURITY_SCHEMES
            for path, ops in schema["paths"].items():
                for method, op in ops.items():
                    op["security"] = _security(path, method, anonymous_read)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
