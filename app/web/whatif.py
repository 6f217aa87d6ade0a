"""What-if without retyping: a stored plan's request as form values, with a few of them changed, planned again.

The quick controls on a result page and every "would fit" suggestion post the changed fields to POST /whatif; the
rest of the request is the stored one, through the same form round trip as "Edit and re-plan" (forms.from_request),
so nothing else changes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from app.planner.results import PlanResult
from app.planner.specs import PlanRequest
from app.planner.suggest import NVME_EXAMPLE
from app.service.requests import SavedSpec, hosts_for_nodes, hosts_kept
from app.store import PlanRecord
from app.web import forms
from app.web.fields import FormField
from app.web.pages import SECTIONS

SEQ = "whatif.seq_length"  # the model's sequence length, whichever way the model was given
CLEAR_PINS = "whatif.clear_pins"
NODES_PIN = "training.pinned.num_nodes"
CONTROL_NAMES = (
    "cluster.num_nodes",
    "cluster.gpu",
    "training.global_batch_size",
    SEQ,
    "training.precision",
    "training.framework",
    "training.objective",
    "training.pinned.tp",
    "training.pinned.pp",
    "training.pinned.vpp",
    "training.pinned.cp",
    "training.pinned.ep",
    "training.pinned.zero_stage",
    "training.pinned.micro_batch_size",
    "training.pinned.recompute",
)
_FIELDS = {f.name: f for f in forms.all_fields(SECTIONS)}


@dataclass(frozen=True)
class Action:
    """A one-click re-plan: a label and the form fields it changes."""

    label: str
    fields: tuple[tuple[str, str], ...]


def resolved(result: PlanResult) -> PlanRequest:
    """The request a stored result was planned for, from its parts as they were validated then: a check added
    since (train_tokens against a step's tokens) must not make an older plan's page a 500."""
    return PlanRequest.model_construct(model=result.model, cluster=result.cluster, training=result.training)


def stored_values(record: PlanRecord) -> dict[str, str]:
    """The form values of a stored plan's request (what "Edit and re-plan" shows)."""
    return forms.from_request(SECTIONS, record.request, resolved(record.result))


def _seq_field(values: Mapping[str, str]) -> str:
    return "preset.seq_length" if values.get("model_mode") == "preset" else "model.seq_length"


def controls(record: PlanRecord, units: str = "GiB") -> list[tuple[FormField, str]]:
    """The quick controls, each with the stored request's value (the GPUs' memory in `units`)."""
    values = stored_values(record)
    out = []
    for name in CONTROL_NAMES:
        if name == SEQ:
            f = _FIELDS["model.seq_length"]
            out.append(
                (FormField(SEQ, "Sequence length", f.help, "int", attrs=f.attrs), str(record.result.model.seq_length))
            )
        elif name == "cluster.gpu":
            out.append((_gpu_control(values, units), values.get(name, "")))
        else:
            out.append((_FIELDS[name], values.get(name, "")))
    return out


def _gpu_control(values: Mapping[str, str], units: str) -> FormField:
    """The GPU select; where the plan's GPU has custom numbers, its option says so (it read as the catalogue GPU,
    QA 2026-12-06): keeping it keeps them, another GPU takes that GPU's catalogue numbers (`apply`)."""
    # the form's help says "change its numbers below"; here they are not below (QA 2026-12-07)
    f = replace(
        _FIELDS["cluster.gpu"],
        options=forms.gpu_options(units),
        help="A catalogue GPU with its catalogue numbers; the full form changes them.",
    )
    custom = [o.name.removeprefix("cluster.gpu.") for o in SECTIONS["gpu_overrides"] if values.get(o.name, "").strip()]
    if not custom:
        return f
    chosen = values.get("cluster.gpu", "")
    name = values.get("cluster.gpu.name", "").strip() or chosen
    numbers = [c for c in custom if c != "name"]
    shown = f"{name} ({chosen} with custom {', '.join(numbers)})" if numbers else f"{name} ({chosen})"
    options = tuple((v, shown if v == chosen else label) for v, label in f.options)
    help = "This plan's GPU has custom numbers; another GPU is planned with its catalogue numbers."
    return replace(f, options=options, help=help)


@dataclass(frozen=True)
class Replan:
    """A what-if: the form values to plan, what the service says it changed besides, the saved cluster it is on."""

    values: dict[str, str]
    notices: list[str]
    cluster_name: str | None


def replan(record: PlanRecord, changes: Mapping[str, str], saved: SavedSpec | None = None) -> Replan:
    """`apply` of `changes` to the stored plan, with its notices and saved cluster (the stored request read into form
    values once: it is a full request round trip). `saved`: the saved cluster the plan was made on, as it is now
    (None: none, or deleted). A what-if stays on the description the plan was made with; a saved cluster changed or
    deleted since then no longer names it, nor lends it its hosts (it filed the re-plan under the changed cluster's
    name, and a typo's form re-planned on the changed cluster's GPU, QA 2026-12-07)."""
    before = stored_values(record)
    still = saved if record.cluster_name and _still_describes(record, saved) else None
    saved_hosts = list(still.spec.get("hosts") or []) if still else None
    values = apply(record, before, changes, saved_hosts)
    notices = _host_notices(before, values, _host_source(before, changes, saved_hosts))
    if record.cluster_name and still is None:
        notices.append(_left_saved_cluster(record.cluster_name, saved))
    return Replan(values, notices, _same_saved_cluster(record, before, values, still))


def _still_describes(record: PlanRecord, saved: SavedSpec | None) -> bool:
    """Whether `saved` is still the description the plan was made with, apart from the node count (the rule "Edit
    and re-plan" follows: forms.saved_mode)."""
    return saved is not None and bool(forms.saved_mode(record.request, saved.spec, saved.name))


def _left_saved_cluster(name: str, saved: SavedSpec | None) -> str:
    """The notice of a what-if whose saved cluster was changed or deleted since the plan was made."""
    what = "no longer exists" if saved is None else f"was changed (now version {saved.version})"
    return (
        f"cluster: the saved cluster {name!r} this plan was made on {what}: planned on the cluster as this plan "
        "describes it, not filed under that name"
    )


def _host_source(
    values: Mapping[str, str], changes: Mapping[str, str], saved_hosts: list[str] | None
) -> tuple[str, list[str]]:
    """Whose host list a new node count takes its hosts from, and that list: the saved cluster's where the plan's
    hosts are its first ones (they were cut from it), else the plan's own."""
    hosts = values.get("cluster.hosts", "").split()
    if saved_hosts and "cluster.hosts" not in changes and hosts == saved_hosts[: len(hosts)]:
        return "the saved cluster", list(saved_hosts)
    return "the plan", hosts


def _host_notices(before: Mapping[str, str], values: Mapping[str, str], source: tuple[str, list[str]]) -> list[str]:
    """What became of the stored host list when `apply` changed the node count (it was silent, QA 2026-12-07), said
    of the list the hosts came from: "the plan named 2 hosts for 3 nodes: none kept" was said of a re-plan that
    took 3 of a saved cluster's 4 (QA 2026-12-07)."""
    hosts = before.get("cluster.hosts", "").split()
    nodes = values.get("cluster.num_nodes", "")
    if not hosts or values.get("cluster.hosts", "").split() == hosts or not nodes.isdigit():
        return []
    whose, named = source
    return [f"cluster.hosts: {whose} named {hosts_kept(named, int(nodes))}"]


def apply(
    record: PlanRecord, before: Mapping[str, str], changes: Mapping[str, str], saved_hosts: list[str] | None = None
) -> dict[str, str]:
    """The stored request's form values (`before`, `stored_values`) with `changes` (quick controls, a suggestion's
    fields) applied. On a saved cluster (`saved_hosts`, its host list) a new node count takes its hosts from the
    saved list, which may name more than the plan kept (4 nodes of a 4-host cluster planned on 2 had none)."""
    values = dict(before)
    if changes.get(CLEAR_PINS):
        values.update({f.name: "" for f in SECTIONS["pins"] + SECTIONS["pins_more"]})
    for name, value in changes.items():
        if name == SEQ:
            # the quick control always posts the sequence length: only a changed one is an override (it turned a
            # bare preset into {"preset": ..., "seq_length": <the same>}, QA 2026-12-06)
            if value.strip() and value.strip() != str(record.result.model.seq_length):
                values[_seq_field(values)] = value
        elif name in _FIELDS:
            values[name] = value
    if values.get("cluster.gpu") != before.get("cluster.gpu"):
        # another GPU: its own catalogue numbers; a node the request left to its GPU is blank in `before`
        # (forms.from_request), so it becomes the new GPU's (H100 -> GB200 is a 4-GPU tray, not 8 GPUs a node)
        values.update({f.name: "" for f in SECTIONS["gpu_overrides"]})
    _, hosts = _host_source(values, changes, saved_hosts)  # the saved cluster's, whose first ones the plan kept
    nodes = values.get("cluster.num_nodes", "")
    pin, old_nodes = values.get(NODES_PIN, "").strip(), before.get("cluster.num_nodes", "")
    if NODES_PIN not in changes and pin.isdigit() and nodes.isdigit() and nodes != old_nodes:
        # a pin on every node of the cluster (as "Plan this" of a deadline option makes) follows the node count; one
        # the new count cannot hold is dropped (the Nodes control did nothing, or was refused: "8 > num_nodes(4)")
        if pin == old_nodes:
            values[NODES_PIN] = nodes
        elif int(pin) > int(nodes):
            values[NODES_PIN] = ""
    if hosts and nodes.isdigit():
        # a host list names one host per node: on fewer nodes the first of them (the head node first); on more,
        # the added nodes have no names, so none are given (it was refused: "lists 1 hosts but num_nodes is 2")
        values["cluster.hosts"] = " ".join(hosts_for_nodes(hosts, int(nodes)))
    if values.get("training.framework") != before.get("training.framework") and "training.stack" not in changes:
        values["training.stack"] = ""  # another framework: its usual stack (a named one runs the old framework)
    return values


def _same_saved_cluster(
    record: PlanRecord, before: Mapping[str, str], values: Mapping[str, str], saved: SavedSpec | None
) -> str | None:
    """The saved cluster a what-if is still made on: the stored plan's while it exists and still describes what the
    plan used (`saved`, else None), unless the GPU changed (node counts and host lists are a saved cluster's usual
    overrides, as POST /plans takes them with `saved`). The stored request holds the description as it was, not the
    name, so re-plans fell out of the list's cluster filter."""
    if record.cluster_name is None or saved is None:
        return None
    gpu_fields = ("cluster.gpu", *(f.name for f in SECTIONS["gpu_overrides"]))
    return record.cluster_name if all(values.get(n, "") == before.get(n, "") for n in gpu_fields) else None


# The planner's suggestions are sentences (app/planner/suggest.py); the changes they name are read back here. The
# planner returning them as data (field -> value) would make this table unnecessary.
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^(\d+) nodes \(.*\) would fit.*\(with ZeRO offload\)$"), "offload_nodes"),
    (re.compile(r"^(\d+) nodes \(.*\) would fit"), "nodes"),
    (re.compile(r"^framework ([a-z-]+) with ZeRO offload would fit"), "framework_offload"),
    (re.compile(r"^with cluster\.nvme_path set to .*, framework ([a-z-]+) with ZeRO-Infinity would fit"), "nvme"),
    (re.compile(r"^framework ([a-z-]+) would fit"), "framework"),
    (re.compile(r"^seq_length (\d+) \(instead of \d+\) would fit"), "seq"),
    (re.compile(r"^optimizer_states (bf16) \(.*\) would fit"), "states"),
    (re.compile(r"^without your pinned .*fits"), "unpin"),
)


def _action(text: str, kind: str, value: str) -> Action:
    changes: dict[str, tuple[tuple[str, str], ...]] = {
        "nodes": (("cluster.num_nodes", value), (CLEAR_PINS, "1")),
        "offload_nodes": (
            ("cluster.num_nodes", value),
            ("training.pinned.offload_optimizer", "cpu"),
            (CLEAR_PINS, "1"),
        ),
        "framework_offload": (
            ("training.framework", value),
            (CLEAR_PINS, "1"),
            ("training.pinned.offload_optimizer", "cpu"),
        ),
        "framework": (("training.framework", value), (CLEAR_PINS, "1")),
        # the planner's trial mount point: the form shows it, for the user to put the nodes' own before planning on
        "nvme": (("training.framework", value), ("cluster.nvme_path", NVME_EXAMPLE), (CLEAR_PINS, "1")),
        "seq": ((SEQ, value), (CLEAR_PINS, "1")),
        "unpin": ((CLEAR_PINS, "1"),),
        "states": (("training.optimizer_states", value), (CLEAR_PINS, "1")),
    }
    labels = {
        "nodes": f"Plan on {value} nodes",
        "offload_nodes": f"Plan on {value} nodes with CPU offload",
        "framework_offload": f"Plan with {value} and CPU offload",
        "framework": f"Plan with {value}",
        "nvme": f"Plan with {value} and NVMe offload at {NVME_EXAMPLE}",
        "seq": f"Plan at {value} tokens",
        "unpin": "Plan without the pins",
        "states": f"Plan with {value} optimizer states",
    }
    return Action(labels[kind], changes[kind])


def suggestion_actions(result: PlanResult) -> list[tuple[str, Action | None]]:
    """Each suggestion with the re-plan it proposes (None when it proposes none)."""
    out: list[tuple[str, Action | None]] = []
    for text in result.suggestions:
        for part in text.split("; "):
            for pattern, kind in _PATTERNS:
                match = pattern.match(part)
                if match:
                    out.append((part, _action(part, kind, match.group(1) if match.groups() else "")))
                    break
            else:
                if not part.startswith("no plan fits"):
                    out.append((part, None))
    return out
