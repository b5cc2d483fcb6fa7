"""The written words of a text: what word timing names and covers, once each.

Runs between spaces, without the punctuation around them, and in Chinese and Japanese
each character (the front ends say which characters make one word). Shared by the
engines (the items of one written word stay together) and the session (every written
word in exactly one entry).
"""

from __future__ import annotations

import re
import unicodedata

from rtts.text.markup import BREAK_CLOSE, BREAK_OPEN

__all__ = ["CJK", "atoms", "wordy"]

# Scripts written without spaces: each character is a word of its own.
CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003ffff]")
_RUN = re.compile(r"\S+")
_ABBREVIATION = re.compile(r"(?:[^\W\d_]\.)+[^\W\d_]")  # letters with dots between
_CLAUSE_MARKS = frozenset(".,;:!?¡¿…‥、。，．！？：；\"'･・") | {BREAK_OPEN, BREAK_CLOSE}


def atoms(text: str) -> list[tuple[int, int]]:
    """The written words of ``text``: runs between spaces, without the punctuation around
    them (an abbreviation keeps its last dot), and each Chinese or Japanese character."""
    out = []
    for m in _RUN.finditer(text):
        start = m.start()
        for c in CJK.finditer(m.group(0)):
            out.extend(_stripped(text, start, m.start() + c.start()))
            out.append((m.start() + c.start(), m.start() + c.end()))
            start = m.start() + c.end()
        out.extend(_stripped(text, start, m.end()))
    return out


def _stripped(text: str, start: int, end: int) -> list[tuple[int, int]]:
    while start < end and _edge(text[start]):
        start += 1
    while end > start and _edge(text[end - 1]):
        end -= 1
    if start >= end:
        return []
    if end < len(text) and text[end] == "." and _ABBREVIATION.fullmatch(text[start:end]):
        end += 1  # "U.S." and "e.g." keep their last dot ("$23.50." does not)
    return [(start, end)]


def wordy(text: str) -> bool:
    """Has a letter, a digit or a symbol ("$", "°"): something that is read."""
    return any(unicodedata.category(ch)[0] in "LNS" for ch in text)


def _edge(ch: str) -> bool:
    """Punctuation around a word, not part of it: brackets, quotes, dashes and the marks
    that end a clause ("%", "#", "@" and "&" are read, and stay)."""
    return unicodedata.category(ch) in ("Ps", "Pe", "Pi", "Pf", "Pd") or ch in _CLAUSE_MARKS


