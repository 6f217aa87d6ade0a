"""The report of benchmarks/gpu_validation.py: errors, the four targets, and the table (plain text and markdown).

Pure functions over result records (one dict per configuration, the lines of results.jsonl), so that they are
tested with synthetic results. Errors are (measured - predicted) / predicted, in percent, as `launcher bench`.
"""

from __future__ import annotations

from typing import Any

from launcher.table import error_pct, gib, table

Record = dict[str, Any]
TARGETS = {"memory_pct": 10.0, "tokens_pct": 15.0, "chosen_ratio": 0.97}


def pct(predicted_value: float | None, measured_value: float | None) -> float | None:
    if not predicted_value or measured_value is None:
        return None
    return 100.0 * (measured_value - predicted_value) / predicted_value


def within(records: list[Record], pred: str, meas: str, limit: float) -> Record:
    rows = [(r["label"], pct(r[pred], r[meas])) for r in records]
    errors = [(label, e) for label, e in rows if e is not None]
    if not errors:
        return {"pass": None, "n": 0, "within": 0, "worst": None, "worst_pct": None}
    worst = max(errors, key=lambda le: abs(le[1]))
    ok = sum(abs(e) <= limit for _, e in errors)
    return {"pass": ok == len(errors), "n": len(errors), "within": ok, "worst": worst[0], "worst_pct": worst[1]}


def chosen_vs_best(records: list[Record], chosen: str | None, model: str) -> Record:
    ran = [r for r in records if r["model"] == model and r["status"] == "ok"]
    if not ran or chosen is None:
        return {"pass": None if not ran else False, "chosen": chosen, "best": None, "ratio": None, "fastest": None}
    best = max(ran, key=lambda r: r["measured_tokens_per_s"])
    mine = next((r for r in ran if r["label"] == chosen), None)
    if mine is None:
        return {
            "pass": False,
            "chosen": chosen,
            "best": best["label"],
            "ratio": None,
            "fastest": False,
            "detail": "the planner's choice has no measurement",
        }
    ratio = mine["measured_tokens_per_s"] / best["measured_tokens_per_s"]
    return {
        "pass": ratio >= TARGETS["chosen_ratio"],
        "chosen": chosen,
        "best": best["label"],
        "ratio": ratio,
        "fastest": mine is best,
    }


def summarise(records: list[Record], chosen: str | None, grid_model: str) -> Record:
    ok = [r for r in records if r["status"] == "ok"]
    on_gpu = [r for r in ok if r.get("memory_kind") == "cuda_max_memory_allocated"]
    oom_fits = [r["label"] for r in records if r.get("predicted_fits") and r["status"] == "oom"]
    return {
        "memory": within(on_gpu, "predicted_allocated_bytes", "measured_allocated_bytes", TARGETS["memory_pct"]),
        "memory_reserved": within(
            [r for r in on_gpu if r["measured_reserved_bytes"] is not None],
            "predicted_reserved_bytes",
            "measured_reserved_bytes",
            TARGETS["memory_pct"],
        ),
        "tokens_per_s": within(ok, "predicted_tokens_per_s", "measured_tokens_per_s", TARGETS["tokens_pct"]),
        "chosen": chosen_vs_best(records, chosen, grid_model),
        "no_fit_oom": {
            "pass": not oom_fits,
            "violations": oom_fits,
            "predicted_no_fit": [r["label"] for r in records if r.get("predicted_fits") is False],
        },
        "statuses": {s: sum(r["status"] == s for r in records) for s in sorted({r["status"] for r in records})},
    }


def verdict(value: bool | None) -> str:
    return {True: "PASS", False: "FAIL", None: "n/a"}[value]


def summary_lines(s: Record) -> list[str]:
    def share(t: Record, what: str, limit: float) -> str:
        if not t["n"]:
            return f"{what} within {limit:g} %: n/a (no comparable measurement)"
        return (
            f"{what} within {limit:g} %: {verdict(t['pass'])} {t['within']}/{t['n']} "
            f"(worst {t['worst_pct']:+.1f} %: {t['worst']})"
        )

    c, f = s["chosen"], s["no_fit_oom"]
    if c["ratio"] is not None:
        chosen = (
            f"planner's choice {c['chosen']}: {c['ratio']:.3f} of the fastest measured ({c['best']}); "
            f"fastest: {'yes' if c['fastest'] else 'no'}: {verdict(c['pass'])} (target >= "
            f"{TARGETS['chosen_ratio']})"
        )
    else:
        chosen = f"planner's choice {c['chosen']}: {verdict(c['pass'])} ({c.get('detail', 'nothing measured')})"
    oom = (
        f"no plan predicted to fit ran out of memory: {verdict(f['pass'])}"
        + (f" (violations: {', '.join(f['violations'])})" if f["violations"] else "")
        + (f"; predicted not to fit: {', '.join(f['predicted_no_fit'])}" if f["predicted_no_fit"] else "")
    )
    return [
        share(s["memory"], "peak memory (allocated)", TARGETS["memory_pct"]),
        share(s["memory_reserved"], "peak memory (reserved, for information)", TARGETS["memory_pct"]),
        share(s["tokens_per_s"], "tokens/s", TARGETS["tokens_pct"]),
        chosen,
        oom,
        "runs: " + ", ".join(f"{n} {k}" for k, n in s["statuses"].items()),
    ]


COLUMNS = (
    "config",
    "fits",
    "status",
    "alloc pred",
    "alloc meas",
    "err",
    "resv pred",
    "resv meas",
    "err",
    "tok/s pred",
    "tok/s meas",
    "err",
)


def size(value: float | None) -> str:
    if value is None:
        return "-"
    return gib(value) if value >= 2**30 else f"{value / 2**20:.1f} MiB"


def count(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def row(r: Record) -> tuple[str, ...]:
    g = r.get
    fits = "-" if g("predicted_fits") is None else ("yes" if g("predicted_fits") else "no")
    alloc_err = error_pct(g("predicted_allocated_bytes"), g("measured_allocated_bytes"))
    measured_alloc = size(g("measured_allocated_bytes"))
    if g("memory_kind") not in (None, "cuda_max_memory_allocated"):  # CPU: max RSS, not an allocator figure
        alloc_err, measured_alloc = "n/c", f"{measured_alloc} RSS"
    return (
        r["label"] + (" *" if r["role"] == "planner" else ""),
        fits,
        r["status"],
        size(g("predicted_allocated_bytes")),
        measured_alloc,
        alloc_err,
        size(g("predicted_reserved_bytes")),
        size(g("measured_reserved_bytes")),
        error_pct(g("predicted_reserved_bytes"), g("measured_reserved_bytes")),
        count(g("predicted_tokens_per_s")),
        count(g("measured_tokens_per_s")),
        error_pct(g("predicted_tokens_per_s"), g("measured_tokens_per_s")),
    )


def rows(records: list[Record]) -> list[tuple[str, ...]]:
    return [row(r) for r in records]


def markdown(headers: tuple[str, ...], body: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in body])


def report(records: list[Record], summary: Record, header: list[str]) -> tuple[str, str]:
    """(plain text, markdown) of the header, the table and the summary lines."""
    lines = summary_lines(summary)
    text = "\n".join([*header, "", table(COLUMNS, rows(records)), "", *lines])
    md = "\n".join(
        [*(f"- {h}" for h in header), "", markdown(COLUMNS, rows(records)), "", *(f"- {ln}" for ln in lines)]
    )
    return text, md
