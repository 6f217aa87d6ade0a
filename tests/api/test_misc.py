"""POST /estimate, the catalogues, /healthz and the OpenAPI document."""

from __future__ import annotations

from typing import Any

from app.planner import ModelSpec, ParallelConfig, TrainingSpec, __version__, catalog
from app.planner.specs import ClusterSpec
from app.render import RenderOptions
from tests.api.conftest import SMALL


def test_estimate_evaluates_the_given_layout(sqlite_client: Any) -> None:
    parallel = {"tp": 2, "pp": 2, "dp": 4, "distributed_optimizer": True, "micro_batch_size": 1}
    r = sqlite_client.post("/estimate", json={**SMALL, "parallel": parallel})
    assert r.status_code == 200
    est = r.json()
    assert est["feasible"] is True and est["reasons"] == []
    assert len(est["memory"]["stages"]) == 2  # PP2
    stage = est["memory"]["stages"][0]
    parts = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "other_bytes")
    assert sum(stage[p] for p in parts) == stage["total_bytes"]
    assert abs(sum(est["time"]["breakdown"].values()) - est["time"]["step_s"]) < 1e-6 * est["time"]["step_s"]
    assert sqlite_client.get("/plans").json()["total"] == 0  # nothing stored


def test_estimate_of_the_chosen_plan_matches_the_plan(sqlite_client: Any) -> None:
    created = sqlite_client.post("/plans", json=SMALL).json()
    r = sqlite_client.post("/estimate", json={**SMALL, "parallel": created["chosen"]["parallel"]})
    assert r.json()["time"]["step_s"] == created["chosen"]["estimate"]["time"]["step_s"]


def test_catalog_models(sqlite_client: Any) -> None:
    models = {m["name"]: m for m in sqlite_client.get("/catalog/models").json()}
    assert set(models) == {row["name"] for row in catalog.model_presets()}
    llama = models["llama-2-70b"]
    assert ModelSpec(**llama["spec"]).num_parameters == llama["num_parameters"]
    assert abs(llama["num_parameters"] / llama["published_params"] - 1) < 0.02
    assert llama["source"]


def test_catalog_gpus(sqlite_client: Any) -> None:
    gpus = {g["name"]: g for g in sqlite_client.get("/catalog/gpus").json()}
    assert set(gpus) == {g.name for g in catalog.gpus()}
    h100 = gpus["H100-SXM"]
    assert h100["memory_bytes"] == catalog.gpu("H100-SXM").memory_bytes and h100["efficiency"]["gemm"] > 0


def test_healthz(sqlite_client: Any) -> None:
    r = sqlite_client.get("/healthz")
    assert r.status_code == 200
    assert r.json() == {
        "status": "ok",
        "planner_version": __version__,
        "renderer_version": "0.1.0",
        "database": "sqlite",
    }


def test_healthz_is_503_when_the_database_is_gone(sqlite_client: Any) -> None:
    sqlite_client.app.state.store.engine.dispose()
    sqlite_client.app.state.store.engine = __import__("sqlalchemy").create_engine("sqlite:////nonexistent/dir/x.db")
    r = sqlite_client.get("/healthz")
    assert r.status_code == 503 and "database unavailable" in r.json()["detail"]
    assert sqlite_client.get("/plans").status_code == 503


def test_openapi_documents_bodies_with_the_spec_descriptions(sqlite_client: Any) -> None:
    doc = sqlite_client.get("/openapi.json").json()
    schemas = doc["components"]["schemas"]
    for model, spec in (
        ("ModelSpec", ModelSpec),
        ("ClusterSpec", ClusterSpec),
        ("TrainingSpec", TrainingSpec),
        ("ParallelConfig", ParallelConfig),
        ("RenderOptions", RenderOptions),
    ):
        for name, info in spec.model_fields.items():
            if info.description:
                assert schemas[model]["properties"][name]["description"] == info.description, (model, name)
    body = doc["paths"]["/plans"]["post"]["requestBody"]["content"]["application/json"]
    assert body["schema"] == {"$ref": "#/components/schemas/PlanBody"}  # a typed body: FastAPI wrote the schema
    assert {"preset", "dimensions", "hf_config"} <= set(body["examples"])
    assert "render" in schemas["PlanBody"]["properties"]
    shapes = [s.get("$ref", s.get("type")) for s in schemas["PlanBody"]["properties"]["model"]["oneOf"]]
    assert shapes == [
        "string",
        "#/components/schemas/PresetModel",
        "#/components/schemas/HFConfigModel",
        "#/components/schemas/ModelSpec",
    ]
    assert "seq_length" in schemas["HFConfigModel"]["required"]  # config.json alone does not say how long to train
    clusters = [s["$ref"] for s in schemas["PlanBody"]["properties"]["cluster"]["oneOf"]]
    assert clusters == ["#/components/schemas/SavedClusterRef", "#/components/schemas/ClusterDescription"]
    gpu = schemas["ClusterDescription"]["properties"]["gpu"]["oneOf"]
    assert "H100-SXM" in gpu[0]["enum"] and gpu[2] == {"$ref": "#/components/schemas/GPUSpec"}
    estimate = doc["paths"]["/estimate"]["post"]["requestBody"]["content"]["application/json"]
    assert estimate["schema"] == {"$ref": "#/components/schemas/EstimateBody"}
    assert "parallel" in schemas["EstimateBody"]["properties"]
    for path in ("/clusters", "/deadline"):
        assert doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]


def test_every_route_declares_its_response(sqlite_client: Any) -> None:
    doc = sqlite_client.get("/openapi.json").json()
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            ok = {code: r for code, r in op["responses"].items() if code.startswith("2")}
            assert ok, (method, path)
            for code, response in ok.items():
                if code == "204":
                    continue
                assert response.get("content"), (method, path, code)
                schemas = [c.get("schema") for c in response["content"].values()]
                media = set(response["content"])
                assert any(schemas) or media & {"application/zip", "text/plain"}, (method, path, code)


def test_estimate_refuses_what_has_no_numbers_naming_the_field(sqlite_client: Any) -> None:
    """A fixed layout whose memory and time cannot be worked out is a 422 naming the field (before, the service
    answered these with an unnamed message or, for a layout string placing the wrong number of layers on a dense
    model, with a planner bug: AssertionError in expert_params)."""
    cases = [
        ({"training": {"global_batch_size": 64, "precision": "fp8"}, "cluster": {"num_nodes": 2, "gpu": "A100-80GB"}},
         {"tp": 2}, "training.precision", "A100-80GB has no FP8 tensor cores"),
        ({}, {"pp": 2, "pipeline_layout": "Et*40|t*40L"}, "parallel.pipeline_layout",
         "places 80 layers, num_layers is 32"),
        ({}, {"pp": 4, "pipeline_layout": "Et*16|t*16L"}, "parallel.pipeline_layout",
         "2 stages, not a multiple of pp(4)"),
        ({}, {"pp": 2, "pipeline_layout": "t*16|Et*16L"}, "parallel.pipeline_layout", "must start with E, end with L"),
    ]  # fmt: skip
    for update, parallel, field, words in cases:
        r = sqlite_client.post("/estimate", json={**SMALL, **update, "parallel": parallel})
        assert r.status_code == 422, r.text
        errors = {e["field"]: e["message"] for e in r.json()["errors"]}
        assert words in errors[field], errors
    # a layout that parses and places every layer, with a VPP that disagrees, is still evaluated and says why
    r = sqlite_client.post(
        "/estimate", json={**SMALL, "parallel": {"pp": 2, "vpp": 1, "pipeline_layout": "Et*8|t*8|t*8|t*8L"}}
    )
    assert r.status_code == 200 and any("virtual stages per rank" in x for x in r.json()["reasons"])
