"""How much text an ``append`` stream comes to, as this server has seen them (issue 32).

A stream waiting for room is told when its first audio comes by what the streams ahead
of it still have to say (``Job.rest_chars``). A stream fed by ``append`` (an LLM's answer)
has said little of it when the next one asks: counted by its text so far, the streams
ahead looked nearly done, and a held-back ``append`` stream was told its first audio
4.4 s early with four Mandarin listeners at once (docs/benchmarks.md, "The other ways
in"). Its length is not known until its ``flush``; the length the last such streams came
to is the best guess there is, and what a server's clients feed it (one assistant's
answers) is much alike from one to the next. So an open stream counts as going on to
that length, and never as less than it has already sent.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

__all__ = ["AppendLengths"]

# How many of the last ``append`` streams the guess is made of: enough that one long or
# short answer does not swing it, few enough to follow a change of what is fed.
KEEP = 16


@dataclass
class AppendLengths:
    _recent: deque[int] = field(default_factory=lambda: deque(maxlen=KEEP), init=False)

    def ended(self, chars: int) -> None:
        """An ``append`` stream was flushed after ``chars`` characters of text."""
        self._recent.append(chars)

    def still_to_come(self, sent: int) -> int:
        """Characters an open ``append`` stream that has sent ``sent`` is expected to send
        yet: what the last ones came to (their median) less what it sent; 0 before any
        ended, and for one already past the guess."""
        if not self._recent:
            return 0
        return max(0, round(statistics.median(self._recent)) - sent)
