"""The load admission lets streams in under, as this box proves it (issue 32).

``--admission-max-load`` is a bound on the summed real-time factors of the streams on the
inference thread, set from measurements on the boxes we have. A box can prove it too high:
a slower one, a busier one, voices whose runs cost more than their estimates say, or an
operator who raised it. The server sees that itself: a frame sent after the audio before
it ran out (``Session._count_late``, ``end.stats.underruns``). When a stream underruns
while it shares the thread, the bound drops below the load the thread carried then, and
returns to the configured one at RECOVER_PER_S: streams that would have gone in together
wait for room instead (``start.queued``, told when) until the box has had time to show
that its state was passing. A stream alone on the thread never lowers it: no admission
made that one late.

Measured with four Mandarin teacher streams started together under
``--admission-max-load 0.95`` (docs/benchmarks.md, "The server's own count").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["AdmissionBound"]

# How far below the load an underrun happened at the bound goes. With four Mandarin
# teacher streams (RTF ~0.23 each) let in together under a bound of 0.95, 0.9 of 0.93 let
# all four in again as their RTFs wandered, and 0.8 held the fourth back: over 6 rounds of
# four (after the first, whose underruns lower it), 6 of 24 underran at 0.8 against 7 of
# 24 at 0.9 by `speak`, 1 against 5 by `append` (docs/benchmarks.md, "The server's own count").
DROP = 0.8
# How fast it returns to the configured bound (load a second): 0.06 a minute, so a drop
# of a Mandarin teacher stream's RTF is made good in about four minutes.
RECOVER_PER_S = 0.001
# The lowest it goes, as a share of the configured bound.
FLOOR = 0.5


@dataclass
class AdmissionBound:
    configured: float  # --admission-max-load
    clock: Callable[[], float]  # monotonic seconds
    _low: float | None = field(default=None, init=False)  # the bound after the last drop
    _at: float = field(default=0.0, init=False)  # when it dropped

    def now(self) -> float:
        """The bound admission uses now."""
        if self._low is None:
            return self.configured
        bound = self._low + (self.clock() - self._at) * RECOVER_PER_S
        if bound >= self.configured:
            self._low = None
            return self.configured
        return bound

    def underran(self, load: float, others: int) -> None:
        """A stream underran while the thread carried it and ``others`` streams more at
        ``load`` (their real-time factors summed)."""
        if others < 1:
            return
        lower = max(self.configured * FLOOR, load * DROP)
        if lower < self.now():
            self._low, self._at = lower, self.clock()

    @property
    def lowered(self) -> bool:
        return self.now() < self.configured
