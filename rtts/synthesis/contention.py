"""How much of the time streams waited for room the inference thread spent idle (issue 32).

A stream past ``--admission-max-load`` waits for room. That wait is worth its cost only
if the thread is busy meanwhile: a bound that holds streams back while the thread has
nothing to run wastes the box, which is what the issue's "total RTF of the admitted
streams ≥ 0.8 of the cores" guards against. The worker marks the two states as they
change (a stream waiting or none; the thread idle or on work, a model load included) and
this keeps two sums of time: while at least one stream waited, and of that, while the
thread was idle. ``/metrics`` exports both (``rtts_contended_seconds``,
``rtts_contended_idle_seconds``) and ``benchmarks/listeners.py`` prints their share.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Contention"]


@dataclass
class Contention:
    """Running sums, in seconds of a monotonic clock, marked by ``note``."""

    waited_s: float = 0.0  # at least one stream waited for room
    idle_s: float = 0.0  # of that, the thread had nothing to run
    _at: float | None = None  # the last mark
    _waiting: bool = False
    _idle: bool = False

    def note(self, now: float, *, waiting: bool | None = None, idle: bool | None = None) -> None:
        """The state from ``now`` on (a state not given stays as it was); the time since the
        last mark is added under the state it had."""
        self._add(now)
        if waiting is not None:
            self._waiting = waiting
        if idle is not None:
            self._idle = idle

    def totals(self, now: float) -> tuple[float, float]:
        """``(waited_s, idle_s)`` up to ``now``, the state since the last mark included."""
        self._add(now)
        return self.waited_s, self.idle_s

    def _add(self, now: float) -> None:
        if self._at is not None and now <= self._at:
            return  # a clock read before the last mark: nothing to add, and no mark moved back
        if self._at is not None and self._waiting:
            self.waited_s += now - self._at
            if self._idle:
                self.idle_s += now - self._at
        self._at = now
