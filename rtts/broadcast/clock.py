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

import numpy as np

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


class Fit(NamedTuple):
    """What the kept exchanges say: the other clock minus ours is between ``low`` and
    ``high`` at our time ``ref`` (the latest exchange's middle), and moves by ``slope``
    seconds per second of ours."""

    ref: float
    base: float  # the latest exchange's ``server - ref``: low and high are relative to it
    low: float
    high: float
    slope: float


class OffsetFilter:
    """How far another clock is ahead of ours, from exchanges timed on ours.

    The other clock read ``server`` somewhere between ``sent`` and ``recv``, so the
    offset lay between ``server - recv`` and ``server - sent``, whatever the two ways
    took. The filter keeps the last ``window`` exchanges and intersects those
    intervals: the middle of the intersection is wrong by half the difference between
    the *fastest* way out and the *fastest* way back seen, not by one exchange's
    asymmetry. This matters because the way back is often slow on one side only (a
    pong behind audio, TCP holding a segment for a late one): NTP's "lowest round
    trip" sample still carries its asymmetry, several ms under ±20 ms of jitter, where
    the intersection's is a fraction of a ms (benchmarks/clock_filter.py).

    A drifting crystal tilts the intervals, so once they span ``SPAN_S`` (or sooner, when
    they no longer meet without one) a slope (in
    steps of ``SLOPE_STEP`` within ``MAX_SLOPE``) is taken out of them: the smallest that
    leaves the intersection within a slack of its widest (``SLOPE_SLACK_S``). Not the widest
    itself: while audio flows, pongs come back late on one side only (TCP holds a
    segment behind a late one), and a tilt that pairs the early, quiet exchanges with the
    late, one-sided ones widens the intersection by a few ms and moves its middle by as
    much; a real drift is soon worth more than the slack. An empty intersection means
    the offset changed (a clock was stepped): the oldest exchanges go until it is not.
    ``error`` is half the intersection's width, a bound, not a guess. The page's
    ``static/js/clock.js`` is the same filter: both give tests/data/clock_vectors.json.
    """

    WINDOW = 128  # two minutes of the page's exchanges: quiet ones outlast an announcement
    SPAN_S = 30.0  # the kept exchanges span this much: follow a slope
    SLOPE_STEP = 5e-6
    MAX_SLOPE = 500e-6  # 500 ppm: past any real crystal's drift
    READY = 5  # exchanges before the estimate is used

    def __init__(self, window: int = WINDOW) -> None:
        self._samples: deque[Sample] = deque(maxlen=window)
        self._fit: Fit | None = None

    def add(self, sent: float, server: float, recv: float) -> None:
        """One exchange; one that cannot be right (a round trip below zero, our clock
        stepped back, or a value that is not finite) is ignored."""
        sample = Sample(sent, server, recv)
        if not all(map(math.isfinite, sample)) or sample.rtt < 0:
            return
        self._samples.append(sample)
        fit = _fit(self._samples, self.SPAN_S, self.SLOPE_STEP, self.MAX_SLOPE)
        while fit.low > fit.high and len(self._samples) > 1:
            self._samples.popleft()
            fit = _fit(self._samples, self.SPAN_S, self.SLOPE_STEP, self.MAX_SLOPE)
        self._fit = fit

    @property
    def samples(self) -> int:
        return len(self._samples)

    @property
    def ready(self) -> bool:
        return len(self._samples) >= self.READY

    @property
    def error(self) -> float:
        """At most how wrong the estimate is, path asymmetry included: half the width of the
        intersection (seconds); infinite before any exchange."""
        fit = self._fit
        return (fit.high - fit.low) / 2 if fit is not None else math.inf

    def estimate(self, at: float) -> float:
        """The other clock minus ours at our time ``at`` (0 before any exchange)."""
        fit = self._fit
        if fit is None:
            return 0.0
        return fit.base + (fit.low + fit.high) / 2 + fit.slope * (at - fit.ref)

    def shared(self, local: float) -> float:
        """Our time ``local`` on the other clock."""
        return local + self.estimate(local)


# A slope must widen the intersection by more than this to be taken: 1 ms, or a quarter
# of its width where it is narrow (a LAN's, where a millisecond is a lot).
SLOPE_SLACK_S = 0.001
SLOPE_SLACK_SHARE = 0.25


def _fit(samples: deque[Sample], span_s: float, step: float, max_slope: float) -> Fit:
    # Everything relative to the latest exchange: a page's offsets are ~1.7e9 s, and the
    # differences are exact where the sums would lose microseconds.
    last = samples[-1]
    ref, base = last.mid, last.server - last.mid
    times = np.array([s.mid - ref for s in samples])
    lows = np.array([(s.server - last.server) - (s.recv - ref) for s in samples])
    highs = np.array([(s.server - last.server) - (s.sent - ref) for s in samples])
    slope = 0.0
    low, high = _bounds(times, lows, highs, np.zeros(1))
    if -times[0] >= span_s or low[0] > high[0]:
        # Long enough to show a drift, or already showing one: narrow intervals (a LAN's)
        # stop meeting within seconds of a fast crystal, long before 30 s. Every slope at
        # once (201 x 128 on the event loop, for BusClock: a fraction of a ms this way).
        slopes = np.array(_steps(round(max_slope / step)), dtype=float) * step
        lo, hi = _bounds(times, lows, highs, slopes)
        widths = hi - lo
        widest = float(widths.max())
        slack = min(SLOPE_SLACK_S, max(widest, 0.0) * SLOPE_SLACK_SHARE)
        pick = int(np.argmax(widths >= widest - slack))  # the first in _steps' order
        slope, low, high = float(slopes[pick]), lo[pick:pick + 1], hi[pick:pick + 1]
    return Fit(ref, base, float(low[0]), float(high[0]), slope)


def _steps(n: int) -> list[int]:
    """0, 1, -1, 2, -2, ... n, -n: the smaller slope first."""
    return [0] + [k for i in range(1, n + 1) for k in (i, -i)]


def _bounds(times: np.ndarray, lows: np.ndarray, highs: np.ndarray, slopes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The intersection at ``ref`` once each of ``slopes`` is taken out of every interval
    (the same IEEE operations as clock.js's loop; max and min are exact in any order)."""
    tilt = slopes[:, None] * times[None, :]
    return (lows[None, :] - tilt).max(axis=1), (highs[None, :] - tilt).min(axis=1)


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
        return 0.0

    def start(self) -> None:
        pass  # nothing to follow: NTP keeps the host's clock

    def stop(self) -> None:
        pass


# How BusClock asks: a burst at start, so that it is ready within a second, then one
# exchange every few seconds, enough to follow a drifting crystal (the filter keeps 64).
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
        local = self._local()
        return self.filter.estimate(local) if self.filter.ready else 0.0

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
