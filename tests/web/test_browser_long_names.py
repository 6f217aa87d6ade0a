"""Long unbroken names the API accepts (a 100-character model name, a 64-character saved cluster and GPU name, a
long ?tokens= value echoed in its error) wrap at 390 px instead of pushing the page sideways (QA 2026-12-07: /p/<id>
was 825 px wide, /p/<id>/delete 917 px, /p/<id>?tokens=<long> 491 px)."""

from __future__ import annotations

from typing import Any

from tests.web.test_browser_flows import page  # noqa: F401  (the logged-in page fixture)
from tests.web.test_browser_issue13 import _csrf

MODEL = "M" * 100
CLUSTER = "c" * 64
GPU = "GPU_" + "Y" * 60


def test_long_names_fit_390_px(page: Any, server: str) -> None:  # noqa: F811
    token = _csrf(page, server)
    headers = {"X-CSRF-Token": token, "Origin": server}
    cluster = {"num_nodes": 1, "gpus_per_node": 8, "gpu": {"preset": "H100-SXM", "name": GPU}}
    made = page.request.post(f"{server}/clusters", data={"name": CLUSTER, "cluster": cluster}, headers=headers)
    assert made.status == 201, made.text()
    body = {"model": {"preset": "tiny-gpt", "name": MODEL}, "cluster": {"saved": CLUSTER},
            "training": {"global_batch_size": 8}}  # fmt: skip
    plan = page.request.post(f"{server}/plans", data=body, headers=headers)
    assert plan.status == 201, plan.text()
    plan_id = plan.json()["id"]
    page.set_viewport_size({"width": 390, "height": 844})
    try:
        for path in (f"/p/{plan_id}", f"/p/{plan_id}/delete", f"/p/{plan_id}?tokens={'9' * 60}x"):
            page.goto(f"{server}{path}")
            assert MODEL in page.inner_text("main"), path
            wide = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            assert wide <= 0, f"{path} at 390 px scrolls sideways by {wide} px"
    finally:
        page.set_viewport_size({"width": 1440, "height": 900})
