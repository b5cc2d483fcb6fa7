"""Where each character of a rewritten text came from.

Text reaches an engine rewritten several times (markup rendered, a lexicon applied,
numbers and abbreviations read out), and word timing must name the words the client
wrote. An ``Origins`` says, for every character of a rewritten text, which span of the
text before it was read for it; composing them leads from what was spoken back to
what was written.

Rewrites rtts controls (markup, the lexicon) record their origins as they go; the
normalizers are compared with their input afterwards (``aligned``), so they stay plain
string functions and their output is exactly what it was: what they keep is matched
character for character, and what they replaced maps, as a block, to what it replaced.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Origins", "aligned", "identity"]


@dataclass(frozen=True)
class Origins:
    """Per character of a text: the span ``[start, end)`` of its source it came from
    (``start == end`` for a character inserted at that position)."""

    starts: tuple[int, ...]
    ends: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.starts)

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The source span that characters ``[start, end)`` came from (a position for none)."""
        start, end = max(0, start), min(len(self), end)
        if start >= end:
            return (self.at(start),) * 2
        inner = [(s, e) for s, e in zip(self.starts[start:end], self.ends[start:end], strict=True) if s < e]
        if not inner:
            return self.starts[start], self.ends[end - 1]
        return min(s for s, _ in inner), max(e for _, e in inner)

    def at(self, position: int) -> int:
        """The source position of a position between characters."""
        if position < len(self):
            return self.starts[max(0, position)]
        return self.ends[-1] if self.ends else 0

    def then(self, outer: Origins) -> Origins:
        """These origins taken one step further back, through ``outer`` (the origins of
        the text these point into)."""
        spans = [outer.span(s, e) if s < e else (outer.at(s),) * 2 for s, e in zip(self.starts, self.ends, strict=True)]
        return _of(spans)

    def shifted(self, offset: int) -> Origins:
        return Origins(tuple(s + offset for s in self.starts), tuple(e + offset for e in self.ends))

    def __getitem__(self, key: slice) -> Origins:
        return Origins(self.starts[key], self.ends[key])

    def __add__(self, other: Origins) -> Origins:
        return Origins(self.starts + other.starts, self.ends + other.ends)


def identity(length: int, base: int = 0) -> Origins:
    """Origins of an unchanged text (of a slice of the source starting at ``base``)."""
    return Origins(tuple(range(base, base + length)), tuple(range(base + 1, base + length + 1)))


def block(length: int, start: int, end: int) -> Origins:
    """Origins of ``length`` characters all read for the source span ``[start, end)``."""
    return Origins((start,) * length, (end,) * length)


def aligned(source: str, target: str) -> Origins:
    """Origins of ``target``, a rewrite of ``source`` by a function that keeps most of it.

    Matched characters point at their own; each run of replaced ones at the run it
    replaced; inserted ones at their position. Characters the rewrite dropped are simply
    pointed at by nothing.
    """
    if source == target:
        return identity(len(source))
    spans: list[tuple[int, int]] = []
    for tag, i1, i2, j1, j2 in _opcodes(source, target):
        if tag == "equal":
            spans.extend((i, i + 1) for i in range(i1, i2))
        elif tag in ("replace", "insert"):
            spans.extend([(i1, i2)] * (j2 - j1))
    return _of(spans)


def _opcodes(source: str, target: str) -> list[tuple[str, int, int, int, int]]:
    """difflib's opcodes from ``source`` to ``target``, ignoring case: "5:30 pm" read "five
    thirty P M" keeps " pm" as " P M"; matched by case, its only kept character would be
    a space, taken as the one after "five", and "thirty" would be read for "pm"."""
    return difflib.SequenceMatcher(None, _folded(source), _folded(target), autojunk=False).get_opcodes()


def _folded(text: str) -> str:
    """``text`` in lower case where that keeps its length (positions must not move)."""
    lower = text.lower()
    return lower if len(lower) == len(text) else text


def _of(spans: Iterable[tuple[int, int]]) -> Origins:
    pairs = list(spans)
    return Origins(tuple(s for s, _ in pairs), tuple(e for _, e in pairs))
