"""Headless Chromium (Debian's) against uvicorn: log in, fill the form, submit, read the result page, download
files; a cross-site form post is refused."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking"]
ROOT = Path(__file__).resolve().parents[2]
USER, PASSWORD = "alice", "correct horse battery staple"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="Debian's chromium is not installed at /usr/bin/chromium "
        "(apt-get install -y chromium, or ./scripts/test-services.sh)",
    ),
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """uvicorn app.main:app on 127.0.0.1 and a free port, on its own SQLite file."""
    port = _free_port()
    db = tmp_path_factory.mktemp("db") / "trainplan.db"
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{db}", "PYTHONPATH": str(ROOT)}
    made = subprocess.run(
        [sys.executable, "-m", "app", "users", "add", USER, "--role", "user", "--password-stdin"],
        input=PASSWORD + "\n",
        text=True,
        capture_output=True,
        cwd=ROOT,
        env=env,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "app.main:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{base}/healthz", timeout=2).raise_for_status()
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, "uvicorn did not start"
                time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield chromium
        chromium.close()


def _login(page: object, server: str) -> None:
    """The form is behind the login: / redirects to /login, which comes back to / after the password."""
    page.goto(f"{server}/")  # type: ignore[attr-defined]
    assert "/login?next=" in page.url  # type: ignore[attr-defined]
    page.fill('input[name="name"]', USER)  # type: ignore[attr-defined]
    page.fill('input[name="password"]', PASSWORD)  # type: ignore[attr-defined]
    page.click('button[type="submit"]')  # type: ignore[attr-defined]
    page.wait_for_url(f"{server}/")  # type: ignore[attr-defined]


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
    page.click('button[type="submit"]')
    page.wait_for_url(f"{server}/p/*")
    page.screenshot(path=str(tmp_path / "result.png"), full_page=True)

    rows = page.locator("table.plans tbody tr")
    assert rows.count() >= 1
    assert rows.first.locator("td").nth(3).inner_text() == "2"  # PP column of the chosen plan
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
    page.click('button[type="submit"]')
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
