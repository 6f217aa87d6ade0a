"""Hostile requests and crashes against the real server (issue 15): every answer a 2xx or a 4xx that names a field,
no 500, every stored plan readable, no acknowledged plan lost and none made twice across `kill -9`.

    python benchmarks/service_hostile.py                                   # SQLite
    python benchmarks/service_hostile.py --database postgresql+psycopg://u:p@127.0.0.1:5432/db --crashes 5

Starts `trainplan serve` (a free port; a throwaway SQLite file, or the PostgreSQL database given, whose tables are
dropped first), makes an admin, a user, a second user and a read-only account with the CLI, sends the hand-made
cases below, reads back every plan that was stored, then runs the crash rounds: 8 writers post plans with
Idempotency-Keys, the server is killed with SIGKILL mid-stream and restarted, every plan acknowledged with a 201
must be there, and retrying every key must leave exactly one plan per key. Prints one markdown table.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.api.test_server import _env, cli, serving  # noqa: E402  (the same helpers the tests use)

TINY: dict[str, Any] = {
    "model": "tiny-gpt",
    "cluster": {"num_nodes": 1, "gpus_per_node": 2, "gpu": "H100-SXM"},
    "training": {"global_batch_size": 8},
}
NUMBERS = [0, -1, 5e-324, 1e-300, 1e300, 1.7e308, 2**63, 2**64, -(2**63), 10**30, 0.5, 3.7]
RAW_NUMBERS = ["Infinity", "-Infinity", "NaN", "1e400", "1" * 5000]
NUMERIC_PATHS = [
    "cluster.num_nodes",
    "cluster.gpus_per_node",
    "cluster.intra_node_GBps",
    "cluster.inter_node_GBps",
    "cluster.cpu_memory_GiB",
    "cluster.nvme_GBps",
    "cluster.host_to_device_GBps",
    "cluster.cpu_adam_params_per_s",
    "cluster.mtbf_hours",
    "cluster.checkpoint_storage_GBps",
    "cluster.restart_overhead_s",
    "cluster.gpu.memory_bytes",
    "cluster.gpu.bf16_TFLOPs",
    "cluster.gpu.fp16_TFLOPs",
    "cluster.gpu.fp8_TFLOPs",
    "cluster.gpu.hbm_TBps",
    "cluster.gpu.nvlink_GBps",
    "cluster.gpu.nvlink_domain",
    "cluster.gpu.network_GBps",
    "cluster.gpu.pcie_GBps",
    "training.global_batch_size",
    "training.memory_headroom",
    "training.train_tokens",
    "training.max_plans",
    "training.search_time_limit_s",
    "training.moe_load_imbalance",
    "training.pinned.tp",
    "training.pinned.pp",
    "training.pinned.vpp",
    "training.pinned.dp",
    "training.pinned.cp",
    "training.pinned.ep",
    "training.pinned.micro_batch_size",
    "training.pinned.num_nodes",
    "model.kv_channels",
    "model.ffn_hidden_size",
    "model.num_query_groups",
    "model.seq_length",
    "model.num_experts",
    "model.vocab_size",
]
LAYOUT = ["tp", "pp", "vpp", "dp", "cp", "ep", "etp", "micro_batch_size", "first_stage_layers", "recompute_num_layers"]
HF_KEYS = [
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
    "head_dim",
    "num_key_value_heads",
    "attention_dropout",
    "num_local_experts",
    "num_experts_per_tok",
    "mlp_only_layers",
    "tie_word_embeddings",
    "model_type",
    "_name_or_path",
]
ODD = [[1, 2], {"x": 1}, "12", -4, None, True, 10**20, 1.5, "\u2028kind: Pod"]
HF_BASE = {
    "model_type": "llama",
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "intermediate_size": 512,
    "vocab_size": 1000,
    "max_position_embeddings": 512,
}


@dataclass
class Case:
    kind: str
    method: str
    url: str
    json: Any = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    who: str = "admin"
    expect: tuple[int, ...] = ()  # exact statuses allowed ((): any 2xx or a 4xx naming a field)


def _with(path: str, value: Any, base: dict[str, Any] = TINY) -> dict[str, Any]:
    import copy

    body = copy.deepcopy(base)
    if path.startswith("cluster.gpu."):
        body["cluster"]["gpu"] = {"preset": "H100-SXM"}
    if path.startswith("model."):
        body["model"] = {"preset": "tiny-gpt"}
    *parents, leaf = path.split(".")
    target = body
    for p in parents:
        target = target.setdefault(p, {})
    target[leaf] = value
    return body


def cases(plan_of_user: str) -> Iterator[Case]:
    for path in NUMERIC_PATHS:
        for value in NUMBERS:
            yield Case("numbers", "POST", "/plans", _with(path, value))
        for raw in RAW_NUMBERS:
            text = f'{{"model": "tiny-gpt", "cluster": {{"num_nodes": 1, "gpu": "H100-SXM"}}, "x": {raw}}}'
            yield Case("numbers", "POST", "/estimate", content=text.encode())
    for key in HF_KEYS:
        for value in ODD:
            yield Case("config.json", "POST", "/plans", {**TINY, "model": {"hf_config": {**HF_BASE, key: value}}})
    for dim in LAYOUT:
        for value in (0, 2_000_000, 2**63, -3):
            yield Case("estimate layout", "POST", "/estimate", {**TINY, "parallel": {dim: value}})
    for text in (
        b"[" * 200_000 + b"]" * 200_000,
        b'{"model": "\\ud800"}',
        b'{"a": "\xff"}',
        b"",
        b"[]",
        b"null",
        b'{"model": {"preset": "tiny-gpt", "name": "' + "\U0001f600\u2029".encode() * 20 + b'"}}',
    ):
        for url in ("/plans", "/estimate"):
            yield Case("json", "POST", url, content=text)
    yield Case("json", "POST", "/plans", content=b"{}", headers={"content-type": "text/plain"}, expect=(415,))
    for params in ("offset=9223372036854775808", "limit=0", "limit=99999999999999999999", "owner=..", "offset=-1"):
        yield Case("query", "GET", f"/plans?{params}", expect=(422,))
    for path in (
        "/plans/ZZZ",
        "/plans/0123456789abcdef",
        "/plans/0123456789abcdef/artifacts/..%2f..%2fetc",
        "/plans/0123456789abcdef/bundle.zip?rank=0",
        "/p/0123456789abcdef/memory.svg?rank=99999",
    ):
        yield Case("paths", "GET", path, expect=(404, 422))
    yield Case("auth", "POST", "/plans", TINY, who="nobody", expect=(401,))
    yield Case("auth", "GET", "/plans", who="nobody", expect=(401,))
    yield Case("auth", "POST", "/plans", TINY, headers={"Authorization": "Bearer tp_0_x"}, who="raw", expect=(401,))
    yield Case("auth", "POST", "/plans", TINY, who="reader", expect=(403,))
    yield Case("auth", "DELETE", f"/plans/{plan_of_user}", who="other", expect=(403,))
    yield Case("auth", "DELETE", f"/plans/{plan_of_user}", who="reader", expect=(403,))
    yield Case("auth", "GET", "/audit", who="user", expect=(403,))
    yield Case("auth", "POST", "/plans", TINY, headers={"Origin": "https://evil.example"}, expect=(403,))
    yield Case(
        "auth",
        "POST",
        "/",
        content=b"model_mode=preset",
        who="nobody",
        headers={"content-type": "application/x-www-form-urlencoded"},
        expect=(303,),
    )
    for key in ("", "x" * 300, "sp ace", "\u00e9"):
        yield Case("idempotency", "POST", "/plans", TINY, headers={"Idempotency-Key": key}, expect=(422,))


def _judge(case: Case, r: httpx.Response) -> str | None:
    """None if the answer is right, else what is wrong."""
    if r.status_code >= 500:
        return f"{r.status_code}"
    if case.expect:
        return None if r.status_code in case.expect else f"{r.status_code}, expected {case.expect}"
    if 200 <= r.status_code < 300:
        return None
    body = r.json()
    if not body.get("errors") or not all(e.get("message") for e in body["errors"]):
        return f"{r.status_code} without a field error"
    return None


def hostile(base: str, tokens: dict[str, str]) -> tuple[Counter[str], Counter[str], list[str], int]:
    tried, failed, stored, examples = Counter[str](), Counter[str](), [], []
    user_plan = httpx.post(
        f"{base}/plans", json=TINY, headers={"Authorization": f"Bearer {tokens['user']}"}, timeout=60
    ).json()["id"]
    stored.append(user_plan)
    with httpx.Client(base_url=base, timeout=60, follow_redirects=False) as client:
        for case in cases(user_plan):
            headers = {"content-type": "application/json", **case.headers}
            if case.who in tokens:
                headers.setdefault("Authorization", f"Bearer {tokens[case.who]}")
            content = (
                case.content
                if case.content is not None
                else httpx.Request("POST", "/", json=case.json).content
                if case.json is not None
                else None
            )
            r = client.request(
                case.method,
                case.url,
                content=content,
                headers={k: v.encode() if isinstance(v, str) else v for k, v in headers.items()},
            )
            tried[case.kind] += 1
            wrong = _judge(case, r)
            if wrong:
                failed[case.kind] += 1
                examples.append(f"{case.kind} {case.method} {case.url}: {wrong}")
            if r.status_code == 201 and case.url == "/plans":
                stored.append(r.json()["id"])
        admin = {"Authorization": f"Bearer {tokens['admin']}"}
        unreadable = sum(client.get(f"/plans/{pid}", headers=admin).status_code != 200 for pid in stored)
    return tried, failed, examples, unreadable


def _writer(base: str, token: str, prefix: str, acked: dict[str, str], sent: set[str], stop: threading.Event) -> None:
    i = 0
    with httpx.Client(base_url=base, timeout=10) as client:
        while not stop.is_set():
            key = f"{prefix}-{i}"
            i += 1
            sent.add(key)
            try:
                r = client.post(
                    "/plans", json=TINY, headers={"Authorization": f"Bearer {token}", "Idempotency-Key": key}
                )
            except httpx.HTTPError:
                return  # the server is gone
            if r.status_code == 201:
                acked[key] = r.json()["id"]


def crash_round(env: dict[str, str], token: str, rnd: int, rng: random.Random) -> tuple[int, int, int, int]:
    """(acknowledged, lost, keys retried, made twice) of one kill -9 under 8 writers: afterwards every key sent is
    retried, and the user must then have exactly one plan per key (and the warm-up one)."""
    acked: dict[str, str] = {}
    sent: set[str] = set()
    stop = threading.Event()
    with serving(env) as (base, proc):
        warm = httpx.post(f"{base}/plans", json=TINY, headers={"Authorization": f"Bearer {token}"}, timeout=60)
        warm.raise_for_status()  # planner processes up: the writers' plans go through at full speed
        warm_id = warm.json()["id"]
        threads = [
            threading.Thread(target=_writer, args=(base, token, f"r{rnd}w{w}", acked, sent, stop)) for w in range(8)
        ]
        for t in threads:
            t.start()
        time.sleep(rng.uniform(1.5, 4.0))
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        stop.set()
        for t in threads:
            t.join()
    with serving(env) as (base, _proc), httpx.Client(base_url=base, timeout=60) as client:
        auth = {"Authorization": f"Bearer {token}"}
        lost = sum(client.get(f"/plans/{pid}", headers=auth).status_code != 200 for pid in acked.values())
        made = {
            key: client.post("/plans", json=TINY, headers={**auth, "Idempotency-Key": key}).json()["id"]
            for key in sorted(sent)
        }
        changed = sum(made[k] != acked[k] for k in acked)
        total = client.get("/plans", params={"owner": "me", "limit": 1}, headers=auth).json()["total"]
        for pid in {*made.values(), warm_id}:
            client.delete(f"/plans/{pid}", headers=auth)  # the next round starts from none
    return len(acked), lost, len(sent), changed + total - len(set(made.values())) - 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", help="a PostgreSQL URL (its tables are dropped first); default: SQLite")
    parser.add_argument("--crashes", type=int, default=3, help="kill -9 rounds (default 3)")
    parser.add_argument("--seed", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.database or f"sqlite:///{tmp}/hostile.db"
        if args.database:
            from tests.api.conftest import _reset_postgres

            _reset_postgres(url)
        env = _env(url, TRAINPLAN_RATE_LIMIT_PER_MINUTE="0", TRAINPLAN_MAX_SEARCH_TIME_S="2")
        tokens = {}
        for name, role in (("admin", "admin"), ("user", "user"), ("other", "user"), ("reader", "read-only")):
            cli(env, "users", "add", name, "--role", role, "--password-stdin", stdin="a long enough password\n")
            tokens[name] = cli(env, "tokens", "create", name).stdout.strip()
        with serving(env) as (base, _proc):
            tried, failed, examples, unreadable = hostile(base, tokens)
        rng = random.Random(args.seed)
        cli(env, "users", "add", "crasher", "--role", "user", "--password-stdin", stdin="a long enough password\n")
        crasher = cli(env, "tokens", "create", "crasher").stdout.strip()
        rounds = [crash_round(env, crasher, r, rng) for r in range(args.crashes)]
    kind = "PostgreSQL" if args.database else "SQLite"
    print(f"| {kind}: cases | tried | failures (500 or no field) |\n|---|---|---|")
    for k in tried:
        print(f"| {k} | {tried[k]} | {failed[k]} |")
    print(f"| **all hostile requests** | **{sum(tried.values())}** | **{sum(failed.values())}** |")
    print(f"| stored plans read back | | {unreadable} unreadable |")
    acked, lost, retried, dups = (sum(r[i] for r in rounds) for i in range(4))
    print(
        f"| kill -9 under 8 writers x {args.crashes} | {acked} acknowledged, {retried} keys retried | "
        f"{lost} lost, {dups} made twice |"
    )
    for line in examples[:20]:
        print("  failure:", line)
    return 1 if sum(failed.values()) or unreadable or lost or dups else 0


if __name__ == "__main__":
    raise SystemExit(main())
