"""The web pages through the app: the form, submitting it, the result page, errors beside their fields."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from app.web.pages import SECTIONS
from tests.api.conftest import SMALL
from tests.web.html_dom import element, hrefs, svgs
from tests.web.test_forms import LLAMA_CONFIG, form

PLAN_FORM = {"preset.name": "llama-2-7b", "cluster.num_nodes": "2", "training.global_batch_size": "64"}


def submit(web: Any, values: dict[str, str], files: dict[str, Any] | None = None) -> Any:
    return web.post(
        "/", data=form(**{k.replace(".", "__"): v for k, v in values.items()}), files=files, follow_redirects=False
    )


def test_form_has_every_section_with_spec_help(web: Any) -> None:
    r = web.get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert (
        "script-src" not in r.headers["content-security-policy"]
        and "default-src 'none'" in r.headers["content-security-policy"]
    )
    assert "<script" not in r.text
    for section in SECTIONS.values():
        for f in section:
            text, _ = element(r.text, f"field-{f.name}")
            assert f.label in text
            if f.help:
                assert " ".join(f.help.split()) in text, f.name
    text, inputs = element(r.text, "field-training.search_time_limit_s")
    assert ("input", inputs[0][1]) == inputs[0] and inputs[0][1]["value"] == "10"  # the service's cap, not 20
    assert "0 – 10)" in text and "600" not in text  # the range it states is this service's, not the spec's 600 s


def test_submit_redirects_to_the_permalink_with_charts_and_downloads(web: Any) -> None:
    r = submit(web, PLAN_FORM)
    assert r.status_code == 303
    page_url = r.headers["location"]
    pid = page_url.rsplit("/", 1)[1]
    page = web.get(page_url)
    assert page.status_code == 200
    stored = web.get(f"/plans/{pid}").json()
    assert stored["request"] == {
        "model": "llama-2-7b",
        "cluster": {**stored["request"]["cluster"], "num_nodes": 2},
        "training": {"global_batch_size": 64},
    }  # defaults are left out
    drawn = {ET.fromstring(s).get("id") for s in svgs(page.text)}
    assert {"memory-chart", "pipeline-chart", "step-chart"} <= drawn
    rows = page.text.count('<tr class="selected">') + page.text.count("<tr>\n        <td>")
    assert rows >= 1 and stored["summary"] in page.text
    links = [h for h in hrefs(page.text) if h.startswith(f"/plans/{pid}/")]
    assert f"/plans/{pid}/bundle.zip" in links
    for name in (a["name"] for a in stored["links"]["artifacts"]):
        assert f"/plans/{pid}/artifacts/{name}" in links
    for link in links:
        assert web.get(link).status_code == 200, link
    for why in stored["explanation"]:
        assert why.replace("&", "&amp;") in page.text or why in page.text


def test_the_confidence_panel_names_a_gpus_own_constants(web: Any) -> None:
    """GB300 runs at its own GEMM rate (data/gpus.json): the page states the rate it used and where it comes from;
    a GPU on its generation's constants gets the generation's evidence alone."""
    for gpu, rate, own in (("GB300", "90%", True), ("GB200", "75%", False)):
        r = submit(web, {**PLAN_FORM, "cluster_mode": "custom", "cluster.gpu": gpu, "cluster.gpus_per_node": "4"})
        assert r.status_code == 303, r.text[:2000]
        page = " ".join(web.get(r.headers["location"]).text.split())
        assert f"from FLOPs at {rate} of the {gpu}" in page
        assert (f"Where the {gpu}'s efficiency constants come from: {gpu}: " in page) is own
        assert "1,400 W" in page if own else "1,400 W cap (GB200" not in page


def test_other_ranks_have_their_own_page(web: Any) -> None:
    created = web.post("/plans", json=SMALL).json()
    page = web.get(f"/p/{created['id']}", params={"rank": 2})
    assert page.status_code == 200
    assert f"/plans/{created['id']}/artifacts/megatron_args.txt?rank=2" in page.text
    assert web.get(f"/p/{created['id']}", params={"rank": 99}).status_code == 404


def test_bad_value_is_shown_beside_its_field_with_values_kept(web: Any) -> None:
    values = {**PLAN_FORM, "cluster.num_nodes": "0", "training.global_batch_size": "96", "training.pinned.tp": "3"}
    r = submit(web, values)
    assert r.status_code == 422
    text, inputs = element(r.text, "field-cluster.num_nodes")
    assert "greater than or equal to 1" in text
    assert inputs[0][1]["value"] == "0" and inputs[0][1].get("aria-invalid") == "true"
    _, kept = element(r.text, "field-training.global_batch_size")
    assert kept[0][1]["value"] == "96"
    _, pinned = element(r.text, "field-training.pinned.tp")
    assert pinned[0][1]["value"] == "3"
    assert "<details open>" in r.text  # the pins section is opened because a pin is set
    assert 'id="field-training.pinned.pp"' in r.text
    assert web.get("/plans").json()["total"] == 0


def test_model_errors_in_preset_mode_are_shown_at_the_preset(web: Any) -> None:
    r = submit(web, {**PLAN_FORM, "preset.seq_length": "-5"})
    assert r.status_code == 422
    assert "greater than or equal to 1" in element(r.text, "field-preset.seq_length")[0]


def test_config_json_upload(web: Any) -> None:
    files = {"hf.config": ("config.json", json.dumps(LLAMA_CONFIG).encode(), "application/json")}
    r = submit(web, {**PLAN_FORM, "model_mode": "hf", "hf.seq_length": "2048"}, files)
    assert r.status_code == 303, element(r.text, "field-hf.config")[0] if r.status_code == 422 else r.text
    stored = web.get("/plans/" + r.headers["location"].rsplit("/", 1)[1]).json()
    assert stored["request"]["model"] == {"hf_config": LLAMA_CONFIG, "seq_length": 2048}
    assert stored["result"]["model"]["num_query_groups"] == 4


def test_bad_upload_keeps_the_text_and_says_why(web: Any) -> None:
    files = {"hf.config": ("config.json", b'{"model_type": "llama"}', "application/json")}
    r = submit(web, {**PLAN_FORM, "model_mode": "hf", "hf.seq_length": "2048"}, files)
    assert r.status_code == 422
    text, _ = element(r.text, "field-hf.config")
    assert "lacks 'hidden_size'" in text
    assert "&#34;model_type&#34;: &#34;llama&#34;" in element_html(r.text, "in-hf.config_text")


def element_html(html: str, element_id: str) -> str:
    start = html.index(f'id="{element_id}"')
    return html[start : html.index("</textarea>", start)]


def test_upload_over_the_limit(tmp_path: Any) -> None:
    from tests.api.conftest import make_sqlite_client

    with make_sqlite_client(f"sqlite:///{tmp_path / 'x.db'}", max_upload_bytes=100) as web:
        files = {"hf.config": ("config.json", json.dumps(LLAMA_CONFIG).encode(), "application/json")}
        r = submit(web, {**PLAN_FORM, "model_mode": "hf"}, files)
        assert r.status_code == 422
        assert "larger than the limit of 100 bytes" in element(r.text, "field-hf.config")[0]


def test_a_form_over_the_body_limit_is_an_html_page_that_says_what_to_do(tmp_path: Any) -> None:
    """A file past the request-body limit (tokenizer.json picked for config.json) is refused before the form is read;
    a browser got the API's JSON and no way back (QA, 2026-12-07). It gets a page that names the limit and the file
    size to aim for, with the way back, where the browser keeps what was typed; an API client still gets JSON."""
    from tests.api.conftest import make_sqlite_client

    with make_sqlite_client(f"sqlite:///{tmp_path / 'x.db'}", max_body_bytes=4096) as web:
        files = {"hf.config": ("tokenizer.json", b"{" + b" " * 8000 + b"}", "application/json")}
        values = form(**{k.replace(".", "__"): v for k, v in {**PLAN_FORM, "model_mode": "hf"}.items()})
        page = web.post("/", data=values, files=files, headers={"accept": "text/html,*/*;q=0.8"})
        assert page.status_code == 413 and page.headers["content-type"].startswith("text/html")
        assert "larger than the limit of 4,096 bytes" in page.text and "your browser&#39;s Back button" in page.text
        assert "a config.json is a few KB" in page.text and 'href="/"' in page.text
        api = web.post("/plans", content=b"{" + b" " * 8000 + b"}", headers={"content-type": "application/json"})
        assert api.status_code == 413 and "4096 bytes" in api.json()["detail"]


def test_edit_and_replan_fills_the_form(web: Any) -> None:
    created = web.post("/plans", json={**SMALL, "training": {"global_batch_size": 128}}).json()
    r = web.get("/", params={"from": created["id"]})
    assert r.status_code == 200
    assert element(r.text, "field-training.global_batch_size")[1][0][1]["value"] == "128"
    _, nics = element(r.text, "field-cluster.nics")
    assert nics[0][1]["value"] == "mlx5_0 mlx5_1"
    assert web.get("/", params={"from": "0123456789abcdef"}).status_code == 404


def test_recent_page_and_standalone_charts(web: Any) -> None:
    created = web.post("/plans", json=SMALL).json()
    recent = web.get("/recent")
    assert recent.status_code == 200 and f"/p/{created['id']}" in recent.text
    for chart in ("memory", "pipeline", "steps"):
        r = web.get(f"/p/{created['id']}/{chart}.svg")
        assert r.status_code == 200 and r.headers["content-type"] == "image/svg+xml"
        ET.fromstring(r.text)
    assert web.get(f"/p/{created['id']}/secrets.svg").status_code == 422


def test_nothing_fits_page(web: Any) -> None:
    body = {
        "model": "llama-2-70b",
        "cluster": {"num_nodes": 1, "gpus_per_node": 1, "gpu": "A100-40GB"},
        "training": {"global_batch_size": 8},
    }
    created = web.post("/plans", json=body).json()
    page = web.get(f"/p/{created['id']}")
    assert page.status_code == 200 and "Nothing fits" in page.text and "Rejected candidates" in page.text
    assert not svgs(page.text)


def test_unknown_plan_page_is_a_404_page(web: Any) -> None:
    r = web.get("/p/0123456789abcdef")
    assert r.status_code == 404 and "no stored plan" in r.text.lower()


def test_stylesheet(web: Any) -> None:
    r = web.get("/static/style.css")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/css") and ".mode-panel" in r.text
    assert r.headers.get("content-encoding") == "gzip"  # httpx asks for gzip and unpacks it


@pytest.mark.parametrize("path", ["/", "/check"])
def test_a_gib_value_with_no_bytes_is_refused_at_its_field(web: Any, path: str) -> None:
    """A custom GPU's memory of 1e400 GiB (or 1e300, whose bytes overflow) was a 500 that lost the form."""
    values = {**PLAN_FORM, "cluster_mode": "custom", "cluster.gpu.memory_bytes": "1e300"}
    r = web.post(path, data=form(**{k.replace(".", "__"): v for k, v in values.items()}), follow_redirects=False)
    assert r.status_code == 422
    text, inputs = element(r.text, "field-cluster.gpu.memory_bytes")
    assert "at most 4096 GiB (got 1e+300)" in text
    assert inputs[0][1]["value"] == "1e300"
    assert web.get("/plans").json()["total"] == 0


def test_a_saved_cluster_deleted_meanwhile_stays_chosen(web: Any) -> None:
    """The saved cluster chosen was deleted before the form was sent: the page came back with the first saved
    cluster selected (another cluster), so sending again planned on it (QA, 2026-12-06)."""
    other = {"name": "pod-b", "cluster": {"num_nodes": 8, "gpu": "H100-SXM"}}
    assert web.post("/clusters", json=other).status_code == 201
    values = {**PLAN_FORM, "cluster_mode": "saved", "cluster.saved": "pod-a"}
    r = web.post("/", data=form(**{k.replace(".", "__"): v for k, v in values.items()}), follow_redirects=False)
    assert r.status_code == 422 and "no saved cluster named &#39;pod-a&#39;" in r.text
    assert '<option value="pod-a" selected>pod-a (no longer saved)</option>' in r.text
    assert '<option value="pod-b" selected>' not in r.text and '<option value="pod-b">' in r.text


def test_a_saved_cluster_plans_on_the_nodes_typed_for_it(web: Any) -> None:
    """Saved-cluster mode planned on all of the cluster's nodes whatever "Number of nodes" said (the API takes a
    count with `saved`); its own field now gives one, and a bad one is named there (QA 2026-12-07)."""
    pod = {"name": "pod-n", "cluster": {"num_nodes": 4, "gpu": "H100-SXM", "hosts": ["a", "b", "c", "d"]}}
    assert web.post("/clusters", json=pod).status_code == 201
    values = {**PLAN_FORM, "cluster_mode": "saved", "cluster.saved": "pod-n", "saved.num_nodes": "2"}
    r = web.post("/", data=form(**{k.replace(".", "__"): v for k, v in values.items()}), follow_redirects=False)
    assert r.status_code == 303, r.text
    made = web.get("/plans/" + r.headers["location"].rsplit("/", 1)[1]).json()
    assert made["request"]["cluster"]["num_nodes"] == 2 and made["request"]["cluster"]["hosts"] == ["a", "b"]
    assert made["cluster_name"] == "pod-n"
    everything = {**values, "saved.num_nodes": ""}
    r = web.post("/", data=form(**{k.replace(".", "__"): v for k, v in everything.items()}), follow_redirects=False)
    assert web.get("/plans/" + r.headers["location"].rsplit("/", 1)[1]).json()["request"]["cluster"]["num_nodes"] == 4
    bad = {**values, "saved.num_nodes": "0"}
    r = web.post("/", data=form(**{k.replace(".", "__"): v for k, v in bad.items()}), follow_redirects=False)
    assert r.status_code == 422
    text, inputs = element(r.text, "field-saved.num_nodes")
    assert "(got 0)" in text and inputs[0][1]["value"] == "0"
    # a what-if back to all of its nodes names all of its hosts: the plan kept 2, and the saved cluster has 4 (review)
    r = web.post("/whatif", data={"whatif.from": made["id"], "cluster.num_nodes": "4"}, follow_redirects=False)
    assert r.status_code == 303, r.text
    back = web.get("/plans/" + r.headers["location"].rsplit("/", 1)[1]).json()
    assert back["request"]["cluster"]["hosts"] == ["a", "b", "c", "d"] and back["cluster_name"] == "pod-n"
    # "Edit and re-plan" opens it on the saved cluster again, with its count; once the cluster changes, as described
    page = web.get(f"/?from={made['id']}").text
    assert 'value="saved" checked' in page and '<option value="pod-n" selected>' in page
    assert element(page, "field-saved.num_nodes")[1][0][1]["value"] == "2"
    changed = {"cluster": {**pod["cluster"], "nics": ["mlx5_0"]}, "version": 1}
    assert web.put("/clusters/pod-n", json=changed).status_code == 200
    page = web.get(f"/?from={made['id']}").text
    assert 'value="custom" checked' in page


def test_the_pages_curl_example_works_as_shown(web: Any) -> None:
    """The form's "From a script" snippet had no Authorization header, so it answered 401 as written."""
    import html
    import re

    from tests.api.conftest import login_token

    snippet = html.unescape(web.get("/").text.split("<h2>From a script</h2>", 1)[1].split("</pre>", 1)[0])
    headers = dict(h.split(": ", 1) for h in re.findall(r"-H ['\"]([^'\"]+)['\"]", snippet))
    body = json.loads(re.search(r"-d '(.*)'", snippet, re.S).group(1))  # type: ignore[union-attr]
    headers["Authorization"] = headers["Authorization"].replace("$TRAINPLAN_TOKEN", login_token(web, "bob"))
    web.headers.pop("Authorization")
    r = web.post(re.search(r"POST \S*?(/?plans)\b", snippet).group(1), json=body, headers=headers)  # type: ignore[union-attr]
    assert r.status_code == 201, r.text


# a model given by its dimensions, for the form's cross-field and multi-error tests
DIMS_FORM = {
    **PLAN_FORM,
    "model_mode": "dims",
    "model.name": "mine",
    "model.num_layers": "4",
    "model.hidden_size": "4096",
    "model.num_attention_heads": "32",
    "model.vocab_size": "32000",
    "model.seq_length": "2048",
}


def test_a_cross_field_model_error_is_shown_beside_the_field_it_names(web: Any) -> None:
    """hidden 4096 with 33 heads was said only in the box at the top; the check now names model.num_attention_heads."""
    r = submit(web, {**DIMS_FORM, "model.num_attention_heads": "33"})
    assert r.status_code == 422
    text, inputs = element(r.text, "field-model.num_attention_heads")
    assert "hidden_size(4096) is not divisible by num_attention_heads(33)" in text
    assert inputs[0][1]["value"] == "33" and inputs[0][1].get("aria-invalid") == "true"


def test_every_bad_field_is_named_in_one_round(web: Any) -> None:
    """A JSON field that does not parse used to hide the bad numbers until it was fixed."""
    values = {
        **DIMS_FORM,
        "model.num_layers": "abc",
        "model.rope_scaling": "{not json",
        "training.global_batch_size": "-3",
    }
    r = submit(web, values)
    assert r.status_code == 422
    assert "not valid JSON" in element(r.text, "field-model.rope_scaling")[0]
    assert "expected a number (got 'abc')" in element(r.text, "field-model.num_layers")[0]
    assert "greater than or equal to 1" in element(r.text, "field-training.global_batch_size")[0]


def test_one_node_is_one_node(web: Any) -> None:
    """ "Cluster: 1 nodes" (QA, 2026-12-06)."""
    created = web.post("/plans", json={**SMALL, "cluster": {**SMALL["cluster"], "num_nodes": 1}}).json()
    page = web.get(f"/p/{created['id']}").text
    assert "Cluster: 1 node ×" in page and "1 nodes" not in page


def test_a_browser_at_an_unknown_address_gets_the_not_found_page(web: Any) -> None:
    """It got {"detail":"Not Found"} (QA, 2026-12-06); an API client still gets the JSON error body."""
    page = web.get("/no/such/page", headers={"Accept": "text/html,application/xhtml+xml"})
    assert page.status_code == 404 and page.headers["content-type"].startswith("text/html")
    assert "<h1>Not found</h1>" in page.text and "No page at /no/such/page." in page.text
    # the site's CSP, so its stylesheet loads (the API's default-src 'none' blocked it), and the viewer's units
    assert "style-src 'self'" in page.headers["content-security-policy"], page.headers["content-security-policy"]
    web.cookies.set("tp_prefs", "GB.dark")
    in_gb = web.get("/no/such/page", headers={"Accept": "text/html"})
    web.cookies.delete("tp_prefs")
    assert in_gb.status_code == 404 and "GB → GiB" in in_gb.text and "GiB → GB" not in in_gb.text
    api = web.get("/no/such/page")
    assert api.status_code == 404 and api.json()["detail"] == "Not Found"
    assert api.json()["errors"] == [  # it had an empty error list
        {"field": "path", "message": "no such address: /no/such/page (the API is listed at /docs)"}
    ]


def test_a_browser_with_a_bad_query_or_an_unknown_plan_gets_a_page(web: Any) -> None:
    """/p/<id>?rank=abc, /p/<unknown id> and /recent?offset=-1 answered a browser with the API's JSON (QA,
    2026-12-06); an API client still gets it."""
    created = web.post("/plans", json=SMALL).json()
    html = {"Accept": "text/html,application/xhtml+xml"}
    for path, status, words in (
        (f"/p/{created['id']}?rank=abc", 422, "rank: Input should be a valid integer"),
        ("/p/0123456789abcdef", 404, "0123456789abcdef"),
        ("/recent?offset=-1", 422, "offset"),
    ):
        page = web.get(path, headers=html)
        assert page.status_code == status and page.headers["content-type"].startswith("text/html"), path
        main = page.text[page.text.find("<main") :]
        assert "<h1>" in main and words in main, (path, main[:800])
    api = web.get("/plans?limit=abc", headers={"Accept": "application/json"})
    assert api.status_code == 422 and api.json()["errors"][0]["field"] == "limit"


def test_the_units_and_theme_switches_come_back_to_the_page_as_it_was(web: Any) -> None:
    """They came back to the result page without the tokens and price typed into the cost panel, and to an empty
    form from Edit and re-plan (QA, 2026-12-06)."""
    from urllib.parse import quote

    created = web.post("/plans", json=SMALL).json()
    page = web.get(f"/p/{created['id']}", params={"rank": "2", "tokens": "1e12", "price": "2"}).text
    back = quote(f"/p/{created['id']}?rank=2&tokens=1e12&price=2", safe="")
    assert f"back={back}" in page
    form = web.get("/", params={"from": created["id"]}).text
    assert f"back={quote('/?from=' + created['id'], safe='')}" in form


def test_ranked_plans_that_look_alike_say_what_tells_them_apart(web: Any) -> None:
    """Llama-2 70B at 16K on 8 x 8 H100 ranks CP-2 plans that differ only in their CP communication; the table
    showed them as identical rows (QA, 2026-12-06). Each such row names the field and its value; a row unlike the
    others is left as it was. (At 4K, since TE's ring pays its merges, all_gather wins every CP-2 plan.)"""
    created = web.post(
        "/plans",
        json={
            "model": {"preset": "llama-2-70b", "seq_length": 16384},
            "cluster": {"num_nodes": 8, "gpu": "H100-SXM"},
            "training": {"global_batch_size": 128},
        },
    ).json()
    page = web.get(f"/p/{created['id']}").text
    table = page.split('aria-label="Ranked plans"', 1)[1].split("</table>", 1)[0]
    rows = table.split("<tbody>", 1)[1].split("</tr>")[:-1]
    told = [row for row in rows if "CP communication:" in row]
    assert len(told) >= 2 and len(told) < len(rows)
    assert {("p2p" in row, "all_gather" in row) for row in told} == {(True, False), (False, True)}
    # said beside the sharding, not in the layers/stage cell (QA, 2026-12-06)
    assert all(re.search(r"<td>[^<]*<br><span[^>]*>differs in CP communication: ", row) for row in told)
    assert not any(re.search(r"\d<br><span[^>]*>differs in", row) for row in told)


def test_the_deadline_form_sends_its_numbers_as_numbers(web: Any) -> None:
    """The body refuses numbers sent as text (QA, 2026-12-06), and the deadline form sent every box as typed: each
    number box reads as a number (1e3 nodes as 1000), and text that is none is named at its box."""
    from app.web.deadline import DEFAULTS, to_body

    body = to_body({**DEFAULTS, "nodes_max": "1e3", "seq_length": "8,192", "price.H100-SXM": "2.5"})
    assert body["nodes_max"] == 1000 and body["deadline_days"] == 30.0 and body["model"]["seq_length"] == 8192
    assert body["training"] == {
        "global_batch_size": 512,
        "train_tokens": 1e12,
        "precision": "bf16",
        "framework": "megatron",
    }
    assert {"gpu": "H100-SXM", "price_per_gpu_hour": 2.5} in body["gpus"]
    assert to_body({**DEFAULTS, "nodes_max": "2.5"})["nodes_max"] == 2.5  # the body says it is no integer
    assert to_body({**DEFAULTS, "deadline_days": "soon"})["deadline_days"] == "soon"


def test_the_deadline_heading_says_the_deadline_as_typed(web: Any) -> None:
    """A deadline of 0.01 days was headed "No plan meets 0 days" (QA, 2026-12-07)."""
    from app.web.deadline import DEFAULTS

    values = {**DEFAULTS, "model": "tiny-gpt", "seq_length": "256", "deadline_days": "0.01", "nodes_max": "1",
              "training.train_tokens": "1e12", "training.global_batch_size": "8", "price.H100-SXM": "2.5"}  # fmt: skip
    page = web.post("/cheapest", data=values)
    assert page.status_code == 200, page.text[:2000]
    assert "No plan meets 0.01 days" in page.text


def test_the_deadline_form_says_why_a_choice_is_refused(web: Any) -> None:
    """training.precision fp4 or framework zzz came back as "1 field below needs a change" with no message anywhere
    (QA, 2026-12-07): the selects now show theirs."""
    from app.web.deadline import DEFAULTS

    for name, bad in (("training.precision", "fp4"), ("training.framework", "zzz")):
        values = {**DEFAULTS, "model": "tiny-gpt", "price.H100-SXM": "2.5", name: bad}
        page = web.post("/cheapest", data=values)
        assert page.status_code == 422, page.text[:500]
        error, _ = element(page.text, f"err-{name}")
        assert f"(got '{bad}')" in error and "Input should be" in error, error


def test_the_deadline_forms_switches_come_back_to_it_filled(web: Any) -> None:
    """The units and theme switches on /cheapest went to the empty form: what was typed was lost (QA 2026-12-07).
    They come back with every value that differs from the empty form's, an unticked box included."""
    import html as html_lib
    import re
    from urllib.parse import parse_qs, urlsplit

    from app.web.deadline import DEFAULTS

    values = {**DEFAULTS, "model": "llama-3-70b", "deadline_days": "45", "nodes_max": "0", "price.GB300": "6.1"}
    values.pop("wall_clock")  # unticked: not sent
    page = web.post("/cheapest", data=values)
    assert page.status_code == 422
    link = html_lib.unescape(re.search(r'class="pref" href="([^"]+)"', page.text).group(1))  # type: ignore[union-attr]
    back = parse_qs(urlsplit(link).query)["back"][0]
    assert back.startswith("/cheapest?")
    again = web.get(back).text
    for name, value in (("model", "llama-3-70b"), ("deadline_days", "45"), ("nodes_max", "0"), ("price.GB300", "6.1")):
        assert re.search(rf'name="{re.escape(name)}"[^>]*value="{re.escape(value)}"', again) or (
            f'<option value="{value}" selected' in again
        ), name
    assert 'name="wall_clock" value="true" checked' not in again
    assert web.get("/cheapest").text.count('name="wall_clock" value="true" checked') == 1  # the empty form's default


def test_the_gpu_choices_say_their_memory_as_the_charts_do(web: Any) -> None:
    """The GPU select read "H100-SXM (80 GiB)" where every chart said 79.6 GiB, and stayed in GiB under the GB
    setting, on the form and in the what-if control (QA 2026-12-07)."""
    gib = web.get("/").text
    assert '<option value="H100-SXM" selected>H100-SXM (79.6 GiB)</option>' in gib
    made = web.post("/plans", json={"model": "tiny-gpt", "cluster": {"num_nodes": 1, "gpu": "H100-SXM"},
                                    "training": {"global_batch_size": 8}}).json()  # fmt: skip
    web.get("/prefs?units=GB&back=/")
    for page in (web.get("/").text, web.get(f"/p/{made['id']}").text):
        assert "H100-SXM (85.5 GB)</option>" in page and "(79.6 GiB)</option>" not in page
