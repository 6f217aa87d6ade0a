"""Plain-text tables for the CLI (the only place units are converted for people)."""

from __future__ import annotations

from collections.abc import Sequence

SEPARATOR_MAX = 100  # a column as wide as a long command line got a rule of 1,500 dashes


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * min(w, SEPARATOR_MAX) for w in widths))
    return "\n".join(lines)


def si(value: float | None, unit: str = "", digits: int = 3) -> str:
    """1234567 -> '1.23 M' (for tables)."""
    if value is None:
        return "-"
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.{digits}g} {prefix}{unit}".rstrip()
    return f"{value:.{digits}g} {unit}".rstrip()


def gib(value: float | None) -> str:
    return "-" if value is None else f"{value / 2**30:.2f} GiB"


def error_pct(predicted: float | None, measured: float | None) -> str:
    if not predicted or measured is None:
        return "-"
    return f"{100.0 * (measured - predicted) / predicted:+.1f} %"
