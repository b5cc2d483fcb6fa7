"""The session's side of word timing: from what an engine timed to the words the client wrote.

An engine reports items of the text it was given (``engines.base.Spoken``: a word, or a
character of a Chinese or Japanese one, in its samples). The session knows where that text
came from (``Origins`` through the lexicon, the language segments, the units and the
markup, back to the client's text) and turns the items into the entries of ``words``
messages: the client's own words, each exactly once and in order, on the ``pts`` clock.

Items that came from one written word ("$23.50" read as five words) are one entry; items
that cut a written word ("2026" read as two jieba words) too. A written word the engine
said nothing for (a symbol it dropped) is an entry of no length where it would have been.
Pure: no I/O, tested in tests/unit/test_word_timing.py.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from rtts.engines.base import Spoken
from rtts.text.markup import BREAK_CLOSE, BREAK_OPEN
from rtts.text.origins import Origins, aligned, identity
from rtts.text.written import CJK, atoms, wordy

__all__ = ["Clock", "Entry", "locate"]

# What a reading keeps of the punctuation around a word ("fifteenth,"): not said.
_PUNCTUATION = ".,;:!?()[]{}\"'“”‘’«»「」『』、。，！？：；…—–-"


@dataclass(frozen=True)
class Entry:
    """One entry of a ``words`` message (``protocol.Words``)."""

    text: str
    text_start: int
    text_end: int
    said: str
    start: int
    end: int

    def as_dict(self) -> dict[str, object]:
        return {
            "text": self.text, "text_start": self.text_start, "text_end": self.text_end,
            "said": self.said, "start": self.start, "end": self.end,
        }  # fmt: skip


def locate(rendered: str, cursor: int, text: str) -> tuple[Origins, int]:
    """Where ``text`` (a part: a stretch of ``rendered`` with its whitespace collapsed and
    its breaks cut out) is in ``rendered``, looking from ``cursor``: the origins of its
    characters in ``rendered``, and where the next part will be looked for."""
    starts = []
    j = cursor
    for ch in text:
        while j < len(rendered) and rendered[j] != ch:
            if rendered[j] == BREAK_OPEN:
                close = rendered.find(BREAK_CLOSE, j)
                j = len(rendered) if close < 0 else close + 1
            elif rendered[j].isspace() or unicodedata.category(rendered[j]) in ("Cf", "Cc"):
                j += 1
            else:
                break
        if j >= len(rendered) or (rendered[j] != ch and not (ch.isspace() and rendered[j].isspace())):
            # Not a plain cut of it (unexpected): matched as a rewrite instead.
            window = rendered[cursor : cursor + 2 * len(text) + 64]
            return aligned(window, text).shifted(cursor), cursor + len(text)
        starts.append(j)
        j += 1
    return Origins(tuple(starts), tuple(s + 1 for s in starts)), j


class Clock:
    """One utterance's word timing: where its parts are in the client's text and how much
    of that text its ``words`` messages have covered."""

    def __init__(self, unit: str) -> None:
        self.unit = unit  # "word" or "char" (protocol.WORD_UNITS)
        self.raw: list[str] = []  # the client's text, as it came
        self.rendered = ""
        self.origins = identity(0)  # of ``rendered`` in the client's text
        self._cursor = 0
        self.covered = 0  # the client's text up to here is in a words message

    @property
    def text(self) -> str:
        return "".join(self.raw)

    def add(self, raw: str, rendered: str, origins: Origins) -> None:
        """More client text, and what of it is rendered so far (markup may hold some back),
        with origins in all of the client's text."""
        self.raw.append(raw)
        self.rendered += rendered
        self.origins = self.origins + origins

    def part(self, text: str, speak_origins: Origins) -> Part:
        """Where a part is: ``text`` as the session cut it, ``speak_origins`` those of the
        engine's text (after the lexicon) in ``text``."""
        in_rendered, self._cursor = locate(self.rendered, self._cursor, text)
        to_raw = in_rendered.then(self.origins)
        raw = self.text
        words = []
        for a, b in atoms(text):
            start, end = to_raw.span(a, b)
            if wordy(raw[start:end]):
                words.append((start, end))
        return Part(speak_origins.then(to_raw), tuple(words))

    def entries(self, part: Part, spoken: Sequence[Spoken], at: int, scale: float) -> list[Entry]:
        """Entries for an engine's items of ``part``: ``at`` is the ``pts`` of the engine's
        next sample, ``scale`` output samples per engine sample."""
        raw = self.text
        groups: list[_Group] = []
        for item in spoken:
            start, end = part.origins.span(item.text_start, item.text_end)
            if not wordy(raw[start:end]) and not wordy(item.said):
                continue  # punctuation read as a pause: not a word ("&" read "and" is one)
            # The written words an item was read for are its entry, whole (without the
            # punctuation its reading kept: "fifteenth," for "15,").
            touched = [(a, b) for a, b in part.words if a < end and start < b]
            if touched:
                start, end = touched[0][0], touched[-1][1]
            pts_start, pts_end = at + round(item.start * scale), at + round(item.end * scale)
            last = groups[-1] if groups else None
            said = item.said.strip(_PUNCTUATION)
            # A word heard in the one before it (う of でしょう, in its long vowel) is part of it.
            silent = pts_start == pts_end and last is not None and start == last.end
            # A reading's word the text has no place for (分 added after "15:30") goes with the one before.
            inserted = start == end and last is not None and start <= last.end
            if last is not None and (
                (self.unit == "word" and last.word == item.word) or start < last.end or silent or inserted
            ):
                last.end = max(last.end, end)
                last.said.append(said)
                last.pts_end = max(last.pts_end, pts_end)
                last.word = item.word
            else:
                groups.append(_Group(start, end, [said], pts_start, pts_end, item.word))
        out: list[Entry] = []
        for g in groups:
            start = max(g.start, self.covered)
            if start >= g.end:
                continue  # a word cut between two runs: its first run's entry has it
            out.extend(self._unsaid(part, start, g.pts_start))
            joiner = "" if any(CJK.search(piece) for piece in g.said) else " "
            out.append(Entry(raw[start : g.end], start, g.end, joiner.join(g.said), g.pts_start, g.pts_end))
            self.covered = g.end
        return out

    def finish(self, part: Part, at: int) -> list[Entry]:
        """Entries of no length for the part's words after the last one the engine timed."""
        return self._unsaid(part, len(self.text) + 1, at)

    def _unsaid(self, part: Part, before: int, at: int) -> list[Entry]:
        raw = self.text
        out = []
        for a, b in part.words:
            if a >= self.covered and b <= before:
                out.append(Entry(raw[a:b], a, b, "", at, at))
                self.covered = b
        return out


@dataclass
class _Group:
    start: int  # in the client's text
    end: int
    said: list[str]
    pts_start: int
    pts_end: int
    word: int


@dataclass(frozen=True)
class Part:
    """A part's text as its engine gets it, mapped to the client's text."""

    origins: Origins  # of the engine's text (after the lexicon) in the client's text
    words: tuple[tuple[int, int], ...]  # its written words, as spans of the client's text
