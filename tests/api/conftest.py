"""Fixtures for the service tests: the app on a fresh database (SQLite file, and PostgreSQL when one is set up),
with a client that carries an admin's API token (made through the real account store, stored hashed)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette's notice that its TestClient will move to httpx2
    from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from app.store.db import make_engine
from app.store.models import Base

POSTGRES_ENV = "TRAINPLAN_TEST_POSTGRES_URL"

# Small requests keep the suite fast: a 4-layer model on one node, and Llama-2 7B on two nodes (pipelines, files
# for several nodes).
TINY: dict[str, Any] = {
    "model": "tiny-gpt",
    "cluster": {"num_nodes": 1, "gpus_per_node": 2, "gpu": "H100-SXM"},
    "training": {"global_batch_size": 8},
}
SMALL: dict[str, Any] = {
    "model": "llama-2-7b",
    "cluster": {"num_nodes": 2, "gpus_per_node": 8, "gpu": "H100-SXM", "nics": ["mlx5_0", "mlx5_1"]},
    "training": {"global_batch_size": 64},
}

ClientFactory = Callable[..., AbstractContextManager[TestClient]]


def _reset_postgres(url: str) -> None:
    engine = make_engine(url)
    Base.metadata.drop_all(engine)
    engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database: a SQLite file in the test's folder, or the PostgreSQL test database emptied."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'var' / 'trainplan.db'}"
    url = os.environ.get(POSTGRES_ENV)
    if not url:
        pytest.skip(f"{POSTGRES_ENV} is not set (run ./scripts/test-services.sh && . ./.test-env to start PostgreSQL)")
    _reset_postgres(url)
    return url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'trainplan.db'}"


ADMIN = "admin"


def login_token(client: TestClient, name: str, role: str = "user") -> str:
    """A new API token for `name` (the user is created with `role` first if need be)."""
    accounts = client.app.state.accounts  # type: ignore[attr-defined]
    if accounts.user(name) is None:
        accounts.add_user(name, role, None)
    token, _info = accounts.create_token(name, "tests")
    return str(token)


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@contextmanager
def _client(url: str, as_user: str | None = ADMIN, **settings: Any) -> Iterator[TestClient]:
    """The app on `url`; its client sends an API token of `as_user` (an admin), or none. The rate limit is off
    unless a test sets it (hypothesis sends hundreds of requests a second)."""
    app = create_app(Settings(database_url=url, **{"rate_limit_per_minute": 0, **settings}))
    with TestClient(app, raise_server_exceptions=False) as client:  # a 500 must show up as a 500, not a raise
        if as_user is not None:
            client.headers.update(auth(login_token(client, as_user, "admin")))
        yield client


@pytest.fixture
def make_client(db_url: str) -> ClientFactory:
    """`with make_client(**settings) as client:` the app on this test's database (a new app each time: a restart)."""
    return lambda **settings: _client(db_url, **settings)


@pytest.fixture
def client(make_client: ClientFactory) -> Iterator[TestClient]:
    with make_client() as c:
        yield c


@pytest.fixture
def sqlite_client(sqlite_url: str) -> Iterator[TestClient]:
    """For tests that do not depend on the database kind."""
    with _client(sqlite_url) as c:
        yield c


def make_sqlite_client(url: str, **settings: Any) -> AbstractContextManager[TestClient]:
    return _client(url, **settings)


@pytest.fixture(scope="session", autouse=True)
def _planner_processes_stop() -> Iterator[None]:
    """Each app stops its planner processes at shutdown; nothing of them may outlive the test session."""
    yield
    import multiprocessing

    for child in multiprocessing.active_children():
        child.kill()
