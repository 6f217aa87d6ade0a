"""A what-if of a plan whose saved cluster was changed (PUT) or deleted since: it stays on the description the plan
was made with, is not filed under the saved cluster's name, and says so once; a typo's form comes back as that
description, so that fixing it plans the same (QA 2026-12-07: the re-plan was filed under the changed cluster, and
the typo's form came back in saved mode, which re-planned on the new GPU or was refused once the cluster was gone)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.api.conftest import SMALL

POD = {"num_nodes": 4, "gpu": "H100-SXM", "hosts": ["n1", "n2", "n3", "n4"]}


def _plan_on_pod(web: Any, name: str) -> str:
    assert web.post("/clusters", json={"name": name, "cluster": POD}).status_code == 201
    r = web.post("/plans", json={**SMALL, "model": "llama-3-8b", "cluster": {"saved": name, "num_nodes": 2}})
    assert r.status_code == 201 and r.json()["cluster_name"] == name, r.text
    return str(r.json()["id"])


def _changed(web: Any, name: str, how: str) -> str:
    if how == "deleted":
        assert web.delete(f"/clusters/{name}").status_code == 204
        return f"cluster: the saved cluster '{name}' this plan was made on no longer exists"
    body = {"version": 1, "cluster": {**POD, "gpu": "A100-40GB"}}
    assert web.put(f"/clusters/{name}", json=body).status_code == 200
    return f"cluster: the saved cluster '{name}' this plan was made on was changed (now version 2)"


@pytest.mark.parametrize("how", ["changed", "deleted"])
def test_a_what_if_stays_on_the_plans_cluster_once_its_saved_cluster_changed(web: Any, how: str) -> None:
    plan_id = _plan_on_pod(web, f"pod-{how}")
    said = _changed(web, f"pod-{how}", how)
    r = web.post("/whatif", data={"whatif.from": plan_id, "cluster.num_nodes": "3"}, follow_redirects=False)
    assert r.status_code == 303, r.text
    again = web.get("/plans/" + r.headers["location"].rsplit("/", 1)[1]).json()
    assert again["cluster_name"] is None
    assert again["result"]["cluster"]["gpu"]["name"] == "H100-SXM" and again["result"]["cluster"]["num_nodes"] == 3
    assert len([n for n in again["notices"] if n.startswith(said)]) == 1
    # the plan's own hosts, not the saved cluster's: the plan named 2
    assert again["result"]["cluster"]["hosts"] == []
    assert "cluster.hosts: the plan named 2 hosts for 3 nodes: none kept" in again["notices"]
    page = web.get(r.headers["location"]).text
    assert page.count(said.replace("'", "&#39;")) == 1


@pytest.mark.parametrize("how", ["changed", "deleted"])
def test_a_what_if_typo_comes_back_as_the_plans_cluster(web: Any, how: str) -> None:
    plan_id = _plan_on_pod(web, f"pod-t{how}")
    said = _changed(web, f"pod-t{how}", how)
    page = web.post("/whatif", data={"whatif.from": plan_id, "cluster.num_nodes": "abc"}, follow_redirects=False)
    assert page.status_code == 422
    assert re.search(r'name="cluster_mode" value="custom" checked', page.text), page.text
    assert re.search(r'<option value="H100-SXM" selected>', page.text)
    assert page.text.count(said.replace("'", "&#39;")) == 1
    # the form fixed and sent plans what the right what-if plans (the same form values, typed right)
    fixed = web.post("/whatif", data={"whatif.from": plan_id, "cluster.num_nodes": "3"}, follow_redirects=False)
    again = web.get("/plans/" + fixed.headers["location"].rsplit("/", 1)[1]).json()
    assert again["result"]["cluster"]["gpu"]["name"] == "H100-SXM" and again["cluster_name"] is None


def test_a_what_if_on_an_unchanged_saved_cluster_keeps_its_name(web: Any) -> None:
    plan_id = _plan_on_pod(web, "pod-same")
    r = web.post("/whatif", data={"whatif.from": plan_id, "cluster.num_nodes": "3"}, follow_redirects=False)
    again = web.get("/plans/" + r.headers["location"].rsplit("/", 1)[1]).json()
    assert again["cluster_name"] == "pod-same" and again["result"]["cluster"]["hosts"] == ["n1", "n2", "n3"]
    assert not [n for n in again["notices"] if "this plan was made on" in n]
