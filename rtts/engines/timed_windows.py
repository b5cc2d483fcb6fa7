"""The words of a piece that an engine hands out in windows (Piper, Hibari).

An engine that streams inside a piece knows every word's place in the piece's audio
from the one model run (its durations), but not yet where that audio will end: the
last window is trimmed of its trailing silence only once it is made, and a model may
put that silence in the last phoneme's duration (Hibari gives a sentence's last vowel
~0.4 s). So each word goes out just before the chunk its start is in, and those that
start in the last chunk are held to where it ends: the last word ends with the audio.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rtts.engines.base import Spoken, Timing
from rtts.g2p.words import Word, spoken

__all__ = ["WindowedWords"]


class WindowedWords:
    """A piece's words, timed in samples of its whole (untrimmed) audio."""

    def __init__(self, words: Sequence[Word], at: int, bounds: np.ndarray) -> None:
        """``words`` of the phonemes the piece is ``at`` in; ``bounds``: the sample where each
        of the piece's phonemes starts (and the last ends)."""
        self._items = spoken(words, at, bounds)
        self._sent = 0

    def before(self, start: int, end: int, last: bool) -> Timing | None:
        """The items for the chunk ``start`` … ``end`` of the piece's audio, about to be
        yielded: those starting before its end (all that are left, for the ``last``),
        from its first sample; on the last, within its end. None when there are none."""
        items = self._items
        stop = len(items)
        if not last:
            stop = self._sent
            while stop < len(items) and items[stop].start < end:
                stop += 1
        limit = end - start if last else None
        out = []
        for s in items[self._sent : stop]:
            first, final = max(0, s.start - start), max(0, s.end - start)
            if limit is not None:
                first, final = min(first, limit), min(final, limit)
            out.append(Spoken(s.text_start, s.text_end, s.said, first, max(first, final), s.word))
        self._sent = stop
        return Timing(tuple(out)) if out else None
