"""QA round 7: every JSON the service, the form and the CLI read goes through one strict reader (nesting, NaN, 1e400,
long integers and keys given twice are 422s naming the JSON path); saved cluster names are unique without case even
for concurrent saves (a unique index, added to older databases); a DATABASE_URL that names no usable SQLite file is
refused in one line; the form says what is wrong with a mode it does not know."""

from __future__ import annotations

import itertools
import json
import logging
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.settings import Settings
from app.store import ClusterStore, PlanStore
from app.store.models import ClusterRow
from app.web import forms
from app.web.pages import SECTIONS
from tests.api.conftest import TINY, ClientFactory
from tests.web.html_dom import element

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_NAME_INDEX = "ux_clusters_lower_name"  # app/store/models.py: saved cluster names unique without case
NOWHERE = "192.0.2.1"  # TEST-NET-1: a `serve` that got as far as binding would fail at once, not serve
DEEP = "[" * 1000 + "]" * 1000  # past the interpreter's recursion limit inside json.loads


def _errors(r: Any) -> dict[str, str]:
    return {e["field"]: e["message"] for e in r.json()["errors"]}


def _submit(client: Any, **values: str) -> Any:
    return client.post("/", data=forms.defaults(SECTIONS) | values, follow_redirects=False)


# -- 1. the form's JSON fields -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "field", "words"),
    [
        ({"cluster_mode": "custom", "cluster.profile": DEEP}, "cluster.profile", "nested more than 32 levels deep"),
        ({"model_mode": "dims", "model.rope_scaling": DEEP}, "model.rope_scaling", "nested more than 32 levels deep"),
        ({"cluster_mode": "custom", "cluster.profile": '{"a": NaN}'}, "cluster.profile", "NaN is not a number"),
        ({"model_mode": "dims", "model.rope_scaling": '{"factor": 8, "factor": 4}'}, "model.rope_scaling", "'factor'"),
    ],
)
def test_a_json_form_field_is_read_strictly_and_refused_beside_it(
    sqlite_client: Any, values: dict[str, str], field: str, words: str
) -> None:
    """1000 brackets in cluster.profile or model.rope_scaling were a RecursionError: a 500."""
    r = _submit(sqlite_client, **values)
    assert r.status_code == 422, r.text[:500]
    assert words in element(r.text, f"field-{field}")[0]
    assert sqlite_client.get("/plans").json()["total"] == 0


# -- 2. saved cluster names, unique without case, also when saved at once --------------------------------------------


@pytest.fixture
def racing_saves(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """The first 3 name checks of ClusterStore.add wait for each other: all three have found the name free before
    any inserts (the race QA hit with concurrent POSTs)."""
    import app.store.clusters as clusters

    racers = 3
    barrier, calls = threading.Barrier(racers), itertools.count()

    class Racing(Session):
        def scalar(self, *args: Any, **kwargs: Any) -> Any:
            found = super().scalar(*args, **kwargs)
            if next(calls) < racers:
                barrier.wait(timeout=20)
            return found

    monkeypatch.setattr(clusters, "Session", Racing)
    yield racers


def test_names_that_differ_only_in_case_saved_at_once_are_one_201(
    make_client: ClientFactory, racing_saves: int
) -> None:
    names = ["Race1", "race1", "RACE1"][:racing_saves]
    cluster = {"num_nodes": 1, "gpus_per_node": 8, "gpu": "H100-SXM"}
    with make_client() as client, ThreadPoolExecutor(racing_saves) as pool:
        answers = list(pool.map(lambda n: client.post("/clusters", json={"name": n, "cluster": cluster}), names))
        assert sorted(r.status_code for r in answers) == [201, 409, 409], [r.text for r in answers]
        winner = next(r.json()["name"] for r in answers if r.status_code == 201)
        for r in answers:
            if r.status_code == 409:
                assert _errors(r) == {
                    "name": f"a saved cluster named {winner!r} exists already (names are compared without case); "
                    f"choose another name, or change that one with PUT /clusters/{winner}"
                }
        assert [c["name"] for c in client.get("/clusters").json()["items"]] == [winner]


def _row(name: str) -> ClusterRow:
    now = datetime.now(UTC)
    spec = json.dumps({"num_nodes": 1, "gpus_per_node": 8, "gpu": "H100-SXM"})
    return ClusterRow(
        name=name,
        owner="admin",
        description="",
        spec_json=spec,
        version=1,
        created_at=now,
        updated_at=now,
        gpu_name="H100-SXM",
        num_nodes=1,
        gpus_per_node=8,
    )


def test_an_older_database_gets_the_index_and_one_with_case_twins_still_opens(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A database made before the index: with `Pod` and `pod` saved it opens, both kept, and the log names them;
    once one is gone the next start adds the index."""
    store = PlanStore(db_url)
    store.init()
    with store.engine.begin() as conn:  # as a database made before the index was
        conn.execute(text(f"DROP INDEX {CLUSTER_NAME_INDEX}"))
    with Session(store.engine) as session, session.begin():
        session.add_all([_row("Pod"), _row("pod")])
    store.close()

    with caplog.at_level(logging.WARNING, logger="trainplan.store"):
        store = PlanStore(db_url)
        store.init()
    assert "'pod' x2" in caplog.text and CLUSTER_NAME_INDEX in caplog.text
    clusters = ClusterStore(store.engine)
    assert sorted(c.name for c in clusters.page(10, 0)[0]) == ["Pod", "pod"]  # nothing stored is lost
    with Session(store.engine) as session, session.begin():
        session.delete(session.get(ClusterRow, "pod"))
    store.close()

    store = PlanStore(db_url)
    store.init()  # now the index can be made
    with pytest.raises(IntegrityError), Session(store.engine) as session, session.begin():
        session.add(_row("POD"))
    store.close()


# -- 3, 4. the CLI: nesting, keys given twice, a BOM, a password that is not UTF-8, DATABASE_URL --------------------


def _cli(*args: str, stdin: bytes = b"", **env: str) -> subprocess.CompletedProcess[str]:
    base = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": "/tmp"}
    done = subprocess.run(
        [sys.executable, "-m", "app", *args], input=stdin, capture_output=True, cwd=ROOT, env=base | env, timeout=120
    )
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
    )


def _one_line_error(done: subprocess.CompletedProcess[str], words: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr and words in done.stderr, done.stderr[-2000:]
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr[-2000:]


@pytest.mark.parametrize("verb", ["plan", "estimate", "render"])
def test_the_cli_reads_a_request_as_strictly_as_the_service(verb: str, tmp_path: Path) -> None:
    extra = ["--out", str(tmp_path / "out")] if verb == "render" else []
    deep = b'{"model":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    _one_line_error(_cli(verb, *extra, stdin=deep), "nested more than 32 levels deep")
    twice = b'{"model": "tiny-gpt", "model": "llama-2-7b", ' + json.dumps(TINY).encode()[1:]
    _one_line_error(_cli(verb, *extra, stdin=twice), "model: the key 'model' is given more than once")
    nan = json.dumps(TINY).replace('"num_nodes": 1', '"num_nodes": NaN').encode()
    _one_line_error(_cli(verb, *extra, stdin=nan), "cluster.num_nodes: NaN is not a number JSON allows")


def test_a_request_file_with_a_utf8_bom_is_read(tmp_path: Path) -> None:
    """Windows editors write one; it was "request is not valid JSON: ... Expecting value"."""
    path = tmp_path / "request.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(TINY).encode())
    done = _cli("plan", "--json", str(path))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["model"]["name"] == "tiny-gpt"


def test_a_password_on_stdin_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'trainplan.db'}"
    done = _cli("users", "add", "bob", "--password-stdin", stdin=b"\xffcorrect horse battery\n", DATABASE_URL=url)
    _one_line_error(done, "--password-stdin: the password read from stdin is not UTF-8 text (byte 0xff at offset 0)")
    assert "codec" not in done.stderr


def _file_in_the_way(tmp_path: Path) -> tuple[str, str]:
    (tmp_path / "afile").write_text("")
    return f"sqlite:///{tmp_path / 'afile' / 'x.db'}", "a file of that name is in the way"


@pytest.mark.parametrize("case", ["proc", "file"])
@pytest.mark.parametrize("verb", [["users", "list"], ["tokens", "list"], ["serve", "--port", "1"]])
def test_a_sqlite_folder_that_cannot_be_made_is_one_line(case: str, verb: list[str], tmp_path: Path) -> None:
    url, why = (
        ("sqlite:////proc/nope/x.db", "No such file or directory") if case == "proc" else _file_in_the_way(tmp_path)
    )
    folder = url.removeprefix("sqlite:///").rsplit("/", 1)[0]
    done = _cli(*verb, DATABASE_URL=url, TRAINPLAN_HOST=NOWHERE)
    _one_line_error(done, f"DATABASE_URL: cannot create the folder {folder!r} for the SQLite file")
    assert why in done.stderr


@pytest.mark.parametrize("url", ["sqlite:///", "sqlite://", "sqlite:///:memory:"])
def test_a_sqlite_url_without_a_file_is_refused_at_start(url: str) -> None:
    """The service started on it, printed an admin password, then answered 503 to every /plans."""
    with pytest.raises(ValueError, match=r"DATABASE_URL: .* names no database file"):
        Settings.from_env({"DATABASE_URL": url})
    for verb in (["serve", "--port", "1"], ["users", "list"]):
        done = _cli(*verb, DATABASE_URL=url, TRAINPLAN_HOST=NOWHERE)
        _one_line_error(done, "DATABASE_URL")
        assert "password" not in done.stdout


# -- 5, 7. raw JSON errors name their path; a key given twice -------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        (json.dumps(TINY).replace('"num_nodes": 1', '"num_nodes": NaN'), "cluster.num_nodes", "NaN is not"),
        (
            json.dumps({**TINY, "training": {"global_batch_size": 8, "train_tokens": 1}}).replace(
                '"train_tokens": 1', '"train_tokens": 1e400'
            ),
            "training.train_tokens",
            "the number 1e400 is too large",
        ),
        (
            json.dumps(TINY).replace('"num_nodes": 1', '"num_nodes": 1' + "0" * 5000),
            "cluster.num_nodes",
            "an integer has more than 4300 digits",
        ),
        (json.dumps(TINY).replace('{"model"', '{"model": "llama-2-7b", "model"'), "model", "given more than once"),
        (
            json.dumps(TINY).replace('"gpu": "H100-SXM"', '"gpu": "H100-SXM", "gpu": "A100-80GB"'),
            "cluster.gpu",
            "the key 'gpu' is given more than once in one object",
        ),
    ],
)
def test_json_the_reader_refuses_names_the_field(sqlite_client: Any, body: str, field: str, words: str) -> None:
    for url in ("/plans", "/estimate"):
        r = sqlite_client.post(url, content=body, headers={"content-type": "application/json"})
        assert r.status_code == 422, r.text[:300]
        assert r.json()["errors"][0]["field"] == field and words in r.json()["errors"][0]["message"], r.text[:300]
    assert sqlite_client.get("/plans").json()["total"] == 0


def test_a_bad_nic_name_is_refused_at_cluster_nics(sqlite_client: Any) -> None:
    """It was field "cluster" with "cluster.nics: ..." in the message, and on the form only in the top box."""
    cluster = {**TINY["cluster"], "nics": ["mlx5_0", "bad name"]}
    r = sqlite_client.post("/plans", json={**TINY, "cluster": cluster})
    assert r.status_code == 422 and _errors(r) == {
        "cluster.nics": "'bad name' is not a plain name (letters, digits, '.', '_', ':', '-'; "
        "no spaces, quotes, ';', '$', backticks or newlines)"
    }
    saved = sqlite_client.post("/clusters", json={"name": "pod", "cluster": cluster})
    assert saved.status_code == 422 and list(_errors(saved)) == ["cluster.nics"]
    page = _submit(sqlite_client, cluster_mode="custom", **{"cluster.nics": "mlx5_0 bad!name"})
    assert page.status_code == 422
    assert "'bad!name' is not a plain name" in element(page.text, "field-cluster.nics")[0]


def test_moe_fields_without_experts_are_refused_at_the_field_with_its_value(sqlite_client: Any) -> None:
    """It was field "model" and "MoE fields are set but num_experts is not", naming neither field nor number."""
    model = {"preset": "llama-2-7b", "moe_shared_expert_intermediate_size": 64}
    r = sqlite_client.post("/plans", json={**TINY, "model": model})
    assert r.status_code == 422 and _errors(r) == {
        "model.moe_shared_expert_intermediate_size": "moe_shared_expert_intermediate_size(64) is set but num_experts "
        "is not: set num_experts or leave them out"
    }
    router = sqlite_client.post("/plans", json={**TINY, "model": {"preset": "llama-2-7b", "moe_router_num_groups": 4}})
    assert router.status_code == 422 and "moe_router_num_groups(4)" in json.dumps(router.json())


# -- 6. a mode the form does not know ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "allowed"), [("model_mode", "preset, dims, hf"), ("cluster_mode", "preset, custom, saved")]
)
def test_a_mode_the_form_does_not_know_is_said(sqlite_client: Any, mode: str, allowed: str) -> None:
    """It was "1 field below needs a change" and no message anywhere: the radio buttons have no place for one."""
    r = _submit(sqlite_client, **{mode: "zzz"})
    assert r.status_code == 422
    alert = " ".join(r.text.split('<div class="alert"', 1)[1].split("</div>", 1)[0].split())
    assert f"{mode}: must be one of {allowed} (got &#39;zzz&#39;)" in alert and "field below" not in alert
