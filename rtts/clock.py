"""The shared clock announcements are timed on (docs/protocol.md, "Playing in step").

Every instance must read the same time for an announcement's ``play_at`` to mean the
same instant to every kiosk. ``HostClock`` is the host's own clock, which NTP (chrony)
keeps within a millisecond or so of the other instances'; ``BusClock`` follows the Redis
server's clock through ``TIME`` for boxes without NTP.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import NamedTuple, Protocol

log = logging.getLogger(__name__)

__all__ = ["BusClock", "HostClock", "OffsetFilter", "SharedClock", "host_time", "make_clock"]

# Test-only: offsets this instance's host clock (ms), to make one instance "wrong".
SKEW_ENV = "RTTS_TEST_CLOCK_SKEW_MS"


class Sample(NamedTuple):
    """One exchange: ``sent`` and ``recv`` on the asker's own clock, ``server`` on the
    clock it asks, all in seconds."""

    sent: float
    server: float
    recv: float

    @property
    def rtt(self) -> float:
        return self.recv - self.sent

    @property
    def mid(self) -> float:
        return (self.sent + self.recv) / 2

    @property
    def offset(self) -> float:
        return self.server - self.mid


class OffsetFilter:
    """How far another clock is ahead of ours, from exchanges timed on ours (NTP's way).

    An exchange says the other clock read ``server`` at about the middle of the round
    trip; its error is at most half the round trip, and is large exactly when one way
    was slow (a pong behind audio in a queue, a busy loop). So only the ``best``
    exchanges with the lowest round trip among the last ``window`` count: their median
    offset, or, once they span ``SPAN_S``, a line through them, so that a clock that
    runs fast or slow (a drifting crystal) is followed between exchanges; its slope is
    bounded by ``MAX_SLOPE``. The page's ``static/js/clock.js`` is the same filter: both
    give the results in tests/data/clock_vectors.json.
    """

    SPAN_S = 10.0  # the chosen exchanges span this much: fit a line, not a median
    MAX_SLOPE = 500e-6  # 500 ppm: past any real crystal's drift
    READY = 5  # exchanges before the estimate is used

    def __init__(self, window: int = 32, best: int = 8) -> None:
        self._samples: deque[Sample] = deque(maxlen=window)
        self._best = best
        self._chosen: list[Sample] = []

    def add(self, sent: float, server: float, recv: float) -> None:
        """One exchange; one that cannot be right (a round trip below zero, our clock
        stepped back, or a value that is not finite) is ignored."""
        sample = Sample(sent, server, recv)
        if not all(map(math.isfinite, sample)) or sample.rtt < 0:
            return
        self._samples.append(sample)
        # Lowest round trip first; of equal ones the earlier (sorted is stable).
        self._chosen = sorted(self._samples, key=lambda s: s.rtt)[: self._best]

    @property
    def samples(self) -> int:
        return len(self._samples)

    @property
    def ready(self) -> bool:
        return len(self._samples) >= self.READY

    @property
    def error(self) -> float:
        """At most how wrong the estimate can be from path asymmetry: half the lowest round
        trip (seconds); infinite before any exchange."""
        return min(s.rtt for s in self._chosen) / 2 if self._chosen else math.inf

    def estimate(self, at: float) -> float:
        """The other clock minus ours at our time ``at`` (0 before any exchange)."""
        chosen = self._chosen
        if not chosen:
            return 0.0
        # Offsets from the best exchange's, and times from its: a page's offsets are ~1.7e9 s,
        # and a sum of eight of them would lose microseconds (the differences are exact).
        best = chosen[0]
        offsets = [s.offset - best.offset for s in chosen]
        mids = [s.mid - best.mid for s in chosen]
        if max(mids) - min(mids) < self.SPAN_S:
            return best.offset + _median(offsets)
        mean_mid, mean_offset = _mean(mids), _mean(offsets)
        sxx = sum((x - mean_mid) ** 2 for x in mids)
        sxy = sum((x - mean_mid) * (y - mean_offset) for x, y in zip(mids, offsets))
        slope = min(max(sxy / sxx, -self.MAX_SLOPE), self.MAX_SLOPE)
        return best.offset + mean_offset + slope * (at - best.mid - mean_mid)

    def shared(self, local: float) -> float:
        """Our time ``local`` on the other clock."""
        return local + self.estimate(local)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    half = len(ordered) // 2
    return ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2


class SharedClock(Protocol):
    source: str  # "host" | "bus" (ready.clock.source)

    def now(self) -> float:
        """Unix seconds on the clock every instance shares."""
        ...

    @property
    def offset(self) -> float:
        """How far the shared clock is ahead of this host's (seconds; ``rtts_clock_offset_seconds``)."""
        ...

    def start(self) -> None:
        """Begin following the shared clock (on the running event loop)."""

    def stop(self) -> None: ...


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

    def start(self) -> None:
        pass  # nothing to follow: NTP keeps the host's clock

    def stop(self) -> None:
        pass


# How BusClock asks: a burst at start, so that it is ready within a second, then one
# exchange every few seconds, enough to follow a drifting crystal (the filter keeps 32).
BURST = 8
BURST_GAP_S = 0.05
EVERY_S = 2.0
ASK_TIMEOUT_S = 1.0


class BusClock:
    """The Redis server's clock (``TIME``), for instances whose hosts have no NTP.

    Each instance times its own exchanges with Redis and keeps the offset of Redis's
    clock to its own in an ``OffsetFilter``, so every instance reads the same time up to
    half the asymmetry of its path to Redis (well under a millisecond on a LAN). Until
    the filter is ready (a few exchanges, or while Redis cannot be reached at start)
    this is the host's clock, as ``HostClock``. The asking task never ends on its own:
    every failure is logged (once while it lasts) and counted (``failures``).
    """

    source = "bus"

    def __init__(
        self,
        server_time: Callable[[], Awaitable[float]],
        local: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._server_time = server_time
        self._local = local
        self._sleep = sleep
        self.filter = OffsetFilter()
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self.failures = 0  # exchanges that got no answer
        self._failing = False

    def now(self) -> float:
        local = self._local()
        return local + self.filter.estimate(local) if self.filter.ready else local

    @property
    def offset(self) -> float:
        return self.now() - time.time()

    @property
    def ready(self) -> bool:
        return self.filter.ready

    async def ask(self) -> bool:
        """One exchange with the bus; False when it got no answer (counted, logged once)."""
        sent = self._local()
        try:
            server = await asyncio.wait_for(self._server_time(), ASK_TIMEOUT_S)
        except Exception as exc:  # BusDown, a timeout, or a bug: said, never the end of asking
            self.failures += 1
            if not self._failing:
                self._failing = True
                log.warning("clock: the bus's clock did not answer (%s); the shared clock holds its last estimate",
                            exc if str(exc) else type(exc).__name__)
            return False
        recv = self._local()
        if self._failing:
            self._failing = False
            log.info("clock: the bus's clock answers again")
        self.filter.add(sent, server, recv)
        return True

    async def run(self) -> None:
        """Ask for ever: a burst, then every ``EVERY_S``; a burst again after a gap."""
        while True:
            for _ in range(BURST):
                if not await self.ask():
                    break
                await self._sleep(BURST_GAP_S)
            while await self.ask():
                await self._sleep(EVERY_S)
            await self._sleep(EVERY_S)

    def start(self) -> None:
        self._stopped = False
        self._task = asyncio.get_running_loop().create_task(self.run(), name="rtts-clock")
        self._task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or self._stopped:
            return
        # run() survives every failure of an exchange: only a bug in it ends up here. Said,
        # and asked again, so the shared clock never quietly stops following.
        self.failures += 1
        log.error("clock: following the bus's clock failed; again in %g s", EVERY_S, exc_info=task.exception())
        asyncio.get_running_loop().call_later(EVERY_S, self._restart)

    def _restart(self) -> None:
        if not self._stopped:
            self.start()

    def stop(self) -> None:
        self._stopped = True
        if self._task is not None:
            self._task.cancel()


class _TimedBus(Protocol):
    async def server_time(self) -> float: ...


def make_clock(source: str, bus: _TimedBus, environ: Mapping[str, str]) -> SharedClock:
    """The shared clock ``--shared-clock`` names, over this host's (``host_time``)."""
    local = host_time(environ)
    if source == "bus":
        return BusClock(bus.server_time, local)
    return HostClock(local)
