"""A config.json without a training length is refused naming model.seq_length (API, CLI); the planner's typed
input errors reach the user with their field through the planner process; the plan list searches in SQL."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from app.store.models import PlanRow
from tests.api.conftest import TINY

ROOT = Path(__file__).resolve().parents[2]
CONFIG = {
    "model_type": "llama",
    "hidden_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 512,
    "vocab_size": 1000,
    "max_position_embeddings": 131072,
}


def test_config_json_without_seq_length_is_refused_naming_it(sqlite_client: Any, tmp_path: Path) -> None:
    body = {**TINY, "model": {"hf_config": CONFIG}}
    for url, extra in (("/plans", {}), ("/estimate", {"parallel": {}})):
        r = sqlite_client.post(url, json={**body, **extra})
        assert r.status_code == 422, r.text
        error = r.json()["errors"][0]
        assert error["field"] == "model.seq_length" and "max_position_embeddings = 131072" in error["message"]
    ok = sqlite_client.post("/plans", json={**TINY, "model": {"hf_config": CONFIG, "seq_length": 2048}})
    assert ok.status_code == 201 and ok.json()["result"]["model"]["seq_length"] == 2048
    for loose in (True, "2048"):  # true was planned at 1 token a sample, "2048" taken (QA 2026-12-07)
        r = sqlite_client.post("/plans", json={**TINY, "model": {"hf_config": CONFIG, "seq_length": loose}})
        assert r.status_code == 422 and r.json()["errors"][0]["field"] == "model.seq_length", (loose, r.text)
        assert "expected a number" in r.json()["errors"][0]["message"]
    whole = sqlite_client.post("/plans", json={**TINY, "model": {"hf_config": CONFIG, "seq_length": 2048.0}})
    assert whole.status_code == 201  # a whole number written as a float, as a preset's length takes it
    path = tmp_path / "req.json"
    path.write_text(json.dumps(body))
    cli = subprocess.run([sys.executable, "-m", "app", "plan", str(path)], capture_output=True, text=True, cwd=ROOT)
    assert cli.returncode == 2 and "model.seq_length: give the sequence length" in cli.stderr


def test_the_planners_typed_errors_keep_their_field(sqlite_client: Any) -> None:
    # training.pinned.num_nodes larger than the cluster: the planner's InputError, raised in the planner process
    r = sqlite_client.post("/plans", json={**TINY, "training": {"global_batch_size": 8, "pinned": {"num_nodes": 3}}})
    assert r.status_code == 422, r.text
    assert r.json()["errors"] == [{"field": "training.pinned.num_nodes", "message": "3 > cluster.num_nodes(1)"}], (
        r.json()
    )


def test_the_plan_list_searches_every_stored_plan_in_sql(sqlite_client: Any) -> None:
    old = sqlite_client.post("/plans", json=TINY).json()
    store = sqlite_client.app.state.store
    start = datetime.now(UTC) + timedelta(seconds=1)
    with Session(store.engine) as session, session.begin():
        row = session.get(PlanRow, old["id"])
        copies = {c.name: getattr(row, c.name) for c in PlanRow.__table__.columns}
        session.add_all(
            PlanRow(**{**copies, "id": f"{i:016x}", "created_at": start + timedelta(seconds=i), "model_name": "other"})
            for i in range(2100)
        )
    page = sqlite_client.get("/recent", params={"model": "tiny-gpt"})
    assert (
        page.status_code == 200 and f"/p/{old['id']}" in page.text and "1 of the 2101 stored plans match" in page.text
    )
    found = sqlite_client.get("/plans", params={"q": old["id"][:10]}).json()
    assert found["total"] == 1 and found["items"][0]["id"] == old["id"]
    words = sqlite_client.get("/plans", params={"q": "OTHER h100", "limit": 5}).json()
    assert words["total"] == 2100 and len(words["items"]) == 5
    assert sqlite_client.get("/plans", params={"q": "%"}).json()["total"] == 0  # LIKE wildcards are escaped
    csv = sqlite_client.get("/recent.csv", params={"model": "tiny-gpt"}).text.splitlines()
    assert len(csv) == 2 and csv[1].startswith(old["id"])
