"""Saved clusters (SQLite file and PostgreSQL): CRUD with owner/admin rules and versioned edits, reuse in plan
requests (the plan keeps the description it was made with), errors naming the field, nothing lost."""

from __future__ import annotations

from typing import Any

from tests.api.conftest import TINY, ClientFactory, auth, login_token

POD = {
    "name": "pod-a",
    "description": "two H100 nodes",
    "cluster": {"num_nodes": 2, "gpus_per_node": 8, "gpu": "H100-SXM", "nics": ["mlx5_0", "mlx5_1"]},
}


def test_save_use_change_and_delete_a_cluster(make_client: ClientFactory) -> None:
    with make_client() as client:
        r = client.post("/clusters", json=POD)
        assert r.status_code == 201 and r.headers["location"] == "/clusters/pod-a", r.text
        assert (
            r.json()["version"] == 1 and r.json()["num_gpus"] == 16 and r.json()["cluster"]["gpu"]["name"] == "H100-SXM"
        )
        plan = client.post("/plans", json={**TINY, "cluster": {"saved": "pod-a"}}).json()
        planned = plan["result"]["cluster"]
        assert planned["num_nodes"] == 2 and planned["nics"] == ["mlx5_0", "mlx5_1"]
        assert plan["request"]["cluster"] == POD["cluster"]  # stored as the description it was then
        assert any("saved cluster 'pod-a' (version 1" in n for n in plan["notices"])
        smaller = client.post("/plans", json={**TINY, "cluster": {"saved": "pod-a", "num_nodes": 1}}).json()
        assert smaller["result"]["cluster"]["num_nodes"] == 1
        changed = {"version": 1, "description": "four nodes", "cluster": {**POD["cluster"], "num_nodes": 4}}
        r = client.put("/clusters/pod-a", json=changed)
        assert r.status_code == 200 and r.json()["version"] == 2 and r.json()["cluster"]["num_nodes"] == 4
        stale = client.put("/clusters/pod-a", json=changed)  # made on version 1 again: refused, nothing overwritten
        assert stale.status_code == 409 and stale.json()["errors"][0]["field"] == "version"
        assert "version(1) != the stored version(2)" in stale.json()["detail"]
        assert "(GET /clusters/pod-a)" in stale.json()["detail"]  # it said "{name}" (QA, 2026-12-06)
        assert client.get(f"/plans/{plan['id']}").json()["request"]["cluster"]["num_nodes"] == 2  # plan unchanged
        assert client.delete("/clusters/pod-a").status_code == 204
        assert client.get("/clusters/pod-a").status_code == 404
        again = client.post("/plans", json={**TINY, "cluster": {"saved": "pod-a"}})
        assert again.status_code == 422 and again.json()["errors"][0]["field"] == "cluster.saved"
        audit = client.get("/audit").json()["items"]
        deleted = next(e for e in audit if e["action"] == "cluster.delete")
        assert deleted["detail"]["previous"]["spec"]["num_nodes"] == 4  # what was deleted is in the audit log
        updated = next(e for e in audit if e["action"] == "cluster.update")
        assert updated["detail"]["previous"]["spec"] == POD["cluster"]
        assert client.get(f"/plans/{plan['id']}/artifacts/plan.json").status_code in (200, 404)


def test_bad_clusters_name_the_field_and_the_numbers(make_client: ClientFactory) -> None:
    with make_client() as client:
        bad = client.post("/clusters", json={**POD, "cluster": {**POD["cluster"], "num_nodes": 0}})
        assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "cluster.num_nodes"
        assert "(got 0)" in bad.json()["errors"][0]["message"]
        hosts = client.post("/clusters", json={**POD, "cluster": {**POD["cluster"], "hosts": ["a", "b", "c"]}})
        assert hosts.status_code == 422 and "3 hosts but num_nodes is 2" in hosts.json()["detail"]
        name = client.post("/clusters", json={**POD, "name": "no spaces"})
        assert name.status_code == 422 and name.json()["errors"][0]["field"] == "name"
        assert client.post("/clusters", json=POD).status_code == 201
        taken = client.post("/clusters", json={**POD, "description": "another"})
        assert taken.status_code == 409 and taken.json()["errors"][0]["field"] == "name"
        assert client.get("/clusters/pod-a").json()["description"] == "two H100 nodes"  # the first one kept
        custom = {"preset": "H100-SXM", "memory_bytes": 64 * 2**30}
        r = client.post("/clusters", json={**POD, "name": "custom", "cluster": {**POD["cluster"], "gpu": custom}})
        assert r.status_code == 201 and r.json()["cluster"]["gpu"]["memory_bytes"] == 64 * 2**30
        over = client.post("/plans", json={**TINY, "cluster": {"saved": "custom", "num_nodes": -1}})
        assert over.status_code == 422 and over.json()["errors"][0]["field"] == "cluster.num_nodes"


def test_only_the_owner_or_an_admin_changes_a_cluster(make_client: ClientFactory) -> None:
    with make_client() as client:
        alice, bob = auth(login_token(client, "alice")), auth(login_token(client, "bob"))
        reader = auth(login_token(client, "rita", "read-only"))
        assert client.post("/clusters", json=POD, headers=alice).json()["owner"] == "alice"
        assert client.post("/clusters", json={**POD, "name": "x"}, headers=reader).status_code == 403
        assert client.get("/clusters/pod-a", headers=reader).status_code == 200
        change = {"version": 1, "cluster": POD["cluster"]}
        refused = client.put("/clusters/pod-a", json=change, headers=bob)
        assert refused.status_code == 403 and refused.json()["errors"][0]["field"] == "name"
        assert client.delete("/clusters/pod-a", headers=bob).status_code == 403
        assert client.get("/clusters", params={"owner": "me"}, headers=bob).json()["total"] == 0
        assert client.get("/clusters", params={"owner": "me"}, headers=alice).json()["total"] == 1
        assert client.put("/clusters/pod-a", json=change).status_code == 200  # the admin
        assert client.delete("/clusters/pod-a", headers=alice).status_code == 204


def test_saved_clusters_survive_a_restart(make_client: ClientFactory) -> None:
    with make_client() as client:
        assert client.post("/clusters", json=POD).status_code == 201
    with make_client() as client:
        body: dict[str, Any] = client.get("/clusters").json()
        assert [c["name"] for c in body["items"]] == ["pod-a"] and body["items"][0]["sent"] == POD["cluster"]


def test_cluster_names_are_told_apart_without_case(make_client: ClientFactory) -> None:
    """`pod-a` and `POD-A` could both be saved, and `{"saved": "Pod-A"}` was a 404 (QA): a name means one cluster,
    whatever its case, in a request, a read, an edit and a delete."""
    with make_client() as client:
        assert client.post("/clusters", json=POD).status_code == 201
        twin = client.post("/clusters", json={**POD, "name": "POD-A"})
        assert twin.status_code == 409 and "a saved cluster named 'pod-a' exists already" in twin.json()["detail"]
        plan = client.post("/plans", json={**TINY, "cluster": {"saved": "Pod-A"}})
        assert plan.status_code == 201 and plan.json()["result"]["cluster"]["num_nodes"] == 2, plan.text
        assert client.get("/clusters/POD-A").json()["name"] == "pod-a"
        changed = {"version": 1, "description": "four nodes", "cluster": {**POD["cluster"], "num_nodes": 4}}
        assert client.put("/clusters/Pod-a", json=changed).json()["version"] == 2
        assert client.delete("/clusters/POD-a").status_code == 204
        assert client.get("/clusters").json()["total"] == 0


def test_a_saved_cluster_with_hosts_takes_another_node_count(make_client: ClientFactory) -> None:
    """`{"saved": name, "num_nodes": N}` on a cluster that lists its hosts was refused with "cluster.hosts: lists 4
    hosts but num_nodes is 2", a field the user never sent (QA, 2026-12-07). On fewer nodes the first hosts are kept
    (the head node first), on more none (the added nodes have no names), as the web what-if does; a notice says so."""
    pod = {**POD, "name": "pod-h", "cluster": {**POD["cluster"], "num_nodes": 4, "hosts": ["a1", "a2", "a3", "a4"]}}
    with make_client() as client:
        assert client.post("/clusters", json=pod).status_code == 201
        fewer = client.post("/plans", json={**TINY, "cluster": {"saved": "pod-h", "num_nodes": 2}})
        assert fewer.status_code == 201, fewer.text
        assert fewer.json()["result"]["cluster"]["hosts"] == ["a1", "a2"]
        assert any("the first 2 of its 4 hosts" in n for n in fewer.json()["notices"]), fewer.json()["notices"]
        more = client.post("/plans", json={**TINY, "cluster": {"saved": "pod-h", "num_nodes": 8}})
        assert more.status_code == 201, more.text
        assert not more.json()["result"]["cluster"]["hosts"]
        assert any("names 4 hosts for 8 nodes: none kept" in n for n in more.json()["notices"])
        named = client.post("/plans", json={**TINY, "cluster": {"saved": "pod-h", "num_nodes": 2, "hosts": ["x"]}})
        assert named.status_code == 422 and "1 hosts but num_nodes is 2" in named.json()["detail"]  # sent: checked


def test_the_plan_list_filters_by_saved_cluster(make_client: ClientFactory) -> None:
    """The list filtered by model, GPU and user, never by the saved cluster a plan was made on (the request keeps its
    description, not its name): GET /plans, /recent and its CSV filter by it, and show it."""
    with make_client() as client:
        assert client.post("/clusters", json={**POD, "name": "Lab-A"}).status_code == 201
        on_lab = client.post("/plans", json={**TINY, "cluster": {"saved": "lab-a"}}).json()  # any case names it
        inline = client.post("/plans", json={**TINY, "cluster": POD["cluster"]}).json()
        page = client.get("/plans", params={"cluster": "Lab-A"}).json()
        assert [p["id"] for p in page["items"]] == [on_lab["id"]] and page["items"][0]["cluster_name"] == "Lab-A"
        every = {p["id"]: p["cluster_name"] for p in client.get("/plans").json()["items"]}
        assert every == {on_lab["id"]: "Lab-A", inline["id"]: None}
        listed = client.get("/recent", params={"cluster": "Lab-A"}).text
        assert f"/p/{on_lab['id']}" in listed and f"/p/{inline['id']}" not in listed
        assert '<option value="Lab-A" selected>Lab-A</option>' in listed and "on Lab-A" in listed
        rows = client.get("/recent.csv", params={"cluster": "Lab-A"}).text.splitlines()
        assert rows[0].endswith(",cluster") and len(rows) == 2 and rows[1].startswith(on_lab["id"])
        assert rows[1].endswith(",Lab-A")
        assert client.get("/plans", params={"cluster": "nowhere"}).json()["items"] == []
        # one name in any case, as the cluster store reads it; in the search words; on the plan itself
        assert [p["id"] for p in client.get("/plans", params={"cluster": "LAB-a"}).json()["items"]] == [on_lab["id"]]
        assert [p["id"] for p in client.get("/plans", params={"q": "lab-a"}).json()["items"]] == [on_lab["id"]]
        assert client.get(f"/plans/{on_lab['id']}").json()["cluster_name"] == "Lab-A"
        # its GPU swapped, it is other hardware: not a plan made on Lab-A
        swapped = client.post("/plans", json={**TINY, "cluster": {"saved": "Lab-A", "gpu": "A100-80GB"}}).json()
        assert swapped["cluster_name"] is None and len(client.get("/plans?cluster=Lab-A").json()["items"]) == 1
        # deleted and saved again in another case: one choice in the list's select
        assert client.delete("/clusters/Lab-A").status_code == 204
        assert client.post("/clusters", json={**POD, "name": "lab-a"}).status_code == 201
        client.post("/plans", json={**TINY, "cluster": {"saved": "lab-a"}})
        assert client.get("/plans", params={"cluster": "lab-a"}).json()["total"] == 2
        page = client.get("/recent").text
        assert page.count('<option value="Lab-A"') + page.count('<option value="lab-a"') == 1
