"""Which phonemes of a unit were read for which word of its text.

Engines phonemize a whole unit at once (stress, liaison, tone sandhi and merged words
like espeak's "ʌvðə" for "of the" depend on the neighbours), and word timing must not
change that: the phonemes spoken are the same whether or not a client asked for words.
So each word is phonemized again on its own, and the words' phonemes are matched
against the unit's (``locate``); where context changed them the match is by position.
"""

from __future__ import annotations

import difflib
import itertools
import re
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass

from rtts.text.lexicon import split_phonemes as lexicon_pieces
from rtts.text.origins import Origins, aligned
from rtts.text.written import atoms

__all__ = [
    "Spoken", "Word", "front_end_words", "inside_words", "kept", "locate", "split_span", "spoken", "squeeze",
    "with_lexicon", "with_origins", "words_of",
]  # fmt: skip


@dataclass(frozen=True)
class Spoken:
    """A word (or a character of one) of the text an engine was given, and when it is heard."""

    text_start: int  # code points into ``synthesize``'s ``text`` (end exclusive)
    text_end: int
    said: str  # what was read for it, after normalizing ("twenty-three")
    start: int  # samples at the engine's rate, from the next audio sample it yields
    end: int
    # Items with the same ``word`` are one word (a Chinese word's characters); a client
    # asking for words gets them joined, one asking for characters gets each.
    word: int = 0


# Phoneme symbols that are not part of a word's sound: the pauses around it.
PUNCTUATION = frozenset(",.!?;:—…\"'“”«»()-")
_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class Word:
    """A word of a text and where its phonemes are in the text's phoneme string."""

    text_start: int  # code points into the text
    text_end: int
    said: str  # the (normalized) text read for it
    start: int  # positions in the phoneme string, end exclusive
    end: int
    word: int = 0  # items with the same number are one word (characters of a CJK word)


def locate(pieces: Sequence[str], whole: str) -> list[tuple[int, int]]:
    """Where each of ``pieces`` (the words' phonemes, each alone, in order) is in ``whole``
    (the phonemes of them all together): spans that cover ``whole`` in order, without the
    spaces and punctuation between words."""
    joined, starts = [], []
    at = 0
    for piece in pieces:
        starts.append(at)
        joined.append(piece)
        at += len(piece) + 1
    position = _position_map(" ".join(joined), whole)
    cuts = [0] + [position[s] for s in starts[1:]] + [len(whole)]
    for i in range(1, len(cuts)):  # monotone, whatever the match did
        cuts[i] = max(cuts[i], cuts[i - 1])
    return [_trim(whole, cuts[i], cuts[i + 1]) for i in range(len(pieces))]


def _position_map(a: str, b: str) -> list[int]:
    """For each position 0..len(a) of ``a``, the matching position in ``b``."""
    out = [0] * (len(a) + 1)
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        for i in range(i1, i2 + 1):
            if tag == "equal":
                out[i] = j1 + (i - i1)
            elif tag == "replace":
                out[i] = j1 + round((i - i1) * (j2 - j1) / (i2 - i1))
            else:  # delete: a's characters have no counterpart; insert: a position
                out[i] = j1 if i < i2 or tag == "insert" else j2
    return out


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and (text[start].isspace() or text[start] in PUNCTUATION):
        start += 1
    while end > start and (text[end - 1].isspace() or text[end - 1] in PUNCTUATION):
        end -= 1
    return start, end


def words_of(
    text: str, normalize: Callable[[str], str], phonemize: Callable[[str], str]
) -> tuple[str, list[Word]]:
    """The phonemes of ``text`` (as ``phonemize(normalize(text))``: unchanged) and its
    words: for languages written with spaces between words (espeak's)."""
    normalized = normalize(text)
    whole = phonemize(normalized)
    found = list(_WORD.finditer(normalized))
    spans = locate([phonemize(m.group(0)) for m in found], whole)
    origins = aligned(text, normalized)
    words = []
    for i, (m, (start, end)) in enumerate(zip(found, spans, strict=True)):
        text_start, text_end = origins.span(m.start(), m.end())
        words.append(Word(text_start, text_end, m.group(0), start, end, i))
    return whole, words


def front_end_words(
    text: str, normalized: str, whole: str, found: Sequence[tuple[int, int, str, Sequence[str], str]]
) -> list[Word]:
    """The words of ``text`` in ``whole``, the phonemes of ``normalized`` (its normalized
    form) from a front end that also gave its words (``kokoro_langs.FrontEnds.words``:
    start, end, the word's phonemes alone, its characters' phonemes when known, what is
    read for it when not its text), one item per character."""
    spans = locate([alone for _, _, alone, _, _ in found], whole)
    items = []
    for i, ((start, end, alone, chars, said), (p_start, p_end)) in enumerate(zip(found, spans, strict=True)):
        word = Word(start, end, said or normalized[start:end], p_start, p_end, i)
        items.extend([word] if said else split_span(word, normalized, chars if "".join(chars) == alone else ()))
    return with_origins(items, aligned(text, normalized))


def squeeze(text: str, keep: Container[str]) -> tuple[str, list[int]]:
    """``" ".join(kept.split())`` where ``kept`` is ``text`` without the characters not in
    ``keep``, and for each position of ``text`` (0..len) its position in the result."""
    out: list[str] = []
    where = []
    space = False
    for ch in text:
        where.append(len(out) + (1 if space and out else 0))
        if ch.isspace():
            space = True
            continue
        if ch not in keep:
            continue
        if space and out:
            out.append(" ")
        space = False
        out.append(ch)
    where.append(len(out))
    return "".join(out), where


def split_span(word: Word, text: str, chars: Sequence[str] = ()) -> list[Word]:
    """A word as one item per character of ``text`` in it, tagged as one word: at the
    characters' own phonemes (``chars``, one per character, as the word's phonemes were
    made of them) when the word's phonemes are theirs, else in equal shares."""
    n = word.text_end - word.text_start
    if n <= 1:
        return [word]
    length = word.end - word.start
    if len(chars) == n and sum(map(len, chars)) == length:
        cuts = list(itertools.accumulate(map(len, chars)))
    else:
        cuts = [round(length * (i + 1) / n) for i in range(n)]
    items = []
    prev = 0
    for i, cut in enumerate(cuts):
        c = word.text_start + i
        items.append(Word(c, c + 1, text[c], word.start + prev, word.start + cut, word.word))
        prev = cut
    return items


def with_origins(words: Sequence[Word], origins: Origins) -> list[Word]:
    """``words`` whose text spans point into the text ``origins`` lead back to."""
    out = []
    for w in words:
        start, end = origins.span(w.text_start, w.text_end)
        out.append(Word(start, end, w.said, w.start, w.end, w.word))
    return out


def spoken(
    words: Sequence[Word], at: int, bounds: Sequence[int], ends: Sequence[int] | None = None
) -> tuple[Spoken, ...]:
    """The words in the piece of phonemes ``at`` … ``at + len(bounds) - 1``, timed by
    ``bounds`` (the first sample of each of its phonemes, and the piece's end) or, for
    where they end, ``ends`` (the last sample of the phoneme before each, when that is
    not the next one's first); a word cut between two pieces is in both, with its part of
    each."""
    ends = bounds if ends is None else ends
    symbols = len(bounds) - 1
    out = []
    for w in words:
        start, end = w.start - at, w.end - at
        if end <= 0 or start >= symbols or (start == end and not 0 <= start < symbols):
            continue
        start, end = max(0, start), min(symbols, end)
        first = int(bounds[start])
        last = max(first, int(ends[max(start, end)]))
        out.append(Spoken(w.text_start, w.text_end, w.said, first, last, w.word))
    return tuple(out)


def inside_words(words: Sequence[Word], start: int, end: int) -> frozenset[int]:
    """Positions of the phonemes ``start`` … ``end``, from ``start``, that a run must not
    be cut at (the spaces among them are what a cut looks at): those between two items
    read for one written word ("$23.50" read "twenty-three dollars and fifty cents"), and
    those inside one item. Word timing gives a written word the items of the run it
    starts in, so a cut there would lose the rest of its reading; and a reading cut in two
    is heard as two words."""
    out = set()
    for a, b in itertools.pairwise(words):
        if a.text_end > b.text_start:
            out.update(p - start for p in range(max(a.end, start), min(b.start, end)))
    # And those inside one item's own reading: a word joined by zero-width characters,
    # "zero\u200bwidth\u200cjoin", is one item read "zˈiəɹO wˈɪdθʤYn".
    for w in words:
        out.update(p - start for p in range(max(w.start + 1, start), min(w.end, end)))
    return frozenset(out)


def with_lexicon(text: str, piece_words: Callable[[str], tuple[str, list[Word]]]) -> tuple[str, list[Word]]:
    """The phonemes of ``text`` as the engines join them (each piece's stripped, with a
    space between; a lexicon entry's phonemes as written) and its words in them:
    ``piece_words`` gives those of a piece of text without entries, and an entry is one
    word, its sentinels included."""
    parts: list[str] = []
    words: list[Word] = []
    at = cursor = number = 0  # in the joined phonemes, in text; the next word's number
    for is_phonemes, piece in lexicon_pieces(text):
        offset = text.find(piece, cursor)
        cursor = offset + len(piece)
        if is_phonemes:
            # Its sentinels, just outside the piece, are its text too.
            phonemes, found = piece, [Word(-1, len(piece) + 1, f"/{piece.strip()}/", 0, len(piece))]
        else:
            phonemes, found = piece_words(piece)
        stripped = phonemes.strip()
        if not stripped:
            continue
        at += 1 if parts else 0
        lead = len(phonemes) - len(phonemes.lstrip())
        for w in found:
            start, end = (max(0, min(len(stripped), p - lead)) + at for p in (w.start, w.end))
            words.append(Word(w.text_start + offset, w.text_end + offset, w.said, start, end, w.word + number))
        number = max((w.word for w in words), default=-1) + 1
        parts.append(stripped)
        at += len(stripped)
    return " ".join(parts), _whole_words(words, text)


def _whole_words(words: list[Word], text: str) -> list[Word]:
    """``words`` with spans that take in the whole written words of ``text`` they touch:
    "pm" read "P M" is matched letter by letter, and its two items must stay together
    (an engine sends the items of one written word in one go)."""
    written = atoms(text)
    out = []
    for w in words:
        touched = [(a, b) for a, b in written if a < w.text_end and w.text_start < b]
        if touched:
            w = Word(min(w.text_start, touched[0][0]), max(w.text_end, touched[-1][1]), w.said, w.start, w.end, w.word)
        out.append(w)
    return out


def kept(text: str, keep: Container[str]) -> tuple[str, list[int]]:
    """``text`` without the characters not in ``keep`` (spaces as they are, unlike
    ``squeeze``), and for each position of ``text`` (0..len) its position in the result."""
    out = []
    where = []
    for ch in text:
        where.append(len(out))
        if ch in keep:
            out.append(ch)
    where.append(len(out))
    return "".join(out), where
