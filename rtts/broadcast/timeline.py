"""When an announcement is heard: its ``play_at`` (docs/protocol.md, "Playing in step").

Pure. Every kiosk starts an announcement at the same instant, so that instant must be
late enough for the slowest of them to have its audio by then, and each later sample by
its own time: ``play_at = now + lead``. The lead is learnt from how late audio came for
past announcements (``LeadEstimator``), bounded by ``sync_max_lead``: the most this ever
adds before an announcement is heard. Consecutive announcements do not overlap: the next
is heard ``sync_gap`` after the one before ends (``floor``), unless it is high priority,
which cuts what plays. Across instances the first to begin an announcement fixes its
``play_at`` for all (``bus.claim_play_at``); what comes back is checked against what any
instance could have claimed (``claim_bounds``).
"""

from __future__ import annotations

import math
from collections import deque

__all__ = ["LeadEstimator", "claim_bounds", "floor", "propose"]

# The lead before any announcement was measured (seconds): covers a cold model's first
# audio on a small box (~0.5 s for Piper) and a kiosk 100 ms away.
FIRST_LEAD_S = 1.0
# Above the 95th percentile of the lags, times SCALE: covers the way to the kiosk (up to
# ~100 ms one-way, ±20 ms of jitter), its scheduling, and a first audio slower than any of
# the last 32 (another voice, a busy box: with 1.25 and 0.25 s, six kiosks and synthesis on
# two cores joined one announcement 150 ms late in benchmarks/sync.py).
SCALE = 1.5
MARGIN_S = 0.35
HISTORY = 32  # announcements whose lag is remembered
# How far a claim another instance fixed may lie outside what this one can know of it
# (seconds): the instances' clocks (NTP on a LAN, or Redis's through the offset filter:
# milliseconds), an announcement reaching them through pub/sub a little apart (a listener
# behind a busy loop), and the claim's own round trip (channels.CLAIM_TIMEOUT_S at most).
CLAIM_SLACK_S = 2.0
# The instance that claimed first may have taken this many times as long as this one to
# load the announcement's model (a slower host, a colder disk).
LOAD_SLACK = 2.0


class LeadEstimator:
    """How far ahead to set ``play_at``: ``p95(lags) * SCALE + margin`` within the bounds.

    A lag is how late the audio of one announcement came: for each piece of its audio,
    (arrival − begin − audio already delivered), in seconds, the largest over the
    announcement. The first piece gives the time to first audio; later ones catch a
    synthesis slower than real time. ``fixed`` > 0 is a lead set by hand (``sync_lead``).
    """

    def __init__(self, min_lead: float, max_lead: float, fixed: float = 0.0, margin: float = MARGIN_S) -> None:
        self.min_lead = min_lead
        self.max_lead = max_lead
        self.fixed = fixed
        self.margin = margin
        self._lags: deque[float] = deque(maxlen=HISTORY)

    @property
    def lags(self) -> list[float]:
        return list(self._lags)

    def record(self, lag_s: float) -> None:
        if math.isfinite(lag_s):
            self._lags.append(max(0.0, lag_s))

    def lead(self) -> float:
        if self.fixed > 0:
            return self.fixed
        if not self._lags:
            return min(max(FIRST_LEAD_S, self.min_lead), self.max_lead)
        return min(max(_p95(self._lags) * SCALE + self.margin, self.min_lead), self.max_lead)


def _p95(values: deque[float]) -> float:
    """The 95th percentile, interpolated between the two nearest ranks."""
    ordered = sorted(values)
    rank = 0.95 * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def floor(prev_end: float, gap: float, not_before: float | None, high: bool) -> float:
    """The earliest ``play_at``: ``gap`` after the channel's last announcement ends, and not
    before its ``not_before``; none for a high-priority one, which cuts what plays."""
    if high:
        return 0.0
    return max(prev_end + gap, not_before or 0.0)


def propose(now: float, lead: float, floor: float) -> float:
    """This instance's ``play_at``, when no other instance has fixed one."""
    return max(now + lead, floor)


def claim_bounds(since: float, now: float, floor: float, max_lead: float, load_s: float) -> tuple[float, float]:
    """The earliest and latest ``play_at`` an instance could have claimed for an
    announcement this one begins at ``now``; any other value in the bus was not written by
    an instance (one wrong value would otherwise hold the channel, its floor carried
    forward, for as long as it says).

    ``since``: the earliest any instance could have begun it (when it reached this one, its
    ``not_before``, its publisher's time). A claim before ``now`` is right when the first
    instance began it long before this one (this channel was busy): these kiosks join it
    at position. None is later than one lead (at most ``max_lead``) and a model's load
    (``load_s`` here) after ``now`` (the first began it no later), or than ``floor``, this
    instance's: the end of what plays before it, the same announcements at the same agreed
    times on every instance.
    """
    return since - CLAIM_SLACK_S, max(now + max_lead + LOAD_SLACK * load_s, floor) + CLAIM_SLACK_S
