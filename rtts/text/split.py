"""Split text into the units the engine speaks one at a time.

A unit is a sentence, or part of one when the sentence is too long. The first unit
of an utterance is kept short (``first_max_chars``) because time to first audio is
what a listener notices; later units are whole sentences up to ``max_chars``, split
at clause punctuation before falling back to word boundaries.

Punctuation only splits where a reader would pause: ``3.14``, ``10:30``, ``1,000``,
``example.com`` and ``a@b.org`` have no space after the mark, and known
abbreviations (``Mr.``, ``e.g.``, ``5 p.m. today``) are recognised. Text is never
dropped or reordered: joining the units gives back the input with runs of
whitespace collapsed to one space.

:class:`UnitBuffer` does the same for text that arrives in pieces (LLM tokens). It
only emits a unit once later text can no longer change it, so apart from the first
unit (see :meth:`UnitBuffer.feed`) it yields exactly what :func:`split_units`
yields for the whole text.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Literal

End = Literal["sentence", "clause", "cut"]

SENTENCE: Final = "sentence"  # ended by . ! ? 。！？ a newline, or the end of the text
CLAUSE: Final = "clause"  # ended by , ; : 、，；： or a dash
CUT: Final = "cut"  # forced split at a word boundary (or between CJK characters)

# Silence to put after a unit, by how it ended. A cut falls mid-phrase, so any
# pause there would sound like a stumble.
PAUSE_MS: Final = MappingProxyType({SENTENCE: 250, CLAUSE: 120, CUT: 0})


@dataclass(frozen=True)
class Unit:
    """One piece of text for the engine, with whitespace collapsed and stripped."""

    text: str
    end: End


def pause_ms(unit: Unit) -> int:
    """Suggested silence after ``unit``, in milliseconds."""
    return PAUSE_MS[unit.end]


def split_units(text: str, *, first_max_chars: int = 40, max_chars: int = 250) -> list[Unit]:
    """Split a complete text into speech units (see the module docstring)."""
    buffer = UnitBuffer(first_max_chars=first_max_chars, max_chars=max_chars)
    buffer._text = text  # no partial pass: the whole text is known to be final
    return buffer.flush()


def bounds(text: str) -> list[tuple[int, End]]:
    """Where a whole text's punctuation ends a sentence or a clause, judged as
    ``split_units`` judges it ("Mr.", "3.14" and "10:30" end nothing): each as (the
    offset just after the mark and its closing quotes, kind), in order. For lining the
    text up with something else (subtitles), not for cutting units."""
    buffer = UnitBuffer()
    buffer._text = text
    buffer._scan_candidates(final=True)
    return list(buffer._bounds)


# --- character classes ------------------------------------------------------

# Every mark that may end a piece. Runs are matched whole so "?!" and "..." are one
# candidate; newlines are candidates of their own.
_CANDIDATE: Final = re.compile(r"[.!?…。！？]+|[,;:、，；：]|[—―]+|-{2,}|[–-]|[\n\r\u2028\u2029]")
_NEWLINES: Final = "\n\r\u2028\u2029"
_CJK_CLAUSE: Final = frozenset("、，；：")
_CJK_SENTENCE: Final = frozenset("。！？")
_CLOSERS: Final = frozenset("\"'”’»›)]}」』）】〉》〕")
_OPENERS: Final = "\"'“‘«‹([{「『（【〈《〔"
# Scripts written without spaces between words, so a long run may be cut anywhere.
_CJK: Final = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f]")
_CJK_ONLY: Final = re.compile(f"{_CJK.pattern}+")
_ALNUM: Final = re.compile(r"[^\W_]")
_SPACE: Final = re.compile(r"\s+")

# A period after these never ends a sentence: they are followed by a name or number.
_NEVER_END: Final = frozenset(
    "mr mrs ms dr prof st vs e.g i.e cf fig vol mt u.s u.k approx dept".split()
)
# These often end a sentence too ("... and so on, etc."), so the next word decides:
# a capital letter starts a new sentence, lowercase or a digit continues this one.
_MAYBE_END: Final = frozenset("etc a.m p.m no inc ltd co corp jr sr al".split())
_DOTTED: Final = re.compile(r"(?:[a-z]\.)+[a-z]", re.IGNORECASE)  # U.N, e.g, i.e
_MAX_WORD: Final = 24  # longer words are never abbreviations; bounds the look-behind
# The longest first clause of Chinese or Japanese kept whole (``_first_chunk``): ~8 s of
# speech; a longer one with no mark in it is still cut by characters.
CJK_FIRST_CLAUSE: Final = 40
# A first clause of fewer Chinese or Japanese characters than this is no unit of its own
# (``_first_chunk``): "请注意，" gave 0.82 s of audio, and on a 2-core EPYC with a core
# taken the next unit's first run was not made in that time, a 0.17-0.27 s gap in every
# round. Joined to what follows, the first unit is a whole sentence or clause, whose first
# run the engine sizes to the box's speed (Kokoro's QUICK_START).
CJK_FIRST_CLAUSE_LEAST: Final = 6

# Streaming keeps this much already-scanned text as look-behind, and only drops the
# front of its buffer once that much has been emitted.
_CONTEXT: Final = 64
_TRIM_AT: Final = 2048


class _Undecided:
    """Marker: this candidate cannot be judged until more text arrives."""


_UNDECIDED: Final = _Undecided()


def _is_cjk(ch: str) -> bool:
    return bool(ch) and _CJK.match(ch) is not None


def _is_ascii_alnum(ch: str) -> bool:
    return ch.isascii() and ch.isalnum()


def _check_limits(first_max_chars: int, max_chars: int) -> None:
    if first_max_chars < 1 or max_chars < first_max_chars:
        raise ValueError(
            f"need 1 <= first_max_chars <= max_chars, got first_max_chars={first_max_chars},"
            f" max_chars={max_chars}"
        )


# --- choosing where a unit ends ---------------------------------------------
#
# All three functions see ``s``: the current sentence from the first unemitted
# non-space character (to its end when ``complete``, else to the end of the buffer),
# ``clauses``: offsets in ``s`` just after each clause mark, and ``known``: how much
# of ``s`` has had its punctuation judged. They return (offset, end kind), or None
# to wait for more text. A decision is only made when more text could not change
# it, which is what makes streaming agree with the one-shot split.

_Chunk = tuple[int, End] | None


def _first_chunk(s: str, clauses: list[int], complete: bool, known: int, limit: int, longest: int) -> _Chunk:
    if complete and len(s) <= limit:
        return len(s), SENTENCE
    most = min(longest, max(limit, CJK_FIRST_CLAUSE))
    if clauses and clauses[0] <= CJK_FIRST_CLAUSE_LEAST and _CJK_ONLY.fullmatch(s, 0, clauses[0] - 1):
        # A few characters and a mark (CJK_FIRST_CLAUSE_LEAST): the next clause that is no
        # such stub, or the sentence, where one is whole within reach; else this one.
        chunk = _cjk_whole(s, [c for c in clauses if c > CJK_FIRST_CLAUSE_LEAST], complete, known, most)
        if chunk is not False:
            return chunk
    if clauses and clauses[0] <= limit:
        return clauses[0], CLAUSE
    if _CJK.search(s, 0, limit) and not _SPACE.search(s, 1, limit + 1):
        # Chinese and Japanese have no spaces between words, and a cut by characters fell
        # inside one ("東京駅を出" | "発します": OpenJTalk read デ + ハッシマス) or a phrase
        # ("上午" | "9点"): the first clause stays whole up to CJK_FIRST_CLAUSE characters.
        # First audio comes from the engine's own first words (Kokoro's QUICK_START, cut
        # between jieba's words), not from a shorter unit.
        chunk = _cjk_whole(s, clauses, complete, known, most)
        if chunk is not False:
            return chunk
    if complete or known > limit:
        cut = _whole_word(s, limit, longest, None if complete else known)
        if cut is None:
            return None
        cut = cut or _cut_point(s, limit, limit)
        return cut, CLAUSE if cut in clauses else CUT
    return None


def _cjk_whole(s: str, clauses: list[int], complete: bool, known: int, most: int) -> _Chunk | Literal[False]:
    """The first of ``clauses`` or else the sentence, whole, where it ends within ``most``
    with no space in it (Latin words inside one, "今日は Hello world", are cut between
    words as any other text); None to wait while it may still end within reach; False
    where there is none."""
    if clauses and clauses[0] <= most:
        end: int | None = clauses[0]
    elif complete and len(s) <= most:
        end = len(s)
    else:
        end = None
    if end is not None:
        if _SPACE.search(s, 1, end):
            return False
        return end, CLAUSE if clauses and end == clauses[0] else SENTENCE
    if not complete and known <= most and not _SPACE.search(s, 1, known):
        return None
    return False


def _next_chunk(s: str, clauses: list[int], complete: bool, known: int, limit: int) -> _Chunk:
    n = len(s)
    if complete and n <= limit:
        return n, SENTENCE
    if not complete and known <= 2 * limit:
        # Whether this sentence fits in two units (and so should be halved) or needs
        # more is only known once it is complete or longer than two units.
        return None
    halve = complete and n <= 2 * limit
    shortest = limit // 4  # avoid a stub unit when a clause mark sits near the start
    fitting = [c for c in clauses if shortest <= c <= limit]
    if halve:
        balanced = [c for c in fitting if n - c <= limit]
        if balanced:
            return min(balanced, key=lambda c: (abs(2 * c - n), -c)), CLAUSE
    if fitting:
        # A clause mark is a natural pause, so an extra unit beats a mid-phrase cut.
        return max(fitting), CLAUSE
    return _cut_point(s, n // 2 if halve else limit, limit), CUT


def _inside_token(s: str, i: int) -> bool:
    """Whether a cut before ``s[i]`` would split an ASCII word or a number: "23.5", "15:30"
    and "1,000" are read whole (cut as "23" | ".5元" the Mandarin reader said 二十三… 五元)."""
    if _is_ascii_alnum(s[i - 1]) and _is_ascii_alnum(s[i]):
        return True
    digit_mark_digit = s[i] in ".,:" and s[i - 1].isdigit() and i + 1 < len(s) and s[i + 1].isdigit()
    return digit_mark_digit or (s[i - 1] in ".,:" and i >= 2 and s[i - 2].isdigit() and s[i].isdigit())


def _whole_word(s: str, limit: int, longest: int, known: int | None) -> int | None:
    """Where the first unit ends when ``s`` (longer than ``limit``) begins with one word
    longer than ``limit``, in text written with spaces (a 68-digit number, a URL): after
    that word, when it ends within ``longest`` (a later unit's length). Each unit's words
    are timed apart, so a cut inside it would make two entries of one word.

    0 when that is not so (cut ``s`` as usual); None while it is not known yet: ``known``
    is how much of a streamed ``s`` has had its punctuation judged (None: ``s`` is a
    whole sentence)."""
    if longest <= limit or _SPACE.search(s, 1, limit + 1) or _CJK.search(s, 0, limit):
        return 0
    space = _SPACE.search(s, limit + 1, longest + 1)
    end = space.start() if space else len(s) if known is None and len(s) <= longest else 0
    if known is None:
        return end
    # Streamed: the word (or its sentence) may still end within ``longest``.
    if end:
        return end if known > end else None
    return 0 if known > longest else None


def _cut_point(s: str, target: int, limit: int) -> int:
    """Where to cut ``s`` (longer than ``limit``) when no punctuation will do.

    Prefers the space nearest ``target``. Without one (or with only a stray one far
    before it in CJK text) it cuts at ``target`` characters, backing off so as not
    to split an ASCII word or number, and keeping trailing punctuation.
    """
    best = None
    for m in _SPACE.finditer(s, 1, limit + 1):
        if best is None or abs(m.start() - target) <= abs(best - target):
            best = m.start()
    if best is not None and (2 * best >= target or not _CJK.search(s, 0, limit)):
        return best
    cut = max(1, min(target, limit))
    start = cut
    while start > 0 and _inside_token(s, start):
        start -= 1
    if start > 0:
        cut = start
    while cut < limit and not s[cut].isalnum() and not s[cut].isspace() and s[cut] not in _OPENERS:
        cut += 1
    return cut


# --- the buffer -------------------------------------------------------------


class UnitBuffer:
    """Turns a stream of text pieces into speech units as soon as they are final.

    A unit is final when the text after it proves it: ``"Hello. "`` is a sentence,
    but a trailing ``"Hello."`` may still grow a closing quote and ``"3."`` may
    become ``"3.5"``. Call :meth:`flush` at the end of the utterance; the buffer is
    then empty and ready for the next utterance (whose first unit is short again).
    """

    def __init__(self, *, first_max_chars: int = 40, max_chars: int = 250) -> None:
        _check_limits(first_max_chars, max_chars)
        self.first_max_chars = first_max_chars
        self.max_chars = max_chars
        self._reset()

    def _reset(self) -> None:
        self._text = ""
        self._base = 0  # chars dropped from the front of _text (0: _text starts the utterance)
        self._pos = 0  # end of the text already emitted
        self._scan = 0  # where the first undecided punctuation candidate starts
        self._bounds: deque[tuple[int, End]] = deque()  # judged piece ends after _pos
        self._promotable = False  # _bounds[-1] is a clause end a following newline may promote
        self._piece_alnum = False  # is there a letter or digit since the last piece end ...
        self._alnum_from = 0  # ... checked up to here
        self._emitted = False

    @property
    def pending(self) -> int:
        """Characters received but not yet emitted (including whitespace)."""
        return len(self._text) - self._pos

    def feed(self, text: str) -> list[Unit]:
        """Add text; return the units that are now complete.

        Until the first unit has been emitted, a clause mark is enough to emit one
        (``"Hi, "`` gives ``"Hi,"``) rather than waiting for the sentence to end, so
        sound can start early. This is the only way the streamed units can differ
        from ``split_units`` on the whole text, which keeps a short first sentence
        whole.
        """
        self._text += text
        return self._drain(final=False)

    def flush(self) -> list[Unit]:
        """Return everything still buffered as units, and reset for a new utterance."""
        units = self._drain(final=True)
        self._reset()
        return units

    def _drain(self, final: bool) -> list[Unit]:
        self._scan_candidates(final)
        units = []
        while (unit := self._next_unit(final)) is not None:
            units.append(unit)
        self._trim()
        return units

    # -- judging punctuation --

    def _scan_candidates(self, final: bool) -> None:
        for m in _CANDIDATE.finditer(self._text, self._scan):
            verdict = self._judge(m, final)
            if isinstance(verdict, _Undecided):
                self._scan = m.start()
                return
            if verdict is not None:
                self._add_bound(m.start(), *verdict)
        self._scan = len(self._text)

    def _judge(self, m: re.Match[str], final: bool) -> tuple[int, End] | None | _Undecided:
        """Does the mark ``m`` end a piece, and where (after any closing quotes)?"""
        text, run, i = self._text, m.group(), m.start()
        n = len(text)
        if run[0] in _NEWLINES:
            return i, SENTENCE
        if m.end() == n and not final:
            return _UNDECIDED  # the run may grow: "-" -> "--", "." -> "...", "!" -> '!"'
        if run[0] in "—―":
            return m.end(), CLAUSE
        nxt = text[m.end()] if m.end() < n else ""
        if run[0] in "-–":
            prev = text[i - 1] if i else ""
            if len(run) > 1:  # "--" as an ASCII em dash, but not "--verbose"
                spaced = not nxt or nxt.isspace() or (prev.isalnum() and nxt.isalnum())
                return (m.end(), CLAUSE) if spaced else None
            # Only a spaced dash is a pause: not "well-known", "-5" or "1990–2000".
            return (m.end(), CLAUSE) if prev.isspace() and (not nxt or nxt.isspace()) else None

        end = m.end()
        while end < n and text[end] in _CLOSERS:
            end += 1
        if end == n and not final:
            return _UNDECIDED
        if run in _CJK_CLAUSE:
            return end, CLAUSE
        if any(c in _CJK_SENTENCE for c in run):
            return end, SENTENCE
        nxt = text[end] if end < n else ""
        if nxt and not nxt.isspace() and not _is_cjk(nxt):
            return None  # 3.14, 10:30, 1,000, example.com, a?b=1
        if run in ",;:":
            return end, CLAUSE
        if "!" in run or "?" in run:
            return end, SENTENCE

        # Only "." and ellipses are left; some need the next word to decide.
        lower = ""
        if run == ".":
            word, line_start = self._word_before(i)
            lower = word.lower()
            if lower in _NEVER_END or (len(word) == 1 and word.isupper() and word != "I"):
                return None  # "Dr. Who", "J. R. R. Tolkien"
            if line_start and word.isascii() and word.isdigit() and len(word) <= 3:
                return None  # a list item: "1. Preheat the oven."
            if lower not in _MAYBE_END and not _DOTTED.fullmatch(word):
                return end, SENTENCE
        following = self._next_visible(end)
        if following is None:
            if not final:
                return _UNDECIDED
            following = ""
        if run != ".":
            # "Wait... what?" trails off mid-sentence; "Wait... What?" starts a new one.
            return (end, CLAUSE) if following.islower() else (end, SENTENCE)
        if lower == "no":
            return None if following.isdigit() or following == "#" else (end, SENTENCE)
        return None if following.islower() or following.isdigit() else (end, SENTENCE)

    def _word_before(self, i: int) -> tuple[str, bool]:
        """The word ending at ``i`` (without opening quotes) and whether it starts a line."""
        text = self._text
        start = i
        while start > max(0, i - _MAX_WORD) and not text[start - 1].isspace():
            start -= 1
        if start > 0 and not text[start - 1].isspace():
            return "", False  # too long to be an abbreviation or a list number
        line = start
        while line > max(0, start - 8) and text[line - 1] in " \t":
            line -= 1
        line_start = (line == 0 and self._base == 0) or (line > 0 and text[line - 1] in _NEWLINES)
        return text[start:i].lstrip(_OPENERS), line_start

    def _next_visible(self, i: int) -> str | None:
        text = self._text
        while i < len(text) and text[i].isspace():
            i += 1
        return text[i] if i < len(text) else None

    def _add_bound(self, mark: int, end: int, kind: End) -> None:
        if not self._piece_alnum:
            self._piece_alnum = _ALNUM.search(self._text, self._alnum_from, mark) is not None
        if not self._piece_alnum:
            # Nothing speakable since the last piece ended ("\n\n", "* * *", a lone
            # dash): not a piece of its own, it joins the next one. A newline right
            # after a clause mark ("Dear John,\n") does end the sentence there.
            if kind == SENTENCE and self._promotable:
                self._bounds[-1] = (self._bounds[-1][0], SENTENCE)
                self._promotable = False
            self._alnum_from = mark
            return
        self._bounds.append((end, kind))
        self._promotable = kind == CLAUSE
        self._piece_alnum = False
        self._alnum_from = end

    # -- cutting units --

    def _next_unit(self, final: bool) -> Unit | None:
        text = self._text
        start = self._pos
        while start < len(text) and text[start].isspace():
            start += 1
        self._pos = start
        while self._bounds and self._bounds[0][0] <= start:
            self._bounds.popleft()
        if not self._bounds:
            self._promotable = False
        if start == len(text):
            return None

        sentence_end = None
        clauses = []
        for end, kind in self._bounds:
            if kind == SENTENCE:
                sentence_end = end
                break
            clauses.append(end - start)
        complete = sentence_end is not None or final
        if complete:
            s = text[start : len(text) if sentence_end is None else sentence_end].rstrip()
            clauses = [c for c in clauses if c < len(s)]
            known = len(s)
        else:
            s = text[start:]
            known = self._scan - start

        if self._emitted:
            chunk = _next_chunk(s, clauses, complete, known, self.max_chars)
        else:
            chunk = _first_chunk(s, clauses, complete, known, self.first_max_chars, self.max_chars)
        if chunk is None:
            return None
        cut, kind = chunk
        if complete and cut == len(s):
            kind = SENTENCE
        self._pos = start + cut
        self._emitted = True
        return Unit(" ".join(s[:cut].split()), kind)

    def _trim(self) -> None:
        # Drop emitted text from the front, keeping look-behind for the scanner, so a
        # long stream fed in small pieces stays linear.
        cut = min(self._pos, self._scan - _CONTEXT)
        if cut < _TRIM_AT:
            return
        if not self._piece_alnum and self._alnum_from < cut:
            self._piece_alnum = _ALNUM.search(self._text, self._alnum_from, cut) is not None
        self._alnum_from = max(0, self._alnum_from - cut)
        self._text = self._text[cut:]
        self._base += cut
        self._pos -= cut
        self._scan -= cut
        self._bounds = deque((end - cut, kind) for end, kind in self._bounds)
