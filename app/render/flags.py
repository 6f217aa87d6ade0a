"""Command-line flags as data: a name and its value words, grouped in titled sections."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Flag:
    name: str
    values: tuple[str, ...] = ()

    @property
    def words(self) -> tuple[str, ...]:
        return (self.name, *self.values)

    @property
    def line(self) -> str:
        return " ".join(self.words)


@dataclass(frozen=True, slots=True)
class Section:
    title: str
    flags: tuple[Flag, ...]


def num(value: object) -> str:
    """Numbers as argparse reads them back exactly (repr keeps every digit of a float)."""
    return repr(value) if isinstance(value, float) else str(value)


def flag(name: str, *values: object) -> Flag:
    return Flag(name, tuple(num(v) for v in values))


def flag_name(word: str) -> str:
    """The flag a word sets: `--lr` for both `--lr` and `--lr=0.1` (so a repeat is caught either way)."""
    return word.split("=", 1)[0] if word.startswith("--") else word


def group_words(words: tuple[str, ...]) -> list[Flag]:
    """Free command-line words as flags: each `--name` with the words that follow it."""
    out: list[Flag] = []
    for word in words:
        if word.startswith("--") or not out:
            out.append(Flag(word))
        else:
            out[-1] = Flag(out[-1].name, (*out[-1].values, word))
    return out


def argv(sections: list[Section]) -> list[str]:
    return [word for sec in sections for fl in sec.flags for word in fl.words]
