"""Ordered regex rewrite tables, the shape every normalizer shares.

Each normalizer (en, zh, ja) is a list of (pattern, replacement) applied in order:
earlier rules see the text before later ones rewrite it, so order encodes priority
(dates before plain numbers, and so on).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

Rule = tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]


def apply_rules(rules: Iterable[Rule], text: str) -> str:
    for pattern, repl in rules:
        text = pattern.sub(repl, text)
    return text


def alternation(words: Iterable[str]) -> str:
    """A regex alternative of literal words, longest first so "km/h" wins over "km"."""
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))
