"""In Chromium against uvicorn: /docs renders its operations with the network blocked (Swagger UI from the
installed package), a saved cluster used from the form, and the cheapest-within-a-deadline page (a bad value kept
beside its field, then the ranked options and one stored with "Plan this")."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.web.conftest import CHROMIUM
from tests.web.test_browser_flows import page, shots  # noqa: F401  (the logged-in page fixture)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed at /usr/bin/chromium"),
]


def test_docs_render_offline(server: str, browser: Any) -> None:
    context = browser.new_context()
    asked: list[str] = []

    def only_this_server(route: Any) -> None:
        url = route.request.url
        asked.append(url)
        if urlsplit(url).netloc == urlsplit(server).netloc:
            route.continue_()
        else:
            route.abort()  # no CDN, no Internet

    context.route("**/*", only_this_server)
    p = context.new_page()
    errors: list[str] = []
    p.on("pageerror", lambda e: errors.append(str(e)))
    p.goto(f"{server}/docs")
    p.wait_for_selector(".opblock-summary-path", timeout=20_000)
    paths = p.locator(".opblock-summary-path").all_inner_texts()
    assert "/plans" in paths and "/deadline" in paths and "/clusters/{name}" in paths
    assert all(urlsplit(u).netloc == urlsplit(server).netloc for u in asked), asked
    assert not errors, errors
    context.close()


def _csrf(tab: Any, server: str) -> str:
    tab.goto(f"{server}/")
    return str(tab.input_value('input[name="csrf_token"]'))


def test_a_saved_cluster_from_the_form(page: Any, server: str, tmp_path: Path) -> None:  # noqa: F811
    token = _csrf(page, server)
    cluster = {"num_nodes": 1, "gpus_per_node": 4, "gpu": "H100-SXM", "nics": ["mlx5_0"]}
    made = page.request.post(
        f"{server}/clusters",
        data={"name": "bench-4", "description": "one node, four GPUs", "cluster": cluster},
        headers={"X-CSRF-Token": token, "Origin": server},
    )
    assert made.status == 201, made.text()
    page.goto(f"{server}/")
    page.check('input[name="cluster_mode"][value="saved"]', force=True)  # CSS alone swaps the panels
    assert page.locator("#in-cluster\\.saved").is_visible()
    # its own node count, not the common one (that was shown, editable and ignored, QA 2026-12-07)
    assert page.locator("#in-saved\\.num_nodes").is_visible()
    assert not page.locator("#in-cluster\\.num_nodes").is_visible()
    page.select_option("#in-cluster\\.saved", "bench-4")
    page.select_option('[name="preset.name"]', "tiny-gpt")
    page.fill('[name="training.global_batch_size"]', "8")
    page.click("button.primary")
    page.wait_for_load_state()
    assert "/p/" in page.url, page.inner_text("main")[:1500]
    assert "4 × H100-SXM" in page.inner_text("h1") or "4 H100-SXM" in page.inner_text("main")
    assert "saved cluster 'bench-4'" in page.inner_text("main")


def test_cheapest_within_a_deadline_page(page: Any, server: str, tmp_path: Path) -> None:  # noqa: F811
    page.goto(f"{server}/cheapest")
    page.select_option("#in-model", "llama-2-7b")
    page.fill("#in-nodes_max", "4")
    page.fill("#in-training\\.train_tokens", "2e11")
    page.fill("#in-price\\.H100-SXM", "two")
    page.click("#deadline-button")
    assert "(got 'two')" in page.inner_text("#field-price\\.H100-SXM")
    assert page.input_value("#in-price\\.H100-SXM") == "two" and page.input_value("#in-nodes_max") == "4"
    shots(page, tmp_path, "deadline-error")
    page.fill("#in-price\\.H100-SXM", "2.5")
    page.click("#deadline-button")
    page.wait_for_selector("#deadline-options")
    assert "Cheapest within 30 days" in page.inner_text("#best")
    rows = page.locator("#deadline-options tbody tr")
    assert rows.count() >= 4
    shots(page, tmp_path, "deadline")
    rows.first.locator("button").click()
    page.wait_for_load_state()
    assert "/p/" in page.url, page.inner_text("main")[:1500]
    assert "llama-2-7b" in page.inner_text("h1")
    # the option's price comes along: the new plan's cost panel priced it (it was empty, QA 2026-12-07)
    assert page.input_value("#in-price") == "2.5"
    assert page.locator("table.cost tbody tr").count() >= 1
