"""Shell words as data: literal strings (quoted when rendered) and references to shell variables.

Commands are lists of lines of words; `shell_word` is the only place a word becomes shell text, and the
templates call it through the `sh` filter, so every value that reaches a script is quoted.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PLAIN = re.compile(r"^[A-Za-z0-9_@%+=:,./-]*$")


@dataclass(frozen=True, slots=True)
class Var:
    """`"${NAME}suffix"` in a script: the value of a shell variable, with a plain literal suffix."""

    name: str
    suffix: str = ""

    def __post_init__(self) -> None:
        if not VAR_NAME.fullmatch(self.name) or not PLAIN.fullmatch(self.suffix):
            raise ValueError(f"not a shell variable reference: {self.name!r} + {self.suffix!r}")


Word = str | Var
Line = tuple[Word, ...]


def shell_word(word: Word) -> str:
    if isinstance(word, Var):
        return f'"${{{word.name}}}{word.suffix}"'
    if word.startswith("="):  # safe to shlex, but `X==a` reads as a typo to shellcheck and to people
        return f"'{word}'" if "'" not in word else shlex.quote(word)
    return shlex.quote(word)


def shell_line(line: Line) -> str:
    return " ".join(shell_word(w) for w in line)


def resolve(word: Word, values: dict[str, str]) -> str:
    """The word as the shell would see it, given the variables' values (for plan.json and tests)."""
    return values[word.name] + word.suffix if isinstance(word, Var) else word


def flat(lines: list[Line]) -> list[Word]:
    return [w for line in lines for w in line]


def comment(text: object) -> str:
    """Free text inside a one-line comment (shell, YAML) or a label: every character that is not printable
    becomes a space: newlines, but also U+2028, U+2029 and U+0085, which YAML reads as line breaks, and control or
    format characters. Model names are refused at validation already; this is the second line."""
    return "".join(c if c.isprintable() else " " for c in str(text))
