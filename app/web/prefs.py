"""Display preferences without scripts: memory units (GiB or GB) and the colour theme, kept in one cookie that
GET /prefs sets (a plain link), read on every page. Numbers stay bytes inside; they are converted here, at the edge."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlencode

COOKIE = "tp_prefs"
Units = Literal["GiB", "GB"]
Theme = Literal["system", "light", "dark"]
UNITS: tuple[Units, ...] = ("GiB", "GB")
THEMES: tuple[Theme, ...] = ("system", "light", "dark")
UNIT_BYTES = {"GiB": 2**30, "GB": 10**9}


@dataclass(frozen=True)
class Prefs:
    units: Units = "GiB"
    theme: Theme = "system"

    @property
    def unit_bytes(self) -> int:
        return UNIT_BYTES[self.units]

    def mem(self, value: float, digits: int = 1) -> str:
        """Bytes in the chosen unit, without the unit."""
        return f"{value / self.unit_bytes:,.{digits}f}"

    @property
    def cookie(self) -> str:
        return f"{self.units}.{self.theme}"

    def link(self, back: str, **change: str) -> str:
        """The /prefs link that changes one preference and comes back to `back`."""
        return "/prefs?" + urlencode({**change, "back": back})

    @property
    def other_units(self) -> Units:
        return "GB" if self.units == "GiB" else "GiB"

    @property
    def next_theme(self) -> Theme:
        return THEMES[(THEMES.index(self.theme) + 1) % len(THEMES)]


def parse(cookie: str | None) -> Prefs:
    """The preferences a cookie holds; anything unknown is the default."""
    units, _, theme = (cookie or "").partition(".")
    return Prefs(
        units if units in UNITS else "GiB",  # type: ignore[arg-type]
        theme if theme in THEMES else "system",  # type: ignore[arg-type]
    )


def changed(prefs: Prefs, units: str | None, theme: str | None) -> Prefs:
    return Prefs(
        units if units in UNITS else prefs.units,  # type: ignore[arg-type]
        theme if theme in THEMES else prefs.theme,  # type: ignore[arg-type]
    )


def safe_back(back: str | None) -> str:
    """Only a path on this site: no scheme, no host, no protocol-relative '//'."""
    if not back or not back.startswith("/") or back.startswith("//") or "\\" in back:
        return "/"
    return back
