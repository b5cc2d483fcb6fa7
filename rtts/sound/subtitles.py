"""Subtitles from timed words: cues a viewer can read along with, as WebVTT or SRT.

Pure: no I/O. The input is what ``words`` messages carry (``protocol.Words``: each
word's span in the client's text, and its start and end in samples); the output is
cues, each the client's own text for its words, on at most ``Style.lines`` lines.
What the usual subtitle guidelines (the BBC's, Netflix's) ask for:

* a cue ends at the end of a sentence (as ``text.split`` judges it: "Mr." and "3.14"
  end nothing), at a paragraph, and where the speech pauses for ``silence_s``;
* a cue holds at most ``lines`` lines of ``line_chars`` characters (``wide_line_chars``
  for Chinese and Japanese, whose characters are twice as wide), and lasts at most
  ``max_s``; one that would grow past either ends at its last clause mark (, ; : 、，)
  if that leaves it a fair share of the text, else before the word that does not fit;
* its lines break where they are most even, after a clause mark when one is near;
* its text is the client's: punctuation, case, digits and spacing as written ("$23.50",
  not what was read for it), a word's closing punctuation and quotes with it, markup
  left out; Chinese and Japanese joined without spaces, as written;
* its times are its first word's start and its last word's end, in milliseconds; cues
  never overlap and never go back in time.

``Cues`` builds them as the words arrive (a cue is final once the next word starts
another), so a route can send each one as soon as it is known; ``cues`` does it for
a whole list. ``render``, ``header`` and ``cue`` write the files.
"""

from __future__ import annotations

import bisect
import itertools
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rtts.text import markup, split

FORMATS = ("vtt", "srt")
CONTENT_TYPES = {"vtt": "text/vtt; charset=utf-8", "srt": "application/x-subrip; charset=utf-8"}


@dataclass(frozen=True)
class Style:
    line_chars: int = 42  # the BBC's and Netflix's limit for Latin scripts
    wide_line_chars: int = 16  # Netflix's for Chinese (Japanese: 13); mixed lines count each by its share
    lines: int = 2
    max_s: float = 6.0  # longer, and the viewer reads ahead of the voice or waits for it
    silence_s: float = 0.8  # a pause this long is a scene break: nothing shown under it


@dataclass(frozen=True)
class Cue:
    start_ms: int
    end_ms: int
    lines: tuple[str, ...]


@dataclass(frozen=True)
class _Word:
    text_start: int
    text_end: int
    start_ms: int
    end_ms: int
    floor: int  # the previous word's text_end: its opening punctuation starts no earlier


# Marks that open what follows them: they go with the next word, not the last. A straight
# quote opens before a word and closes after one (it is looked for on both sides).
_OPENING = frozenset("\"'“‘«‹([{「『（【〈《〔¿¡")
_ONLY_OPENING = _OPENING - {'"', "'"}
# Where a tag was, for display: removed, and a space only if it was all that parted two words.
_HIDDEN = "\x00"
_HIDDEN_RUN = re.compile(_HIDDEN + "+")
_SPACES = re.compile(r"\s+")


class Cues:
    """Cues for one utterance, built as its words arrive: ``push`` returns the cues that
    are final, ``finish`` the rest. ``text`` is the utterance's whole client text (the
    words' spans are into it), ``sample_rate`` that of their ``start``/``end``."""

    def __init__(self, text: str, sample_rate: int, style: Style = Style()) -> None:
        self.text = text
        self.sample_rate = sample_rate
        self.style = style
        self._shown = markup.blank(text, _HIDDEN)
        judged = split.bounds(markup.blank(text, " "))
        self._bound_at = [offset for offset, _ in judged]
        self._bound_kind = [kind for _, kind in judged]
        self._open: list[_Word] = []
        self._last: _Word | None = None
        self._last_end_ms = 0

    def push(self, words: Iterable[Mapping[str, Any]]) -> list[Cue]:
        out: list[Cue] = []
        for entry in words:
            out += self._add(self._word(entry))
        return out

    def finish(self) -> list[Cue]:
        return self._close(len(self._open), len(self.text))

    # ------------------------------------------------------------ building

    def _word(self, entry: Mapping[str, Any]) -> _Word:
        def ms(samples: int) -> int:
            return round(samples * 1000 / self.sample_rate)

        floor = self._last.text_end if self._last is not None else 0
        word = _Word(int(entry["text_start"]), int(entry["text_end"]), ms(entry["start"]), ms(entry["end"]), floor)
        self._last = word
        return word

    def _add(self, word: _Word) -> list[Cue]:
        out: list[Cue] = []
        if self._open:
            last = self._open[-1]
            if self._bound(last, word) == split.SENTENCE or word.start_ms - last.end_ms >= self.style.silence_s * 1000:
                out += self._close(len(self._open), word.text_start)
        while self._open and not self._fits([*self._open, word]):
            out += self._close(self._clause_cut(word.text_start), word.text_start)
        self._open.append(word)
        return out

    def _bound(self, left: _Word, right: _Word) -> str | None:
        """The strongest end ``split.bounds`` found between two words (a word's own span may hold its mark)."""
        lo = bisect.bisect_right(self._bound_at, left.text_start)
        hi = bisect.bisect_right(self._bound_at, right.text_start)
        kinds = self._bound_kind[lo:hi]
        return split.SENTENCE if split.SENTENCE in kinds else split.CLAUSE if kinds else None

    def _fits(self, words: list[_Word]) -> bool:
        if (words[-1].end_ms - words[0].start_ms) > self.style.max_s * 1000:
            return False
        return self._line_count(words, len(self.text)) <= self.style.lines

    def _clause_cut(self, limit: int) -> int:
        """How many of the open cue's words to close when the next does not fit: up to its
        last clause mark, if what is closed holds at least a third of the text; else all."""
        words = self._open
        whole = self._width(words, limit)
        for k in range(len(words) - 1, 0, -1):
            if self._bound(words[k - 1], words[k]) is not None:
                if self._width(words[:k], words[k].text_start) >= whole / 3:
                    return k
                break
        return len(words)

    def _close(self, k: int, limit: int) -> list[Cue]:
        """The first ``k`` open words as a cue (``limit``: where the next word's text starts)."""
        words, self._open = self._open[:k], self._open[k:]
        if not words:
            return []
        after = self._open[0].text_start if self._open else limit
        start = max(words[0].start_ms, self._last_end_ms)
        end = max(words[-1].end_ms, start + 1)
        self._last_end_ms = end
        return [Cue(start, end, self._lines(words, after))]

    # ------------------------------------------------------------ text

    def _span(self, words: list[_Word], limit: int) -> str:
        """The client's text of ``words`` as shown: from the opening marks before the first
        to the closing marks after the last (which ``limit``, the next word's start, bounds)."""
        shown = self._shown
        a = words[0].text_start
        while a > words[0].floor and shown[a - 1] in _OPENING:
            a -= 1
        b = words[-1].text_end
        while b < limit and _closes(shown[b]):
            b += 1
        return _display(shown[a:b])

    def _width(self, words: list[_Word], limit: int) -> float:
        return width(self._span(words, limit), self.style)

    def _line_count(self, words: list[_Word], limit: int) -> int:
        """Lines the words need, each filled as far as it goes."""
        count, first = 1, 0
        for i in range(1, len(words)):
            if width(self._span(words[first : i + 1], limit if i + 1 == len(words) else words[i + 1].text_start),
                     self.style) > 1:
                count, first = count + 1, i
        return count

    def _lines(self, words: list[_Word], limit: int) -> tuple[str, ...]:
        """The cue's lines: as few as fit, broken where they are most even, rather after a clause mark."""

        def line(i: int, j: int) -> str:
            return self._span(words[i:j], limit if j == len(words) else words[j].text_start)

        n = len(words)
        whole = line(0, n)
        if n == 1 or width(whole, self.style) <= 1:
            return (whole,)
        best: tuple[float, float, tuple[int, ...]] | None = None
        for breaks in range(1, min(self.style.lines, n)):
            for cuts in itertools.combinations(range(1, n), breaks):
                edges = (0, *cuts, n)
                widths = [width(line(i, j), self.style) for i, j in zip(edges, edges[1:])]
                over = sum(max(0.0, w - 1) for w in widths)
                cost = sum(w * w for w in widths)
                cost += sum(0.0 if self._bound(words[c - 1], words[c]) else 0.15 for c in cuts)
                cost += 0.01 * sum(a > b for a, b in zip(widths, widths[1:]))  # a bottom-heavy pair reads better
                if best is None or (over, cost) < best[:2]:
                    best = (over, cost, cuts)
            if best is not None and best[0] == 0:
                break  # the fewest lines that fit
        assert best is not None
        edges = (0, *best[2], n)
        return tuple(line(i, j) for i, j in zip(edges, edges[1:]))


def _closes(ch: str) -> bool:
    """A mark that belongs to the word before it: punctuation that opens nothing (or a tag's place)."""
    if ch == _HIDDEN or ch.isspace() or ch in _ONLY_OPENING:
        return False
    return unicodedata.category(ch)[0] in "PS"


def _display(s: str) -> str:
    """Text as a cue shows it: whitespace runs as one space; where a tag was, nothing,
    or a space if it alone parted two words of a script written with spaces."""

    def tag(m: re.Match[str]) -> str:
        before = s[m.start() - 1] if m.start() else ""
        after = s[m.end()] if m.end() < len(s) else ""
        spaced = before.isalnum() and after.isalnum() and not (_wide(before) or _wide(after))
        return " " if spaced else ""

    return _SPACES.sub(" ", _HIDDEN_RUN.sub(tag, s)).strip()


def _wide(ch: str) -> bool:
    return unicodedata.east_asian_width(ch) in "WF"


def width(line: str, style: Style = Style()) -> float:
    """How much of a line ``line`` takes (1: a full line): each character its share,
    a wide (Chinese, Japanese, fullwidth) one ``1 / wide_line_chars``, any other ``1 / line_chars``."""
    wide = sum(map(_wide, line))
    return wide / style.wide_line_chars + (len(line) - wide) / style.line_chars


def cues(words: Iterable[Mapping[str, Any]], text: str, sample_rate: int, style: Style = Style()) -> list[Cue]:
    """All the cues for a whole utterance's words (see the module docstring)."""
    builder = Cues(text, sample_rate, style)
    return builder.push(words) + builder.finish()


# ---------------------------------------------------------------- files


def header(fmt: str) -> str:
    return "WEBVTT\n\n" if fmt == "vtt" else ""


def cue(fmt: str, index: int, c: Cue) -> str:
    """One cue of a file, numbered from 1, with the blank line that ends it."""
    if fmt == "vtt":
        text = "\n".join(_vtt_escape(line) for line in c.lines)
        return f"{index}\n{_clock(c.start_ms, '.')} --> {_clock(c.end_ms, '.')}\n{text}\n\n"
    return f"{index}\n{_clock(c.start_ms, ',')} --> {_clock(c.end_ms, ',')}\n" + "\n".join(c.lines) + "\n\n"


def render(fmt: str, all_cues: Iterable[Cue]) -> str:
    """A whole WebVTT or SRT file."""
    return header(fmt) + "".join(cue(fmt, i, c) for i, c in enumerate(all_cues, 1))


def _clock(ms: int, point: str) -> str:
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    seconds, ms = divmod(ms, 1000)
    return f"{hours:02d}:{minutes:02d}:{seconds:02d}{point}{ms:03d}"


def _vtt_escape(line: str) -> str:
    # A cue's text is markup in WebVTT: "<" would open a tag, "&" an entity (and "-->" is
    # no longer one once ">" is escaped).
    return line.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
