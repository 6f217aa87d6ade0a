"""Idempotency-Key on POST /plans, on SQLite and PostgreSQL: a retry returns the plan the first request made, also
after the server was killed between its commit and its answer; a key reused for another request is refused."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from app.planner import PlanRequest, plan
from app.store import IdempotencyKey, KeyReused, PlanStore
from tests.api.conftest import TINY, ClientFactory, auth, login_token


def test_a_retry_with_the_same_key_gets_the_same_plan(client: Any) -> None:
    first = client.post("/plans", json=TINY, headers={"Idempotency-Key": "run-42"})
    again = client.post("/plans", json=TINY, headers={"Idempotency-Key": "run-42"})
    assert first.status_code == again.status_code == 201
    assert again.json()["id"] == first.json()["id"] and again.json() == first.json()
    assert again.headers["idempotent-replayed"] == "true" and "idempotent-replayed" not in first.headers
    assert (first.headers["x-trainplan-search"], again.headers["x-trainplan-search"]) == ("searched", "replayed")
    assert again.headers["location"] == first.headers["location"]
    assert client.get("/plans").json()["total"] == 1
    fresh = client.post("/plans", json=TINY)  # no key: a new plan every time
    assert fresh.json()["id"] != first.json()["id"] and client.get("/plans").json()["total"] == 2


def test_the_same_key_with_another_body_is_refused(client: Any) -> None:
    client.post("/plans", json=TINY, headers={"Idempotency-Key": "k1"})
    other = {**TINY, "training": {"global_batch_size": 16}}
    r = client.post("/plans", json=other, headers={"Idempotency-Key": "k1"})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "Idempotency-Key"  # as a malformed key names it
    assert "different request" in r.json()["detail"]
    assert client.get("/plans").json()["total"] == 1


def test_keys_belong_to_their_user(make_client: ClientFactory) -> None:
    with make_client() as admin:
        uma = auth(login_token(admin, "uma", "user"))
        mine = admin.post("/plans", json=TINY, headers={"Idempotency-Key": "shared"}).json()
        hers = admin.post("/plans", json=TINY, headers={**uma, "Idempotency-Key": "shared"}).json()
        assert mine["id"] != hers["id"] and hers["owner"] == "uma"


@pytest.mark.parametrize("key", ["", "x" * 256, "has space", "tab\there", "ünï"])
def test_malformed_keys_are_422(client: Any, key: str) -> None:
    r = client.post("/plans", json=TINY, headers={"Idempotency-Key": key.encode("utf-8")})
    field = r.json()["errors"][0]["field"]
    assert r.status_code == 422 and field.endswith("Idempotency-Key"), field
    assert client.get("/plans").json()["total"] == 0
    if key == "ünï":  # the key as sent, not its UTF-8 bytes read as latin-1 ('Ã¼nÃ¯', QA)
        assert "(got 'ünï')" in r.json()["errors"][0]["message"], r.json()


def test_a_deleted_plan_frees_its_key(client: Any) -> None:
    first = client.post("/plans", json=TINY, headers={"Idempotency-Key": "again"}).json()
    assert client.delete(f"/plans/{first['id']}").status_code == 204
    second = client.post("/plans", json=TINY, headers={"Idempotency-Key": "again"})
    assert second.status_code == 201 and second.json()["id"] != first["id"]


def test_an_expired_key_makes_a_new_plan(db_url: str) -> None:
    store = PlanStore(db_url, idempotency_hours=1e-9)
    store.init()
    result = plan(PlanRequest(**TINY))
    key = IdempotencyKey("alice", "old", "0" * 64)
    first, _ = store.add(TINY, result, [], owner="alice", idempotency=key)
    assert store.idempotent_plan(key) is None  # past the window
    second, replayed = store.add(TINY, result, [], owner="alice", idempotency=key)
    assert not replayed and second.id != first.id
    store.close()


def test_concurrent_twins_store_one_plan(db_url: str) -> None:
    """Two requests with one key that both got past the first look-up: the second commit loses and answers with
    the first one's plan."""
    store = PlanStore(db_url)
    store.init()
    result = plan(PlanRequest(**TINY))
    key = IdempotencyKey("alice", "twin", "a" * 64)
    answers: list[tuple[str, bool]] = []
    barrier = threading.Barrier(4)

    def add() -> None:
        barrier.wait()
        record, replayed = store.add(TINY, result, [], owner="alice", idempotency=key)
        answers.append((record.id, replayed))

    threads = [threading.Thread(target=add) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({pid for pid, _ in answers}) == 1 and sorted(r for _, r in answers) == [False, True, True, True]
    assert store.page(10, 0)[1] == 1
    with pytest.raises(KeyReused):
        store.add(TINY, result, [], owner="alice", idempotency=IdempotencyKey("alice", "twin", "b" * 64))
    store.close()
