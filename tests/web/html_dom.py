"""Just enough HTML reading for the page tests: an element's text and attributes by id, links, inline SVGs."""

from __future__ import annotations

import re
from html.parser import HTMLParser

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class _Find(HTMLParser):
    def __init__(self, element_id: str) -> None:
        super().__init__()
        self.id, self.depth, self.text, self.inputs = element_id, 0, [], []
        self.found = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if self.depth == 0 and a.get("id") == self.id:
            self.found, self.depth = True, 1
        elif self.depth and tag not in VOID:
            self.depth += 1
        if self.depth and tag in ("input", "select", "textarea", "option"):
            self.inputs.append((tag, a))

    def handle_endtag(self, tag: str) -> None:
        if self.depth and tag not in VOID:
            self.depth -= 1

    def handle_data(self, data: str) -> None:
        if self.depth:
            self.text.append(data)


def element(html: str, element_id: str) -> tuple[str, list[tuple[str, dict[str, str | None]]]]:
    """(text, [(tag, attrs) of its inputs and options]) of the element with this id."""
    finder = _Find(element_id)
    finder.feed(html)
    assert finder.found, f"no element with id {element_id!r}"
    return " ".join(" ".join(finder.text).split()), finder.inputs


def hrefs(html: str) -> list[str]:
    return re.findall(r'href="([^"]+)"', html)


def svgs(html: str) -> list[str]:
    return re.findall(r"<svg xmlns=.*?</svg>", html, flags=re.S)
