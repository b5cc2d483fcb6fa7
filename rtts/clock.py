"""The shared clock announcements are timed on (docs/protocol.md, "Playing in step").

Every instance must read the same time for an announcement's ``play_at`` to mean the
same instant to every kiosk. ``HostClock`` is the host's own clock, which NTP (chrony)
keeps within a millisecond or so of the other instances'; ``BusClock`` follows the Redis
server's clock through ``TIME`` for boxes without NTP.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Protocol

__all__ = ["HostClock", "SharedClock", "host_time"]

# Test-only: offsets this instance's host clock (ms), to make one instance "wrong".
SKEW_ENV = "RTTS_TEST_CLOCK_SKEW_MS"


class SharedClock(Protocol):
    source: str  # "host" | "bus" (ready.clock.source)

    def now(self) -> float:
        """Unix seconds on the clock every instance shares."""
        ...

    @property
    def offset(self) -> float:
        """How far the shared clock is ahead of this host's (seconds; ``rtts_clock_offset_seconds``)."""
        ...


def host_time(environ: Mapping[str, str]) -> Callable[[], float]:
    """This host's clock, Unix seconds: ``time.time`` unless the test skew is set."""
    raw = environ.get(SKEW_ENV, "")
    skew = float(raw) / 1000 if raw else 0.0
    if not skew:
        return time.time
    return lambda: time.time() + skew


class HostClock:
    """The host's own clock: every instance is kept on time by NTP (chrony)."""

    source = "host"

    def __init__(self, local: Callable[[], float] = time.time) -> None:
        self._local = local

    def now(self) -> float:
        return self._local()

    @property
    def offset(self) -> float:
        return self._local() - time.time()
