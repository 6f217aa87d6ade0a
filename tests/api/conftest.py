"""Fixtures for the service tests: the app on a fresh database (SQLite file, and PostgreSQL when one is set up)."""

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
TINY: dict[str, Any] = {"model": "tiny-gpt", "cluster": {"num_nodes": 1, "gpus_per_node": 2, "gpu": "H100-SXM"},
                        "training": {"global_batch_size": 8}}
SMALL: dict[str, Any] = {"model": "llama-2-7b", "cluster": {"num_nodes": 2, "gpus_per_node": 8, "gpu": "H100-SXM",
                                                            "nics": ["mlx5_0", "mlx5_1"]},
                         "training": {"global_batch_size": 64}}

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


@contextmanager
def _client(url: str, **settings: Any) -> Iterator[TestClient]:
    app = create_app(Settings(database_url=url, **settings))
    with TestClient(app, raise_server_exceptions=False) as client:  # a 500 must show up as a 500, not a raise
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
