"""Cutting phoneme strings into pieces a model accepts, without losing any of them."""

from __future__ import annotations

from collections.abc import Container

__all__ = ["BREAKS", "first_words", "split_phonemes"]

# A space after one of these is a prosodic break, the best place to cut.
BREAKS = frozenset(",.?!:;—…")


def split_phonemes(phonemes: str, limit: int) -> list[str]:
    """Split ``phonemes`` into pieces of at most ``limit`` symbols each.

    Cuts at the last space after punctuation that fits, else at the last space that
    fits, and only inside a word when one word alone is longer than ``limit``. Only the
    whitespace at a cut is dropped: joining the pieces with spaces gives the input back
    (modulo runs of whitespace), so nothing is ever truncated.
    """
    if limit < 1:
        raise ValueError(f"limit must be positive, not {limit}")
    pieces = []
    rest = phonemes.strip()
    while len(rest) > limit:
        cut = _cut_position(rest, limit)
        pieces.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip()
    if rest:
        pieces.append(rest)
    return pieces


def _cut_position(text: str, limit: int, joined: Container[int] = frozenset(), least: int = 1) -> int:
    # A space at index ``limit`` still leaves ``limit`` symbols before it. Only spaces
    # that leave ``least`` before them count: a break below it is no cut at all.
    window = text[: limit + 1]
    fallback = 0
    for i in range(len(window) - 1, max(least, 1) - 1, -1):
        if window[i] != " " or i in joined:
            continue
        if window[i - 1] in BREAKS:
            return i
        if not fallback and not window[i - 1].isspace():
            fallback = i
    return fallback or limit


def first_words(
    phonemes: str, limit: int, shortest: int = 1, joined: Container[int] = frozenset()
) -> tuple[str, str]:
    """``phonemes`` as (its first words, the rest), the first ``shortest`` to ``limit`` symbols.

    Cuts only at a space (between words, never inside one) but those in ``joined``
    (positions in ``phonemes`` stripped: inside one written word's reading), preferring
    one after punctuation; (``phonemes``, "") when it is short already, or when no space
    leaves a first part of that length.
    """
    text = phonemes.strip()
    if len(text) <= limit:
        return text, ""
    cut = _cut_position(text, limit, joined, shortest)
    if cut >= len(text) or text[cut] != " " or len(text[:cut].rstrip()) < shortest:
        return text, ""
    return text[:cut].rstrip(), text[cut:].lstrip()
