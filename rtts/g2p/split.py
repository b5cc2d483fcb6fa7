"""Cutting phoneme strings into pieces a model accepts, without losing any of them."""

from __future__ import annotations

from collections.abc import Container

__all__ = ["BREAKS", "first_words", "split_phonemes"]

# A space after one of these is a prosodic break, the best place to cut.
BREAKS = frozenset(",.?!:;—…")


def split_phonemes(phonemes: str, limit: int, joined: Container[int] = frozenset()) -> list[str]:
    """Split ``phonemes`` into pieces of at most ``limit`` symbols each.

    Cuts at the last space after punctuation that fits, else at the last space that
    fits, but not at those in ``joined`` (positions in ``phonemes``: inside one written
    word's reading) while another fits, and only inside a word when one word alone is
    longer than ``limit``. Only the whitespace at a cut is dropped: joining the pieces
    with spaces gives the input back (modulo runs of whitespace), so nothing is ever
    truncated.
    """
    if limit < 1:
        raise ValueError(f"limit must be positive, not {limit}")
    pieces = []
    at = len(phonemes) - len(phonemes.lstrip())  # where ``rest`` is in ``phonemes``
    rest = phonemes.strip()
    while len(rest) > limit:
        cut = _cut_position(rest, limit, joined, at)
        pieces.append(rest[:cut].rstrip())
        stripped = rest[cut:].lstrip()
        at += len(rest) - len(stripped)
        rest = stripped
    if rest:
        pieces.append(rest)
    return pieces


def _cut_position(text: str, limit: int, joined: Container[int], at: int) -> int:
    # A space at index ``limit`` still leaves ``limit`` symbols before it. A space inside
    # a reading (``joined``, where ``text`` is at ``at``) is a cut of last resort (a memory
    # bound is a hard one), before a word's own letters.
    window = text[: limit + 1]
    fallback = inside = 0
    for i in range(len(window) - 1, 0, -1):
        if window[i] != " " or window[i - 1].isspace():
            continue
        if at + i in joined:
            inside = inside or i
        elif window[i - 1] in BREAKS:
            return i
        elif not fallback:
            fallback = i
    return fallback or inside or limit


def first_words(
    phonemes: str, limit: int, shortest: int = 1, joined: Container[int] = frozenset()
) -> tuple[str, str]:
    """``phonemes`` as (its first words, the rest), the first ``shortest`` to ``limit`` symbols.

    Cuts at the first space that leaves ``shortest`` (between words, never inside one),
    but not those in ``joined`` (positions in ``phonemes`` stripped: inside one written
    word's reading), preferring one after punctuation; (``phonemes``, "") when it is
    short already, or when no space leaves a first part of that length.
    """
    text = phonemes.strip()
    if len(text) <= limit:
        return text, ""
    cut = _first_cut(text, limit, joined, shortest)
    if cut >= len(text) or text[cut] != " " or len(text[:cut].rstrip()) < shortest:
        return text, ""
    return text[:cut].rstrip(), text[cut:].lstrip()


def _first_cut(text: str, limit: int, joined: Container[int], least: int) -> int:
    # The earliest cut at or above ``least``, not the latest as for later pieces: a
    # listener is waiting for this one, and every symbol it says is made before the
    # first sound (Mandarin's first audio 0.51 -> 0.78 s when the window's last word end
    # was taken). A break after punctuation anywhere in the window still comes first.
    spaces = [
        i
        for i in range(max(least, 1), min(limit, len(text) - 1) + 1)
        if text[i] == " " and i not in joined and not text[i - 1].isspace()
    ]
    after_break = [i for i in spaces if text[i - 1] in BREAKS]
    # None: no cut. (The window's end was taken, and where a space was there, a reading was
    # cut at it: "$23.50" captioned "twenty-three dollars", its rest in the next run.)
    return (after_break or spaces or [len(text)])[0]
