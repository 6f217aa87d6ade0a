"""POST/GET/DELETE /plans, artifacts and bundle.zip, on SQLite and on PostgreSQL; plans survive a restart."""

from __future__ import annotations

import io
import json
import subprocess
import zipfile
from typing import Any

from app.planner import PlanRequest, plan
from app.render import ARTIFACT_NAMES
from tests.api.conftest import SMALL, TINY, ClientFactory


def _create(client: Any, body: dict[str, Any]) -> dict[str, Any]:
    r = client.post("/plans", json=body)
    assert r.status_code == 201, r.text
    return r.json()  # type: ignore[no-any-return]


def test_create_returns_stored_plan_with_location(client: Any) -> None:
    r = client.post("/plans", json=SMALL)
    assert r.status_code == 201
    body = r.json()
    assert r.headers["location"] == f"/plans/{body['id']}"
    assert body["request"] == SMALL  # the request as sent, preset name and all
    assert body["planner_version"] == body["result"]["planner_version"]
    ranked = body["result"]["plans"]
    assert ranked and [p["rank"] for p in ranked] == list(range(1, len(ranked) + 1))
    assert body["chosen"] == ranked[0]
    assert body["explanation"] == ranked[0]["why"]
    # the same search the CLI runs
    direct = plan(PlanRequest(**SMALL))
    assert [p["parallel"] for p in ranked] == [p.parallel.model_dump(mode="json") for p in direct.plans]
    assert {g["reason"] for g in body["result"]["rejected"]} == {g.reason for g in direct.rejected}
    names = [a["name"] for a in body["links"]["artifacts"]]
    assert names and set(names) <= set(ARTIFACT_NAMES)
    assert body["links"]["bundle"] == f"/plans/{body['id']}/bundle.zip"
    assert body["links"]["html"] == f"/p/{body['id']}"


def test_read_gives_what_create_returned(client: Any) -> None:
    created = _create(client, TINY)
    r = client.get(f"/plans/{created['id']}")
    assert r.status_code == 200
    assert r.json() == created


def test_list_is_newest_first_and_paginated(client: Any) -> None:
    ids = [_create(client, {**TINY, "training": {"global_batch_size": gbs}})["id"] for gbs in (8, 16, 32)]
    r = client.get("/plans", params={"limit": 2})
    assert r.status_code == 200
    page = r.json()
    assert page["total"] == 3 and page["limit"] == 2 and page["offset"] == 0
    assert [i["id"] for i in page["items"]] == ids[::-1][:2]
    assert page["next"] == "/plans?limit=2&offset=2"
    rest = client.get(page["next"]).json()
    assert [i["id"] for i in rest["items"]] == [ids[0]] and rest["next"] is None
    first = page["items"][0]
    assert first["model_name"] == "tiny-gpt" and first["num_gpus"] == 2 and first["gpu_name"] == "H100-SXM"
    assert first["num_plans"] >= 1 and first["best_summary"] and first["url"] == f"/plans/{ids[-1]}"


def test_list_limit_is_capped_by_settings(make_client: ClientFactory) -> None:
    with make_client(max_page_size=2, default_page_size=1) as client:
        for _ in range(3):
            _create(client, TINY)
        assert client.get("/plans").json()["limit"] == 1
        assert len(client.get("/plans", params={"limit": 50}).json()["items"]) == 2


def test_delete_removes_plan_and_files(client: Any) -> None:
    created = _create(client, TINY)
    pid = created["id"]
    assert client.delete(f"/plans/{pid}").status_code == 204
    assert client.get(f"/plans/{pid}").status_code == 404
    assert client.get(created["links"]["artifacts"][0]["url"]).status_code == 404
    assert client.get(f"/plans/{pid}/bundle.zip").status_code == 404
    second = client.delete(f"/plans/{pid}")
    assert second.status_code == 404 and second.json()["errors"][0]["field"] == "id"
    assert client.get("/plans").json()["total"] == 0


def test_every_artifact_link_serves_its_file(client: Any) -> None:
    created = _create(client, SMALL)
    for link in created["links"]["artifacts"]:
        r = client.get(link["url"])
        assert r.status_code == 200, link
        assert r.headers["content-type"].startswith(link["media_type"])
        assert r.text.strip()
        if link["name"].endswith(".json"):
            json.loads(r.text)
        if link["name"].endswith(".sh"):
            check = subprocess.run(["bash", "-n"], input=r.text, text=True, capture_output=True)
            assert check.returncode == 0, (link["name"], check.stderr)
    assert "megatron_args.txt" in {a["name"] for a in created["links"]["artifacts"]}


def test_other_ranks_render_on_demand_and_stay_frozen(client: Any) -> None:
    created = _create(client, SMALL)
    pid, count = created["id"], len(created["result"]["plans"])
    assert count >= 2
    r2 = client.get(f"/plans/{pid}/artifacts/megatron_args.txt", params={"rank": 2})
    assert r2.status_code == 200
    r1 = client.get(f"/plans/{pid}/artifacts/megatron_args.txt")
    chosen, second = created["result"]["plans"][0]["parallel"], created["result"]["plans"][1]["parallel"]
    if chosen != second:
        assert r1.text != r2.text
    assert client.get(f"/plans/{pid}/artifacts/megatron_args.txt", params={"rank": 2}).text == r2.text
    out_of_range = client.get(f"/plans/{pid}/artifacts/train.sh", params={"rank": count + 1})
    assert out_of_range.status_code == 404 and out_of_range.json()["errors"][0]["field"] == "rank"


def test_unknown_or_inapplicable_artifact_is_404_naming_it(client: Any) -> None:
    created = _create(client, TINY)  # megatron: no DeepSpeed JSON
    pid = created["id"]
    unknown = client.get(f"/plans/{pid}/artifacts/passwd")
    assert unknown.status_code == 404 and "known:" in unknown.json()["detail"]
    missing = client.get(f"/plans/{pid}/artifacts/ds_config.json")
    assert missing.status_code == 404 and missing.json()["errors"][0]["field"] == "name"


def test_bundle_holds_every_file_and_the_request(client: Any) -> None:
    created = _create(client, SMALL)
    pid = created["id"]
    r = client.get(f"/plans/{pid}/bundle.zip")
    assert r.status_code == 200 and r.headers["content-type"] == "application/zip"
    assert f"trainplan-{pid}-rank1.zip" in r.headers["content-disposition"]
    with zipfile.ZipFile(io.BytesIO(r.content)) as zf:
        folder = f"trainplan-{pid}-rank1/"
        names = {n.removeprefix(folder) for n in zf.namelist()}
        assert all(n.startswith(folder) for n in zf.namelist())
        artifact_names = {a["name"] for a in created["links"]["artifacts"]}
        assert names == artifact_names | {"README.txt", "request.json", "result.json"}
        for name in artifact_names:
            assert zf.read(folder + name).decode() == client.get(f"/plans/{pid}/artifacts/{name}").text
            mode = zf.getinfo(folder + name).external_attr >> 16
            assert mode == (0o755 if name.endswith(".sh") else 0o644)
        assert json.loads(zf.read(folder + "request.json")) == SMALL
        assert json.loads(zf.read(folder + "result.json")) == created["result"]
    assert client.get(f"/plans/{pid}/bundle.zip").content == r.content  # same plan, same bytes


def test_plans_survive_a_restart(make_client: ClientFactory) -> None:
    with make_client() as first:
        created = _create(first, SMALL)
        file_before = first.get(created["links"]["artifacts"][0]["url"]).text
    with make_client() as second:  # a new app (and engine) on the same database
        r = second.get(f"/plans/{created['id']}")
        assert r.status_code == 200 and r.json() == created
        assert second.get(created["links"]["artifacts"][0]["url"]).text == file_before
        assert second.get("/plans").json()["total"] == 1


def test_a_request_that_fits_nowhere_is_stored_with_suggestions(client: Any) -> None:
    body = {
        "model": "llama-2-70b",
        "cluster": {"num_nodes": 1, "gpus_per_node": 1, "gpu": "A100-40GB"},
        "training": {"global_batch_size": 8},
    }
    created = _create(client, body)
    assert created["chosen"] is None and created["summary"] is None
    assert created["result"]["plans"] == []
    assert created["result"]["rejected"], "the reasons nothing fits"
    assert created["links"]["bundle"] is None and created["links"]["artifacts"] == []
    assert client.get(f"/plans/{created['id']}/bundle.zip").status_code == 404
    assert client.get("/plans").json()["items"][0]["num_plans"] == 0


def test_a_preset_with_its_shape_changed_is_not_listed_under_the_presets_name(sqlite_client: Any) -> None:
    """{"preset": "llama-2-7b", "num_layers": 7} is a 1.68B model that was listed, filtered and titled as
    llama-2-7b (QA, 2026-12-06). Its name says what changed; a new sequence length (not the model's shape), the
    preset's own value, or a name given with the overrides leave the name as it is."""

    def name_of(model: dict[str, Any]) -> str:
        body = {**TINY, "model": model, "cluster": {"num_nodes": 1, "gpus_per_node": 8, "gpu": "H100-SXM"}}
        created = sqlite_client.post("/plans", json=body)
        assert created.status_code == 201, created.text
        return str(created.json()["result"]["model"]["name"])

    assert name_of({"preset": "llama-2-7b", "num_layers": 7}) == "llama-2-7b (num_layers 7)"
    assert name_of({"preset": "llama-2-7b", "num_layers": 8, "ffn_hidden_size": 11008 * 2}) == (
        "llama-2-7b (num_layers 8, ffn_hidden_size 22016)"
    )
    assert name_of({"preset": "llama-2-7b", "seq_length": 2048}) == "llama-2-7b"
    assert name_of({"preset": "llama-2-7b", "num_layers": 32}) == "llama-2-7b"
    assert name_of({"preset": "llama-2-7b", "num_layers": 7, "name": "mini"}) == "mini"
    listed = sqlite_client.get("/plans", params={"model": "llama-2-7b"}).json()
    assert listed["total"] == 2  # the unchanged shapes only
