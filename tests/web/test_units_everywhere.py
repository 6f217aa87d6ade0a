"""The result page renders from the stored plan (no planner memory estimate per render), and with GB chosen every
memory number on the result, compare and what-if pages reads in GB, converted right (x GiB = x * 1.073741824 GB)."""

from __future__ import annotations

import html
import importlib
import re
from typing import Any
from unittest import mock

import pytest

from tests.api.conftest import SMALL

FITS = {**SMALL, "training": {"global_batch_size": 512}}  # fits, and some candidates run out of memory
NOTHING_FITS = {  # a 70B on one node: every candidate runs out of memory; "2 nodes would fit"
    "model": "llama-2-70b",
    "cluster": {"num_nodes": 1, "gpus_per_node": 8, "gpu": "H100-SXM"},
    "training": {"global_batch_size": 64},
}
GB_PER_GIB = 2**30 / 1e9  # 1.073741824
NUMBER = r"\d[\d,]*(?:\.\d+)?"


def stored(web: Any, body: dict[str, Any]) -> dict[str, Any]:
    r = web.post("/plans", json=body)
    assert r.status_code == 201, r.text
    return dict(r.json())


def get(web: Any, url: str, units: str) -> str:
    web.cookies.set("tp_prefs", f"{units}.system")
    try:
        r = web.get(url)
    finally:
        web.cookies.delete("tp_prefs")
    assert r.status_code == 200, r.text[:500]
    return str(r.text)


def counted_estimates() -> Any:
    """Counts the planner's memory estimates however they are reached (app.planner.estimate.memory calls it)."""
    module = importlib.import_module("app.planner.estimate")  # the package's `estimate` is a function of it
    return mock.patch.object(module, "memory_estimate", wraps=module.memory_estimate)


def test_rendering_a_result_page_does_not_rerun_the_planners_memory_estimate(web: Any) -> None:
    """The rejected-candidates table re-ran the memory estimate of every out-of-memory group's example on every
    render (the byte counts its GB sentences are converted from), in GiB too, where they are not used at all."""
    for body in (FITS, NOTHING_FITS):
        created = stored(web, body)
        assert any(" GiB" in g["message"] for g in created["result"]["rejected"])  # the case that recomputed
        with counted_estimates() as calls:
            for _ in range(3):
                get(web, f"/p/{created['id']}", "GiB")
        assert calls.call_count == 0
        with counted_estimates() as calls:
            get(web, f"/p/{created['id']}", "GB")
            first = calls.call_count
            for _ in range(3):
                get(web, f"/p/{created['id']}", "GB")
        assert first <= len(created["result"]["rejected"])  # once per group at most, the first time
        assert calls.call_count == first  # and never again


def visible(page: str) -> str:
    """The page's text as read, without the units switch (its "GB → GiB" names the other unit), the charts (their
    axes are in the unit, tested with the charts) and the rendered files' text (a file says what it says)."""
    page = re.sub(r'<a class="pref" href="/prefs\?units=[^"]*"[^>]*>.*?</a>', "", page)
    page = re.sub(r"<svg\b.*?</svg>", "", page, flags=re.S)
    page = re.sub(r'<pre [^>]*class="code diff">.*?</pre>', "", page, flags=re.S)
    page = re.sub(r"<(script|style)\b.*?</\1>", "", page, flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def section(page: str, start: str, end: str) -> str:
    assert start in page, start
    return visible(page.split(start, 1)[1].split(end, 1)[0])


def pages(web: Any) -> dict[str, tuple[str, str]]:
    """(GiB page, GB page) of each page a user sees memory on: a plan that fits, one where nothing fits, the
    what-if made from a suggestion, and the compare page."""
    fits, nothing = stored(web, FITS), stored(web, NOTHING_FITS)
    out = {name: (get(web, f"/p/{c['id']}", "GiB"), get(web, f"/p/{c['id']}", "GB")) for name, c in
           (("fits", fits), ("nothing fits", nothing))}  # fmt: skip
    compare = f"/compare?p={fits['id']}:1&p={fits['id']}:2"
    out["compare"] = (get(web, compare, "GiB"), get(web, compare, "GB"))
    whatif = []
    for units in ("GiB", "GB"):
        web.cookies.set("tp_prefs", f"{units}.system")
        r = web.post("/whatif", data={"whatif.from": nothing["id"], "cluster.num_nodes": "2"})
        web.cookies.delete("tp_prefs")
        assert r.status_code == 200, r.text[:500]
        whatif.append(str(r.text))
    out["what-if"] = (whatif[0], whatif[1])
    return out


def test_with_gb_chosen_no_page_shows_gib(web: Any) -> None:
    """The stack's and the GPU's evidence ("2% + 1 GiB over allocated", "~1.5 GiB outside torch's allocator") and
    the constants' sources stayed in GiB on a GB page, beside GB everywhere else."""
    for name, (gib_page, gb_page) in pages(web).items():
        assert "GiB" in visible(gib_page), name  # the check below can fail: the same page in GiB says GiB
        shown = visible(gb_page)
        assert "GiB" not in shown, (name, shown[max(0, shown.find("GiB") - 200) : shown.find("GiB") + 40])
        assert re.search(r"\bGB\b", shown), name


def slots(text: str) -> tuple[str, list[str]]:
    """A GiB text as a pattern its GB version must match: every memory number ("N GiB", "A of B GiB", "A–B GiB")
    a slot for a number in GB; the numbers in GiB."""
    numbers: list[str] = []
    parts: list[str] = []
    at = 0
    for m in re.finditer(rf"(?:({NUMBER})( of | / |–| to ))?({NUMBER}) GiB\b", text):
        parts.append(re.escape(text[at : m.start()]))
        if m.group(1):
            numbers.append(m.group(1))
            parts.append(rf"({NUMBER}){re.escape(m.group(2))}")
        numbers.append(m.group(3))
        parts.append(rf"({NUMBER}) GB\b")
        at = m.end()
    parts.append(re.escape(text[at:]))
    return "".join(parts), numbers


@pytest.mark.parametrize(
    ("which", "start", "end", "written"),
    [
        # the planner's sentences about a found plan, converted as written: nothing more exact is stored
        ("nothing fits", '<section class="card" id="suggestions">', "</section>", True),
        ("nothing fits", '<section class="card assumptions">', "</section>", True),
        ("fits", '<section class="card assumptions">', "</section>", True),
        # sentences written from byte counts the page knows: those, so each is within rounding of x GiB
        ("nothing fits", '<table class="rejected">', "</table>", False),
        ("fits", '<table class="rejected">', "</table>", False),
        ("fits", '<ul class="why">', "</ul>", False),
        ("what-if", '<ul class="why">', "</ul>", False),
    ],
)
def test_with_gb_chosen_each_memory_number_is_converted_right(
    web: Any, which: str, start: str, end: str, written: bool
) -> None:
    gib_page, gb_page = pages(web)[which]
    gib_text, gb_text = section(gib_page, start, end), section(gb_page, start, end)
    pattern, numbers = slots(gib_text)
    assert numbers, gib_text  # there is something to convert here
    match = re.fullmatch(pattern, gb_text)
    assert match, (gib_text, gb_text)  # the same text, but for the numbers and their unit
    for gib, gb in zip(numbers, match.groups(), strict=True):
        want = float(gib.replace(",", "")) * GB_PER_GIB
        got = float(gb.replace(",", ""))
        if written:
            assert gb == f"{want:,.1f}", (gib, gb)
        else:  # x GiB was rounded to 0.1 from the bytes: 0.05 GiB either way, then rounded to 0.1 GB
            assert abs(got - want) <= 0.05 * GB_PER_GIB + 0.05 + 1e-9, (gib, gb)
