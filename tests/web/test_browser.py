"""Headless Chromium (Debian's) against uvicorn: log in, fill the form, submit, read the result page, download
files; a cross-site form post is refused."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from tests.web.conftest import CHROMIUM, USER
from tests.web.conftest import login as _login

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="Debian's chromium is not installed at /usr/bin/chromium "
        "(apt-get install -y chromium, or ./scripts/test-services.sh)",
    ),
]


def test_fill_submit_read_and_download(server: str, browser: object, tmp_path: Path) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900}, accept_downloads=True)  # type: ignore[attr-defined]
    _login(page, server)
    assert f"{USER} (user)" in page.inner_text("header")
    assert page.locator('.mode-panel[data-mode="preset"]').is_visible()
    assert not page.locator('.mode-panel[data-mode="dims"]').is_visible()
    page.select_option('select[name="preset.name"]', "llama-2-7b")
    page.fill('input[name="cluster.num_nodes"]', "2")
    page.fill('input[name="training.global_batch_size"]', "64")
    page.click("text=Pin dimensions")
    page.fill('input[name="training.pinned.pp"]', "2")  # a pipeline, so there is a bubble to see
    page.click("button.primary")
    page.wait_for_url(f"{server}/p/*")
    page.screenshot(path=str(tmp_path / "result.png"), full_page=True)

    rows = page.locator("table.plans tbody tr")
    assert rows.count() >= 1
    assert rows.first.locator("td").nth(4).inner_text() == "2"  # PP column of the chosen plan
    for chart in ("#memory-chart", "#pipeline-chart", "#step-chart"):
        assert page.locator(chart).is_visible()
    assert page.locator("#memory-chart rect").count() >= 2 * 5  # two stages, five parts each
    assert page.locator("#memory-chart line.capacity").count() == 1
    assert page.locator("#pipeline-chart rect.bubble").count() == 2
    assert page.locator("#pipeline-chart rect.op").count() > 0
    assert "WHY" in page.inner_text(".chosen").upper() and page.locator("ul.why li").count() >= 2

    links = page.locator(".downloads a")
    assert links.count() >= 3
    for i in range(links.count()):
        href = links.nth(i).get_attribute("href")
        response = page.request.get(f"{server}{href}")
        assert response.ok, href
    with page.expect_download() as download_info:
        page.click("#bundle-link")
    saved = tmp_path / "bundle.zip"
    download_info.value.save_as(saved)
    with zipfile.ZipFile(io.BytesIO(saved.read_bytes())) as zf:
        assert any(n.endswith("/megatron_args.txt") for n in zf.namelist())
    page.close()


def test_bad_value_shows_beside_its_field(server: str, browser: object, tmp_path: Path) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})  # type: ignore[attr-defined]
    _login(page, server)
    page.fill('input[name="cluster.num_nodes"]', "0")
    page.fill('input[name="training.global_batch_size"]', "96")
    page.click("button.primary")
    field = page.locator('[id="field-cluster.num_nodes"]')
    field.locator(".error").wait_for()
    assert "greater than or equal to 1" in field.locator(".error").inner_text()
    assert page.input_value('input[name="cluster.num_nodes"]') == "0"
    assert page.input_value('input[name="training.global_batch_size"]') == "96"
    page.screenshot(path=str(tmp_path / "error.png"), full_page=True)
    page.check('input[name="model_mode"][value="dims"]', force=True)  # CSS alone swaps the panels
    assert page.locator('.mode-panel[data-mode="dims"]').is_visible()
    assert not page.locator('.mode-panel[data-mode="preset"]').is_visible()
    page.close()


def test_a_cross_site_form_post_is_refused(server: str, browser: object, tmp_path: Path) -> None:
    """A page on another origin posts the plan form to the service in a logged-in browser: refused, nothing stored."""
    context = browser.new_context()  # type: ignore[attr-defined]
    page = context.new_page()
    _login(page, server)
    before = page.request.get(f"{server}/plans").json()["total"]
    evil = tmp_path / "evil.html"
    evil.write_text(f'''<form id="f" method="post" action="{server}/" enctype="multipart/form-data">
      <input name="model_mode" value="preset"><input name="preset.name" value="llama-2-7b">
      <input name="cluster_preset" value="dgx-h100"><input name="cluster.num_nodes" value="1">
      <input name="training.global_batch_size" value="8"></form>''')
    other = context.new_page()
    other.goto(evil.as_uri())  # a file:// page: its Origin is "null", another site
    with other.expect_navigation():
        other.evaluate("document.getElementById('f').submit()")
    assert "403" in other.content() or "origin" in other.content()
    assert page.request.get(f"{server}/plans").json()["total"] == before
    context.close()
