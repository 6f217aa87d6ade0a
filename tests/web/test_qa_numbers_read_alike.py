"""QA 2026-12-07: numbers of one kind read alike on a page. A step's 80 % interval was written in two units under
its KPI ("117.17 s" over "109.27 s–2.1 min": the upper end rounded to 6 s and in another unit), the goodput KPI
wrote its checkpoint interval ungrouped beside the grouped sentence below it ("13347" and "13,347"), and the plan
form's sequence length said "(1 – …)" where the spec, the API and the what-if control allow up to 4194304."""

from __future__ import annotations

import re
from typing import Any

from app.planner.results import Interval
from app.web.prefs import Prefs
from app.web.result import spreads
from app.web.templates import seconds
from tests.api.conftest import SMALL
from tests.web.conftest import synthetic_plan

UNIT = re.compile(r"[\d.,]+ (ms|s|min|h|days)")


def units_of(text: str) -> list[str]:
    return UNIT.findall(text)


def test_an_interval_is_written_in_the_unit_of_its_estimate() -> None:
    assert seconds(126.03) == "2.1 min"  # alone, a number takes its own unit
    assert seconds(126.03, like=117.17) == "126.03 s"
    assert seconds(109.27, like=117.17) == "109.27 s"
    assert seconds(0.95, like=1.2) == "0.95 s" and seconds(1.3, like=0.9) == "1300.0 ms"
    assert seconds(7300.0, like=7000.0) == "121.7 min" and seconds(200000.0, like=180000.0) == "2.3 days"


def test_the_step_interval_line_has_one_unit() -> None:
    plan = synthetic_plan(step_s=117.17)
    time = plan.estimate.time.model_copy(update={"step_interval": Interval(low=109.27, high=126.03, basis="runs")})
    plan = plan.model_copy(update={"estimate": plan.estimate.model_copy(update={"time": time})})
    step = next(s for s in spreads(plan, Prefs()) if s.what == "step")
    assert (step.low, step.high) == ("109.27 s", "126.03 s")


def test_the_step_kpi_and_its_interval_share_a_unit(web: Any) -> None:
    """A plan of a 70B model on 32 H100 whose step is near two minutes; whatever the step, the KPI's value and both
    ends of its interval are in one unit."""
    body = {
        "model": "llama-3-70b",
        "cluster": {"num_nodes": 4, "gpu": "H100-SXM"},
        "training": {"global_batch_size": 512, "max_plans": 3},
    }
    r = web.post("/plans", json=body)
    assert r.status_code == 201, r.text
    page = web.get(f"/p/{r.json()['id']}").text
    kpi = page.split('<span class="k">step</span>', 1)[1].split("</div>", 1)[0]
    assert len(set(units_of(kpi))) == 1, kpi
    line = next(li for li in re.findall(r"<li>80% interval [^<]*</li>", page) if " step, " in li)
    assert units_of(line) == units_of(kpi)[:1] * 2, (line, kpi)


def test_the_goodput_kpi_groups_its_step_count(web: Any) -> None:
    r = web.post("/plans", json={**SMALL, "cluster": {**SMALL["cluster"], "mtbf_hours": 1e6}})
    assert r.status_code == 201, r.text
    steps = r.json()["result"]["plans"][0]["checkpoint"]["interval_steps"]
    assert steps >= 1000  # a failure a million hours apart: checkpoints thousands of steps apart
    page = web.get(f"/p/{r.json()['id']}").text
    assert f"checkpoint every {steps:,} steps</small>" in page
    assert f"Checkpoint every {steps:,} steps" in page


def test_the_forms_sequence_length_names_its_upper_bound(web: Any) -> None:
    page = web.get("/").text
    for name in ("preset.seq_length", "hf.seq_length"):
        help_text = page.split(f'id="help-{name}"', 1)[1].split("</p>", 1)[0]
        assert "(1 – 4194304)" in help_text, help_text


def test_the_what_if_gpu_control_does_not_point_at_numbers_it_lacks(web: Any) -> None:
    """The What if panel's GPU said "change its numbers below", and below it are the batch, precision and pins; the
    GPU's numbers are in the full form."""
    r = web.post("/plans", json=SMALL)
    assert r.status_code == 201, r.text
    page = web.get(f"/p/{r.json()['id']}").text
    panel = page.split('id="whatif"', 1)[1].split("</section>", 1)[0]
    help_text = panel.split('id="help-cluster.gpu"', 1)[1].split("</p>", 1)[0]
    assert "below" not in help_text and "full form" in help_text, help_text
    assert "change its numbers below" in web.get("/").text  # the form itself has them below


def test_the_ranked_tables_steps_share_the_first_plans_unit(web: Any) -> None:
    """Llama-3 70B on 32 H100 at global batch 524: the ranked steps straddle two minutes (119.9-120.4 s), and each
    row picked its own unit ("119.92 s" above "2.0 min"); the column now reads in #1's unit."""
    body = {
        "model": "llama-3-70b",
        "cluster": {"num_nodes": 4, "gpu": "H100-SXM"},
        "training": {"global_batch_size": 524},
    }
    r = web.post("/plans", json=body)
    assert r.status_code == 201, r.text
    steps = [p["estimate"]["time"]["step_s"] for p in r.json()["result"]["plans"]]
    assert min(steps) < 120 < max(steps)  # the case: without one unit the column mixes s and min
    table = web.get(f"/p/{r.json()['id']}").text.split('<table class="plans">', 1)[1].split("</table>", 1)[0]
    cells = re.findall(r'<td class="num">([0-9.,]+ (?:ms|s|min|h|days))</td>', table)
    assert len(cells) == len(steps) and {c.split()[1] for c in cells} == {"s"}, cells


def test_compare_writes_a_step_as_the_result_page_does(web: Any) -> None:
    """Compare wrote a step with three decimals ("27.022 s") where the result page's KPI said "27.02 s"."""
    r = web.post("/plans", json=SMALL)
    assert r.status_code == 201, r.text
    plan_id = r.json()["id"]
    kpi = web.get(f"/p/{plan_id}").text.split('<span class="k">step</span><span class="v">', 1)[1].split("<", 1)[0]
    page = web.get(f"/compare?p={plan_id}:1&p={plan_id}:2").text
    row = page.split('<th scope="row">step</th>', 1)[1].split("</tr>", 1)[0]
    first = re.sub(r"<[^>]+>", "", row.split("</td>", 1)[0]).strip()
    assert first.replace("\u200b", "") == kpi, (first, kpi)


def test_keep_it_goes_back_to_the_page_of_the_list(web: Any) -> None:
    """The list's Delete, from a later page of the list, offered "Keep it" back to the list's first page: the offset
    now rides along with the filters (a bad one is dropped)."""
    ids = [web.post("/plans", json=SMALL).json()["id"] for _ in range(2)]
    # the list offers Delete to a logged-in session (not to an API token): log in as a browser would
    web.app.state.accounts.add_user("keeper", "admin", "correct horse battery staple")
    web.headers.pop("Authorization", None)
    form = web.get("/login?next=/recent").text
    csrf = re.search(r'name="csrf_token" value="([^"]*)"', form)
    assert csrf
    login = {
        "csrf_token": csrf.group(1),
        "next": "/recent",
        "name": "keeper",
        "password": "correct horse battery staple",
    }
    assert web.post("/login", data=login, follow_redirects=False).status_code == 303
    listed = web.get("/recent", params={"offset": 1}).text
    link = re.search(r'href="(/p/[0-9a-f]{16}/delete\?back=[^"]+)"', listed)
    assert link and "offset%3D1" in link.group(1), listed[-3000:]
    asked = web.get(link.group(1).replace("&amp;", "&"))
    cancel = re.findall(r"<a[^>]*cancel-delete[^>]*>", asked.text)
    assert cancel == ['<a href="/recent?offset=1" id="cancel-delete">'], cancel
    for bad in ("-1", "x", "1" * 20):
        asked = web.get(f"/p/{ids[0]}/delete", params={"back": f"q=llama&offset={bad}"})
        assert 'href="/recent?q=llama" id="cancel-delete"' in asked.text, bad
