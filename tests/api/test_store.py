"""The plan store on its own: SQLite in WAL mode, frozen artifacts, summaries, URL handling."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text

from app.planner import PlanRequest, plan
from app.store import PlanFilters, PlanStore
from app.store.accounts import AccountStore
from app.store.db import normalize_url
from tests.api.conftest import TINY


@pytest.fixture
def store(db_url: str) -> PlanStore:
    s = PlanStore(db_url)
    s.init()
    return s


def test_sqlite_file_and_folder_are_created_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "plans.db"
    s = PlanStore(f"sqlite:///{path}")
    assert not path.exists()
    s.init()
    assert path.is_file()
    with s.engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1


def test_add_get_page_delete(store: PlanStore) -> None:
    result = plan(PlanRequest(**TINY))
    record, replayed = store.add(TINY, result, ["a notice"], {"train.sh": "echo hi\n"}, "9.9", owner="alice")
    assert not replayed
    got = store.get(record.id)
    assert got is not None
    assert got.result.model_dump() == result.model_dump()
    assert got.request == TINY and got.notices == ["a notice"]
    assert got.planner_version == result.planner_version and got.owner == "alice"
    assert got.created_at == record.created_at.replace(microsecond=got.created_at.microsecond)
    items, total = store.page(10, 0)
    assert total == 1 and items[0].id == record.id and items[0].num_plans == len(result.plans)
    assert items[0].owner == "alice" and store.page(10, 0, owner="bob") == ([], 0)
    assert items[0].created_at.tzinfo is not None
    assert store.artifacts(record.id, 1) == {"train.sh": "echo hi\n"}
    assert store.artifacts(record.id, 2) is None
    assert store.delete(record.id) and not store.delete(record.id)
    assert store.get(record.id) is None and store.artifacts(record.id, 1) is None


def test_two_deletes_of_one_plan_delete_and_audit_it_once(store: PlanStore) -> None:
    """Both deletes read the plan before either removed it: the second removed nothing yet answered 204 and wrote
    a second audit row (QA, 2026-12-06). The SELECT of each waits for the other's, so both always read it."""
    record, _ = store.add(TINY, plan(PlanRequest(**TINY)), [], {}, "9.9", owner="alice")
    both_read = threading.Barrier(2, timeout=10)

    def after(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT plans.owner"):
            both_read.wait()

    event.listen(store.engine, "after_cursor_execute", after)
    results: list[bool] = []
    try:
        threads = [threading.Thread(target=lambda: results.append(store.delete(record.id, actor="qa"))) for _ in "ab"]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    finally:
        event.remove(store.engine, "after_cursor_execute", after)
    assert sorted(results) == [False, True]
    events, _ = AccountStore(store.engine).audit(50, 0)
    assert [(e.action, e.target) for e in events if e.action == "plan.delete"] == [("plan.delete", record.id)]


def test_a_filter_holding_a_nul_matches_nothing_on_every_backend(store: PlanStore) -> None:
    # PostgreSQL refuses a NUL in a text parameter (a 500 that schemathesis found on GET /plans?gpu=...%00)
    result = plan(PlanRequest(**TINY))
    record, _ = store.add(TINY, result, [], {}, "9.9", owner="alice")
    gpu = result.cluster.gpu.name
    assert store.page(10, 0, filters=PlanFilters(gpu=gpu))[1] == 1
    for filters in (
        PlanFilters(gpu=gpu + "\x00"),
        PlanFilters(q="a\x00"),
        PlanFilters(model="\x00"),
        PlanFilters(owner="alice\x00"),
    ):
        assert store.page(10, 0, filters=filters) == ([], 0), filters
    assert store.get(record.id) is not None


def test_the_search_folds_every_letters_case_on_every_backend(store: PlanStore) -> None:
    """SQLite's lower() folds ASCII only, so "ÉCLAIR" was never found, not even as stored (QA, 2026-12-06), while
    PostgreSQL found it: both now fold Unicode capitals; a word that is not there still matches nothing."""
    from app.planner import catalog

    request = {**TINY, "model": {**catalog.model_fields("tiny-gpt"), "name": "ÉCLAIR-Tiny-Ω"}}
    store.add(request, plan(PlanRequest(**request)), [])
    store.add(TINY, plan(PlanRequest(**TINY)), [])
    for q in ("ÉCLAIR-Tiny-Ω", "éclair-tiny-ω", "ÉcLaIr", "tiny-Ω"):
        items, total = store.page(10, 0, filters=PlanFilters(q=q))
        assert total == 1 and items[0].model_name == "ÉCLAIR-Tiny-Ω", q
    assert store.page(10, 0, filters=PlanFilters(q="tiny"))[1] == 2
    assert store.page(10, 0, filters=PlanFilters(q="èclair"))[1] == 0


def test_artifacts_are_frozen_first_writer_wins(store: PlanStore) -> None:
    record, _ = store.add(TINY, plan(PlanRequest(**TINY)), [])
    first = store.put_artifacts(record.id, 2, {"a.txt": "first"})
    second = store.put_artifacts(record.id, 2, {"a.txt": "second", "b.txt": "more"})
    assert first == second == {"a.txt": "first"}
    assert store.rendered_ranks(record.id) == [2]


def test_ids_are_unique_and_url_safe(store: PlanStore) -> None:
    result = plan(PlanRequest(**TINY))
    ids = {store.add(TINY, result, [])[0].id for _ in range(20)}
    assert len(ids) == 20 and all(len(i) == 16 and int(i, 16) >= 0 for i in ids)


@pytest.mark.parametrize(
    ("url", "driver"),
    [
        ("postgres://u:p@db/x", "postgresql+psycopg"),
        ("postgresql://u:p@db/x", "postgresql+psycopg"),
        ("postgresql+psycopg://u:p@db/x", "postgresql+psycopg"),
        ("sqlite:///var/x.db", "sqlite"),
    ],
)
def test_postgres_urls_use_psycopg3(url: str, driver: str) -> None:
    assert normalize_url(url).drivername == driver


@pytest.mark.parametrize("label", ["ci\nalice  tp_fake  admin", "\x1b[2Jwiped", "tab\there"])
def test_a_token_label_with_control_characters_is_refused(tmp_path: Path, label: str) -> None:
    """A newline in a label forged a line of `tokens list`, an escape code reached the admin's terminal (QA)."""
    from app.store import AccountError, AccountStore

    store = PlanStore(f"sqlite:///{tmp_path / 'a.db'}")
    store.init()
    accounts = AccountStore(store.engine)
    accounts.add_user("alice", "user", None)
    with pytest.raises(AccountError, match="has control characters"):
        accounts.create_token("alice", label)
    assert accounts.create_token("alice", "ci runner é")[1].label == "ci runner é"


def test_the_last_enabled_admin_is_neither_demoted_nor_disabled(tmp_path: Path) -> None:
    """The CLI could leave the service without an admin (QA, 2026-12-06)."""
    from app.store import AccountError, AccountStore

    store = PlanStore(f"sqlite:///{tmp_path / 'a.db'}")
    store.init()
    accounts = AccountStore(store.engine)
    accounts.add_user("root", "admin", None)
    for change in (lambda: accounts.set_role("root", "user"), lambda: accounts.set_disabled("root", True)):
        with pytest.raises(AccountError, match="'root' is the last enabled admin"):
            change()
    assert [(u.name, u.role, u.disabled) for u in accounts.users()] == [("root", "admin", False)]  # rolled back
    accounts.add_user("bea", "admin", None)
    accounts.set_role("root", "user")  # another admin is left
    assert {u.name: u.role for u in accounts.users()} == {"bea": "admin", "root": "user"}


def test_a_search_uses_each_word_once_and_eight_at_most() -> None:
    """Fifty one-letter words were fifty LIKE clauses over five columns of every row: 2.7 s on 30,000 plans (QA
    2026-12-07)."""
    assert len(PlanFilters(q=" ".join(["a"] * 50)).conditions()) == 1
    assert len(PlanFilters(q=" ".join("abcdefghijkl")).conditions()) == 8


def test_summaries_come_in_batches_each_after_the_last_row_of_the_one_before(store: PlanStore) -> None:
    """The CSV export reads every matching plan a batch at a time (it loaded 100,000 at once): the same rows in the
    same order as one page, plans stored in the same instant included, filters and a limit applied."""
    result = plan(PlanRequest(**TINY))
    ids = [store.add(TINY, result, [], {}, "9.9", owner="alice" if i % 2 else "bob")[0].id for i in range(7)]
    with store.engine.begin() as conn:  # three plans of one instant: the batches must split them by id
        instant = conn.execute(text("SELECT created_at FROM plans WHERE id = :i"), {"i": ids[3]}).scalar()
        conn.execute(text("UPDATE plans SET created_at = :t WHERE id IN (:a, :b, :c)"),
                     {"t": instant, "a": ids[2], "b": ids[3], "c": ids[4]})  # fmt: skip
    whole = [r.id for r in store.page(100, 0)[0]]
    batches = list(store.summaries(batch=3))
    assert [len(b) for b in batches] == [3, 3, 1] and [r.id for b in batches for r in b] == whole
    assert sorted(whole) == sorted(ids)
    alice = [r.id for b in store.summaries(PlanFilters(owner="alice"), batch=2) for r in b]
    assert alice == [r.id for r in store.page(100, 0, owner="alice")[0]] and len(alice) == 3
    assert [r.id for b in store.summaries(limit=4, batch=3) for r in b] == whole[:4]
    assert list(store.summaries(PlanFilters(owner="nobody"))) == []


def test_an_older_database_gains_the_cluster_column_and_keeps_its_plans(db_url: str) -> None:
    """A database made before plans recorded their saved cluster: the next start adds the column (and its index),
    the old plan reads back with no cluster, and the filter works on new ones."""
    store = PlanStore(db_url)
    store.init()
    old = store.add(TINY, plan(PlanRequest(**TINY)), [], {}, "9.9")[0]
    with store.engine.begin() as conn:  # as a database made before the column was
        conn.execute(text("DROP INDEX ix_plans_cluster_name"))
        conn.execute(text("ALTER TABLE plans DROP COLUMN cluster_name"))
    store.close()
    store = PlanStore(db_url)
    store.init()
    new = store.add(TINY, plan(PlanRequest(**TINY)), [], {}, "9.9", cluster_name="pod-a")[0]
    assert {r.id: r.cluster_name for r in store.page(10, 0)[0]} == {old.id: None, new.id: "pod-a"}
    assert [r.id for r in store.page(10, 0, filters=PlanFilters(cluster="pod-a"))[0]] == [new.id]
    assert store.facets()["clusters"] == ["pod-a"]
    store.close()


def test_a_best_plan_summary_past_the_column_is_clipped_on_every_backend(store: PlanStore) -> None:
    """A PP256 layout string made a 903-character summary: PostgreSQL refused it (VARCHAR(500), a 500 from POST
    /plans and the planner's answer lost; QA 2026-12-07). The list shows it clipped; the stored result keeps it."""
    from app.planner.explain import describe
    from app.store.models import SUMMARY_MAX

    req = {
        "model": {
            "name": "deep",
            "num_layers": 681,
            "hidden_size": 256,
            "num_attention_heads": 4,
            "ffn_hidden_size": 1024,
            "vocab_size": 1024,
            "seq_length": 512,
        },
        "cluster": {"num_nodes": 64, "gpu": "H100-SXM"},
        "training": {"global_batch_size": 1024, "pinned": {"pp": 256}},
    }
    result = plan(PlanRequest(**req))
    assert result.best is not None and len(describe(result.best.parallel)) > SUMMARY_MAX
    record, _ = store.add(req, result, [], {})
    items, _total = store.page(10, 0)
    summary = items[0].best_summary
    assert summary is not None and len(summary) == SUMMARY_MAX and summary.endswith("\u2026")
    got = store.get(record.id)
    assert got is not None and got.result.best == result.best
