"""A corpus of malformed plan.json files: each must be refused with exit code 2 and a message naming the field,
never a traceback. Used by tests/launcher/test_malformed.py and benchmarks/fault_matrix.py.

Every case starts from a valid tiny plan and breaks one thing: the JSON itself, its encoding, the types, the
ranges, the nesting, the sizes, the names, and what is on disk where the plan points.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from make_plan import tiny_plan

VERBS = ("run", "dry-run", "show", "preflight")


@dataclass(frozen=True)
class Case:
    name: str
    path: Path
    expect: str  # a piece of the refusal, naming the field (or the file)
    verbs: tuple[str, ...] = VERBS


def valid() -> dict[str, Any]:
    return tiny_plan("malformed", steps=2).to_dict()


def changed(edit: Callable[[dict[str, Any]], object]) -> bytes:
    doc = copy.deepcopy(valid())
    edit(doc)
    return json.dumps(doc).encode()


def _keys(path: str) -> list[str]:
    """'job.name' -> ['job', 'name']; a file name keeps its dots ('files.notes.txt' -> ['files', 'notes.txt'])."""
    return path.split(".", 1) if path.startswith("files.") else path.split(".")


def _set(path: str, value: object) -> Callable[[dict[str, Any]], object]:
    def edit(doc: dict[str, Any]) -> None:
        *parents, last = _keys(path)
        node = doc
        for key in parents:
            node = node[key]
        node[last] = value

    return edit


def _del(path: str) -> Callable[[dict[str, Any]], object]:
    def edit(doc: dict[str, Any]) -> None:
        *parents, last = _keys(path)
        node = doc
        for key in parents:
            node = node[key]
        del node[last]

    return edit


def _raw(path: str, literal: str) -> bytes:
    """The valid plan with one value replaced by a JSON literal json.dumps cannot write (NaN, huge numbers)."""
    marker = "__TRAINPLAN_MARKER__"
    return changed(_set(path, marker)).replace(f'"{marker}"'.encode(), literal.encode())


DEEP = 100_000
TEXT_CASES: list[tuple[str, bytes, str]] = [
    ("empty file", b"", "not valid JSON"),
    ("only whitespace", b"  \n\t ", "not valid JSON"),
    ("truncated", json.dumps(valid()).encode()[:-7], "not valid JSON"),
    ("top-level array", b"[1, 2]", "expected a JSON object at the top"),
    (
        "a second job at the end",  # json.loads kept the later one, silently (QA L5)
        json.dumps(valid()).encode()[:-1] + b', "job": {"name": "other"}}',
        "the key 'job' appears twice in one object",
    ),
    ("top-level string", b'"plan"', "expected a JSON object at the top"),
    ("top-level null", b"null", "expected a JSON object at the top"),
    ("deeply nested array", b"[" * DEEP + b"]" * DEEP, "nested too deeply"),
    ("deeply nested env value", _raw("env.DS_ACCELERATOR", "[" * 500 + "]" * 500), "env.DS_ACCELERATOR: expected"),
    ("integer of 5000 digits", _raw("job.max_restarts", "9" * 5000), "not valid JSON"),
    ("NaN grace period", _raw("job.grace_period_s", "NaN"), "job.grace_period_s(nan) must be a finite number"),
    ("Infinity step time", _raw("prediction.step_s", "Infinity"), "prediction.step_s(inf) must be a finite number"),
    (
        "1e999 watchdog floor",
        changed(_set("watchdog", {})).replace(b'"watchdog": {}', b'"watchdog": {"floor_s": 1e999}'),
        "watchdog.floor_s(inf) must be a finite number",
    ),
    ("-Infinity tokens/s", _raw("prediction.tokens_per_s", "-Infinity"), "prediction.tokens_per_s(-inf)"),
    ("integer past float range", _raw("job.grace_period_s", "1" + "0" * 400), "job.grace_period_s"),
    ("grace period of a year", changed(_set("job.grace_period_s", 3.2e7)), "job.grace_period_s(32000000.0) must be <="),
    ("invalid UTF-8", json.dumps(valid()).encode().replace(b"malformed", b"malf\xffrmed"), "not UTF-8 text"),
    ("UTF-16 file", json.dumps(valid()).encode("utf-16"), "not UTF-8 text"),
    ("UTF-8 byte-order mark", b"\xef\xbb\xbf" + json.dumps(valid()).encode(), "not valid JSON"),
    ("lone surrogate in env", changed(_set("env.X", "\udc80")), "env.X"),
    ("lone surrogate in a file", changed(_set("files.notes.txt", "a\ud800b")), "files.notes.txt"),
    ("lone surrogate in args", changed(_set("entrypoint.args", ["--x", "\udfff"])), "entrypoint.args[1]"),
    ("NUL in an argument", changed(_set("entrypoint.args", ["a\x00b"])), "entrypoint.args[0]"),
    ("newline in env value", changed(_set("env.X", "a\nb")), "env.X"),
    ("kind missing", changed(_del("kind")), "kind: None is not 'trainplan.plan'"),
    ("kind is a list", changed(_set("kind", ["trainplan.plan"])), "kind:"),
    ("schema_version 1.0", changed(_set("schema_version", 1.0)), "schema_version: expected the integer 1"),
    ("schema_version true", changed(_set("schema_version", True)), "schema_version: expected the integer 1"),
    ("schema_version 99", changed(_set("schema_version", 99)), "schema_version 99 is not supported"),
    ("job missing", changed(_del("job")), "plan: missing required field(s) 'job'"),
    ("job null", changed(_set("job", None)), "job: expected a Job"),
    ("job is a list", changed(_set("job", [])), "job: expected an object"),
    ("job.name is a number", changed(_set("job.name", 7)), "job.name: expected a string"),
    ("job.name with a slash", changed(_set("job.name", "a/b")), "job.name: 'a/b' is not a plain name"),
    ("job.name of 300 characters", changed(_set("job.name", "n" * 300)), "job.name: 300 characters"),
    ("job.run_dir with NUL", changed(_set("job.run_dir", "r\x00")), "job.run_dir"),
    ("job.numa_binding a number", changed(_set("job.numa_binding", 5)), "job.numa_binding: expected a string"),
    ("max_restarts negative", changed(_set("job.max_restarts", -1)), "job.max_restarts(-1) must be >= 0"),
    ("num_nodes zero", changed(_set("world.num_nodes", 0)), "world.num_nodes(0) must be >= 1"),
    ("num_nodes a string", changed(_set("world.num_nodes", "1")), "world.num_nodes: expected an integer"),
    ("num_nodes 1.5", changed(_set("world.num_nodes", 1.5)), "world.num_nodes: expected an integer"),
    ("num_nodes true", changed(_set("world.num_nodes", True)), "world.num_nodes: expected an integer"),
    ("num_nodes 10**30", changed(_set("world.num_nodes", 10**30)), "world.num_nodes(1000000000000000000000000000000)"),
    ("hosts a string", changed(_set("world.hosts", "a,b")), "world.hosts: expected a list of strings"),
    ("hosts with a number", changed(_set("world.hosts", [1])), "world.hosts[0]: expected a string"),
    ("host that is an ssh option", changed(_set("world.hosts", ["-oProxyCommand=x"])), "world.hosts[0]"),
    ("master_port 70000", changed(_set("world.master_port", 70000)), "world.master_port(70000) must be <= 65535"),
    ("unknown world field", changed(_set("world.gpus", 8)), "world: unknown field(s) 'gpus'"),
    ("dp missing", changed(_del("parallel.dp")), "parallel: missing required field(s) 'dp'"),
    ("dp zero", changed(_set("parallel.dp", 0)), "parallel.dp(0) must be >= 1"),
    ("world size mismatch", changed(_set("parallel.tp", 2)), "!= parallel world size"),
    ("tp of 2**50", changed(_set("parallel.tp", 2**50)), "parallel.tp(1125899906842624) must be <="),
    ("env is a list", changed(_set("env", ["A=1"])), "env: expected an object of strings"),
    ("env name with a dash", changed(_set("env.A-B", "1")), "env: 'A-B' is not a valid name"),
    ("env value a number", changed(_set("env.X", 1)), "env.X: expected a string"),
    ("env sets RANK", changed(_set("env.RANK", "0")), "env.RANK is set by the launcher"),
    ("env sets the launch token", changed(_set("env.TRAINPLAN_LAUNCH_ID", "x")), "env.TRAINPLAN_LAUNCH_ID"),
    ("file name with ..", changed(_set("files", {"../x": "y"})), "files: '../x' is not a valid name"),
    ("file name of 300 characters", changed(_set("files", {"f" * 300: "y"})), "is not a valid name"),
    ("file content a number", changed(_set("files.x.txt", 3)), "files.x.txt: expected a string"),
    ("reserved file name", changed(_set("files.heartbeats", "")), "files.heartbeats: the launcher writes"),
    (
        "a node's workers file",  # written by every launcher, even without --node-rank (QA L5)
        changed(_set("files.workers.node0.json", "")),
        "files.workers.node0.json: the launcher writes",
    ),
    ("bench's metrics directory", changed(_set("files.metrics", "")), "files.metrics: the launcher writes"),
    ("entrypoint missing", changed(_del("entrypoint")), "plan: missing required field(s) 'entrypoint'"),
    ("script empty", changed(_set("entrypoint.script", "")), "entrypoint.script is empty"),
    ("args not a list", changed(_set("entrypoint.args", "--lr 1")), "entrypoint.args: expected a list"),
    ("args with null", changed(_set("entrypoint.args", [None])), "entrypoint.args[0]: expected a string"),
    ("unknown placeholder", changed(_set("entrypoint.args", ["{rundir}"])), "unknown placeholder {rundir}"),
    ("peak memory a string", changed(_set("prediction.peak_memory_bytes", "1")), "prediction.peak_memory_bytes"),
    ("peak memory negative", changed(_set("prediction.peak_memory_bytes", [-1])), "peak_memory_bytes[0](-1)"),
    (
        "step_s_high below step_s",
        changed(_set("prediction", {"step_s": 2.0, "step_s_high": 1.0})),
        "prediction.step_s_high(1.0) < prediction.step_s(2.0)",
    ),
    ("goodput above 1", changed(_set("prediction.goodput", 2.0)), "prediction.goodput(2.0) must be <= 1"),
    ("watchdog factor 0", changed(_set("watchdog", {"hang_factor": 0})), "watchdog.hang_factor(0) must be"),
    ("watchdog floor a string", changed(_set("watchdog", {"floor_s": "3"})), "watchdog.floor_s: expected a number"),
    ("watchdog unknown field", changed(_set("watchdog", {"timeout": 3})), "watchdog: unknown field(s) 'timeout'"),
    ("straggler steps 1", changed(_set("watchdog", {"straggler_steps": 1})), "watchdog.straggler_steps(1) must be"),
    ("model layers below pp", changed(_set("model.num_layers", 0)), "model.num_layers(0) must be >= 1"),
    ("unknown top-level field", changed(_set("extra", 1)), "plan: unknown field(s) 'extra'"),
    ("600 unknown fields", changed(lambda d: d.update({f"k{i}": i for i in range(600)})), "and 595 more"),
]


def write_corpus(directory: Path) -> list[Case]:
    """Write every case under `directory` (also the ones that are not JSON text: a directory, a FIFO, a huge
    sparse file, a run_dir that is a file, a missing path); return them."""
    directory.mkdir(parents=True, exist_ok=True)
    cases = []
    for i, (name, data, expect) in enumerate(TEXT_CASES):
        path = directory / f"{i:03d}.json"
        path.write_bytes(data)
        cases.append(Case(name, path, expect))
    (directory / "a-directory.json").mkdir(exist_ok=True)
    cases.append(Case("a directory", directory / "a-directory.json", "not a regular file"))
    fifo = directory / "a-fifo.json"
    if not fifo.exists():
        os.mkfifo(fifo)
    cases.append(Case("a FIFO (would block a reader)", fifo, "not a regular file"))
    cases.append(Case("no such file", directory / "missing.json", "no such file"))
    huge = directory / "huge.json"
    with open(huge, "wb") as f:
        f.truncate(65 << 20)
    cases.append(Case("65 MiB file", huge, "more than the"))
    blocker = directory / "run-dir-is-a-file"
    blocker.write_text("in the way\n")
    in_the_way = directory / "run-dir-in-the-way.json"
    in_the_way.write_bytes(changed(_set("job.run_dir", str(blocker / "sub"))))
    cases.append(Case("run_dir under a file", in_the_way, "run-dir-is-a-file", ("run",)))
    return cases
