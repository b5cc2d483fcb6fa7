"""The words of a piece that an engine hands out in windows (Piper, Hibari).

An engine that streams inside a piece knows every word's place in the piece's audio
from the one model run (its durations), but not yet where that audio will end: the
last window is trimmed of its trailing silence only once it is made, and a model may
put that silence in the last phoneme's duration (Hibari gives a sentence's last vowel
~0.4 s). So each word goes out just before the chunk its start is in, and from the
chunk the last word starts in, the chunks are held until the last is made (for a
client that asked for words only, and only the end of a piece): the last word then
ends with the audio, or where its sound does when the trim kept a little near-silence
after it (as Kokoro's does), and no sooner: the sound after its phonemes' frames (a
release, a decay) is its own. The audio is the same; only when its end leaves changes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from rtts.engines.base import Spoken, Timing
from rtts.engines.trim import PAD_S
from rtts.g2p.words import Word, spoken

__all__ = ["WindowedWords", "heard"]


def heard(kept: int, trimmed_end: bool, sample_rate: int) -> int:
    """How much of a piece's last chunk of ``kept`` samples is heard: all of it, or, when
    its end was trimmed, all but the near-silence the trim keeps (``PAD_S``)."""
    return max(0, kept - round(PAD_S * sample_rate)) if trimmed_end else kept


class WindowedWords:
    """A piece's words, timed in samples of its whole (untrimmed) audio."""

    def __init__(self, words: Sequence[Word], at: int, bounds: np.ndarray, ends: np.ndarray | None = None) -> None:
        """``words`` of the phonemes the piece is ``at`` in; ``bounds``: the sample where each
        of the piece's phonemes starts (and the last ends); ``ends``, where the one before
        each ends, if not there (``words.spoken``)."""
        self._items = spoken(words, at, bounds, ends)
        self._sent = 0

    def chunks(self, windows: Iterator[tuple[np.ndarray, int, int | None]]) -> Iterator[np.ndarray | Timing]:
        """The audio of ``windows`` (each chunk, where it starts in the piece's audio, and
        for the last how much of it is heard: ``heard``) with the words' ``Timing`` before
        the chunks they start in."""
        held: list[tuple[np.ndarray, int]] = []
        hold_from = self._last_word_start()
        try:
            for audio, start, heard in windows:
                last = heard is not None
                if not last and (held or (hold_from is not None and start + audio.size > hold_from)):
                    held.append((audio, start))
                    continue
                final = None if heard is None else start + heard
                for chunk, at in [*held, (audio, start)]:
                    ends = chunk is audio and last
                    if not chunk.size and not ends:
                        continue  # nothing of it left after trimming: the next chunk's words wait
                    timing = self.before(at, at + chunk.size, ends, final)
                    if timing is not None:
                        yield timing
                    if chunk.size:
                        yield chunk
                held = []
        finally:
            close = getattr(windows, "close", None)
            if close is not None:
                close()  # stopped early: the engine's windows end now, not when collected

    def _last_word_start(self) -> int | None:
        """Where the items of the last written word start (they go out together)."""
        items = self._items
        if not items:
            return None
        i = len(items) - 1
        while i > 0 and items[i].text_start < items[i - 1].text_end:
            i -= 1
        return items[i].start

    def before(self, start: int, end: int, last: bool, final: int | None = None) -> Timing | None:
        """The items for the chunk ``start`` … ``end`` of the piece's audio, about to be
        yielded: those starting before its end and the rest of their written words (all
        that are left, for the ``last``), from its first sample, within ``final`` (where
        what is heard of the piece ends, once known; by default on the last, its end).
        None when there are none."""
        items = self._items
        stop = len(items)
        if not last:
            stop = self._sent
            while stop < len(items) and items[stop].start < end:
                stop += 1
            # The items of one written word ("$23.50" read as five words, "2026" as two) go
            # out together: the session makes them one entry of a words message.
            while 0 < stop < len(items) and items[stop].text_start < items[stop - 1].text_end:
                stop += 1
        if last and final is None:
            final = end
        limit = None if final is None else max(0, final - start)
        out = []
        for i in range(self._sent, stop):
            s = items[i]
            a, b = max(0, s.start - start), max(0, s.end - start)
            if limit is not None:
                # Nothing else is said after the piece's last word: what is heard up to the
                # end is its own (a final consonant's release runs on into the pad after it).
                a, b = min(a, limit), limit if last and i == len(items) - 1 else min(b, limit)
            out.append(Spoken(s.text_start, s.text_end, s.said, a, max(a, b), s.word))
        self._sent = stop
        return Timing(tuple(out)) if out else None
