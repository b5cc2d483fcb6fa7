"""How fast one client may send messages: a token bucket that remembers what it refused.

A client may send ``burst`` messages at once and ``rate`` a second after that. Every
message takes a token; one that finds none is over the limit and dropped unread. The
first of a run over the limit is answered (``rate_limited``); the rest are dropped
without a word, so refusing costs no more than the message did. A refused message
still takes its token, into debt: a client that backs off is soon in credit again (debt
refills at ``rate`` like credit), one that keeps on sending digs deeper, and once it
owes ``burst`` messages it is not slowing down and is closed.

Without sockets or a real clock (tests/unit/test_ratelimit.py): ``Session`` asks it
about each frame before decoding it.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

__all__ = ["MessageRate", "Verdict"]


class Verdict(Enum):
    TAKE = "take"  # within the limit: handle the message
    REFUSE = "refuse"  # the first over the limit: drop it and tell the client
    DROP = "drop"  # over the limit again: drop it, say nothing more
    CLOSE = "close"  # ``burst`` messages over: the client is not slowing down


class MessageRate:
    def __init__(self, rate: float, burst: int, clock: Callable[[], float]) -> None:
        """``rate`` messages a second after a ``burst`` at once; ``clock``: monotonic seconds."""
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be positive and burst at least 1")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._stamp = clock()
        self._over = False  # the last message was over the limit (the client was told)

    def take(self) -> Verdict:
        """One message arrived: what to do with it."""
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + max(0.0, now - self._stamp) * self.rate)
        self._stamp = now
        self._tokens -= 1
        if self._tokens >= 0:
            self._over = False
            return Verdict.TAKE
        if self._tokens <= -self.burst:
            return Verdict.CLOSE
        if self._over:
            return Verdict.DROP
        self._over = True
        return Verdict.REFUSE
