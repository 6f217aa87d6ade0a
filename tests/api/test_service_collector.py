"""The service's process collects garbage less often while it runs (app/planner/collector.py `settled`), and a
stopped app leaves the process's collector as it found it."""

from __future__ import annotations

import gc

from app.planner import collector
from tests.api.conftest import ClientFactory


def test_the_running_app_spaces_collections_and_restores_them(make_client: ClientFactory) -> None:
    before = gc.get_threshold()
    with make_client() as client:
        assert client.get("/healthz").status_code == 200
        assert gc.get_threshold()[0] == collector.SERVICE_GEN0
        assert gc.get_freeze_count() > 0  # what the app loaded at start
    assert gc.get_threshold() == before
