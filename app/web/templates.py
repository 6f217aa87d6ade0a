"""The web form's Jinja environment: autoescape on, StrictUndefined, filters that convert units at the edge."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup, escape

from app.web.prefs import Prefs

GiB = 2**30


def gib(value: float, digits: int = 1) -> str:
    return f"{value / GiB:,.{digits}f}"


def pct(value: float, digits: int = 1) -> str:
    return f"{100 * value:.{digits}f}%"


def num(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


# (below this many seconds, seconds per unit, unit, decimals)
SECOND_UNITS = ((1.0, 0.001, "ms", 1), (120.0, 1.0, "s", 2), (7200.0, 60.0, "min", 1), (172800.0, 3600.0, "h", 1))


def seconds(value: float, like: float | None = None) -> str:
    """Seconds for people: ms below a second, days above two days. `like` picks the unit instead of `value`: an
    interval's ends are written in the unit of the estimate they bound (a 117.17 s step's interval read
    "109.27 s–2.1 min", QA 2026-12-07)."""
    pick = value if like is None else like
    for below, size, unit, decimals in SECOND_UNITS:
        if pick < below:
            return f"{value / size:.{decimals}f} {unit}"
    return f"{value / 86400:.1f} days"


def days(value: float) -> str:
    """Days for people: hours below two days, minutes below an hour, seconds below a minute."""
    if value >= 2:
        return f"{value:,.1f} days"
    hours = 24 * value
    if hours >= 1:
        return f"{hours:,.1f} h"
    return f"{60 * hours:.1f} min" if hours * 60 >= 1 else f"{3600 * hours:.1f} s"


NUMBER = r"\d[\d,]*(?:\.\d+)?"
# "N GiB", and "A of B GiB", "A / B GiB", "A–B GiB" (both numbers are in the unit)
GIB_IN_TEXT = re.compile(rf"(?:({NUMBER})( of | / |–| to ))?({NUMBER}) GiB\b")


def in_units(text: str, prefs: Prefs, exact: Iterable[float] = ()) -> str:
    """The planner's sentences give memory in GiB, rounded; with GB chosen, each "N GiB" in them reads as GB, so one
    page never shows the same peak in both units. Each is converted from the byte count in `exact` (the numbers the
    sentence was written from) that reads as N GiB: the rounded text put 82.8 GB in the Why line beside the KPI's
    82.7 (QA 2026-12-07). A number with none there is converted as written."""
    if prefs.units == "GiB":
        return text
    known = tuple(exact)

    def gb(number: str) -> str:
        written = number.replace(",", "")
        # as many decimals as the GiB had (a near miss is written with more so that its sides read apart)
        decimals = max(1, len(written.partition(".")[2]))
        return f"{exact_bytes(written, known) / 1e9:,.{decimals}f}"

    def convert(m: re.Match[str]) -> str:
        first = f"{gb(m.group(1))}{m.group(2)}" if m.group(1) else ""
        return f"{first}{gb(m.group(3))} GB"

    return GIB_IN_TEXT.sub(convert, text)


def exact_bytes(written: str, known: tuple[float, ...]) -> float:
    """The bytes that a number of GiB written with its decimals was rounded from: the one of `known` that rounds to
    it, else the number itself. Where two of them round to it but read differently in GB (a peak of 79.55 and a
    usable 79.65 GiB both written "79.6"), which one the sentence meant is not known: the number as written (it gave
    both the peak's 85.4 GB, and the usable 85.5 GB read 85.4, review 2026-12-07)."""
    decimals = len(written.partition(".")[2])
    matches = {f"{b / 1e9:,.1f}": b for b in known if f"{b / GiB:.{decimals}f}" == written}
    return next(iter(matches.values())) if len(matches) == 1 else float(written) * GiB


def breakable(value: object) -> Markup:
    """Escaped text that may also wrap after "(", "_", "/" and "=" (<wbr>), besides its spaces and hyphens: a long
    layout word wraps in a narrow column; a number, which has none of them, never does."""
    return Markup(re.sub(r"([(_/=])", r"\1<wbr>", str(escape(value))))


def _figure(value: float, decimals: int) -> str:
    """Whole from 100, `decimals` from 1, three significant digits below (a short run's 0.0046 is not "0.00")."""
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:,.{decimals}f}" if value >= 1 or value == 0 else f"{value:.3g}"


def money(value: float) -> str:
    """Cents below 100."""
    return _figure(value, 2)


def amount(value: float) -> str:
    """A count such as GPU-hours: one decimal below 100."""
    return _figure(value, 1)


def coord(value: float) -> str:
    """An SVG coordinate: one decimal is plenty, and keeps the output stable."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def params(value: float) -> str:
    return f"{value / 1e9:.2f}B" if value >= 1e9 else f"{value / 1e6:.1f}M"


def token_count(value: float) -> str:
    """A number of tokens for people: 2T, 300B, 1.5M (three significant figures at most)."""
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if value >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.0f}"


class WebTemplates:
    def __init__(self, templates_dir: Path) -> None:
        web = Path(templates_dir) / "web"
        if not (web / "base.html").is_file():
            raise ValueError(f"TRAINPLAN_TEMPLATES_DIR: {templates_dir} has no web/base.html")
        self.dir = web
        self.env = Environment(
            loader=FileSystemLoader(str(web)),
            autoescape=True,
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            auto_reload=False,
        )
        self.env.filters.update(
            gib=gib,
            pct=pct,
            num=num,
            seconds=seconds,
            params=params,
            tokens=token_count,
            n=coord,
            days=days,
            money=money,
            amount=amount,
            breakable=breakable,
            in_units=in_units,
        )
        self.env.globals["default_prefs"] = Prefs()

    def render(self, name: str, **context: Any) -> str:
        return self.env.get_template(name).render(**context)

    def static(self, name: str) -> str:
        return (self.dir / "static" / name).read_text(encoding="utf-8")
