"""The shared clock: the offset filter on its own (and against the vectors the page's port
is checked with), the bus's clock with a fake bus, and the test-only skew."""

from __future__ import annotations

import asyncio
import json
import math
import random
import statistics
from pathlib import Path

import pytest

from rtts.broadcast import clock
from rtts.broadcast.bus import BusDown
from rtts.broadcast.clock import BusClock, HostClock, OffsetFilter

VECTORS = Path(__file__).resolve().parents[1] / "data" / "clock_vectors.json"
UNIX0 = 1_781_000_000.25


def exchanges(*, seconds: float, every: float, out: float, back: float, jitter: float = 0.0, ppm: float = 0.0,
              seed: int = 0, offset: float = UNIX0 - 5000.0):
    """(sent, server, recv, the true offset at recv) of a path; the client's clock starts
    at 5000 s and runs fast by ``ppm``."""
    rng = random.Random(seed)
    t = 0.0
    while t < seconds:
        up, down = out + rng.uniform(-jitter, jitter), back + rng.uniform(-jitter, jitter)
        local = lambda true_s: 5000.0 + true_s * (1 + ppm * 1e-6)  # noqa: E731
        recv = local(t + up + down)
        yield local(t), 5000.0 + offset + t + up, recv, offset + 5000.0 + (recv - 5000.0) / (1 + ppm * 1e-6) - recv
        t += every


def test_the_vectors_are_what_the_filter_gives() -> None:
    """tests/data/clock_vectors.json is the contract with static/js/clock.js: when the filter
    changes on purpose, run tests/data/make_clock_vectors.py again."""
    doc = json.loads(VECTORS.read_text())
    assert len(doc["cases"]) >= 6
    for case in doc["cases"]:
        filt = OffsetFilter()
        checks = {c["after"]: c for c in case["checks"]}
        for n, (sent, server, recv) in enumerate(case["samples"], 1):
            filt.add(sent, server, recv)
            if n in checks:
                want = checks[n]
                assert (filt.ready, filt.samples) == (want["ready"], want["samples"]), (case["name"], n)
                assert filt.estimate(want["at"]) == pytest.approx(want["estimate"], abs=doc["tolerance_s"])
                assert filt.error == pytest.approx(want["error"], abs=doc["tolerance_s"])


def test_a_symmetric_path_gives_the_offset_and_half_the_round_trip_as_bound() -> None:
    filt = OffsetFilter()
    for sent, server, recv, true in exchanges(seconds=8, every=2, out=0.03, back=0.03):
        filt.add(sent, server, recv)
    assert filt.samples == 4 and not filt.ready
    filt.add(5010.0, UNIX0 + 10.03, 5010.06)
    assert filt.ready and filt.error == pytest.approx(0.03)
    assert filt.estimate(5011.0) == pytest.approx(UNIX0 - 5000.0, abs=1e-7)
    assert filt.shared(5011.0) == pytest.approx(UNIX0 + 11.0, abs=1e-7)


def test_answers_that_waited_behind_audio_do_not_count() -> None:
    """One way slow (a pong behind queued audio, a busy loop): the fastest way back bounds
    the offset, however slow the others were."""
    filt = OffsetFilter()
    rng = random.Random(3)
    for i in range(32):
        queued = rng.uniform(0.05, 0.3) if i % 2 else 0.0
        t = 5000.0 + 2 * i
        filt.add(t, UNIX0 + 2 * i + 0.005, t + 0.010 + queued)
    assert filt.estimate(5070.0) == pytest.approx(UNIX0 - 5000.0, abs=1e-6)


def test_under_100_ms_and_20_ms_of_jitter_each_way_it_stays_within_a_few_milliseconds() -> None:
    """Each way 100 ms +-20 ms, drawn independently, one exchange a second (the page's rate)
    for ten minutes: a lone exchange is off by up to 20 ms, the eight lowest round trips
    of 32 (NTP's way) by a median 3 ms and a 95th percentile of 9 ms. The intersection of
    the intervals is off by half the difference of the fastest ways out and back seen:
    measured, a median 0.6 ms, 95th percentile 3.1 ms, worst 8.1 ms."""
    errors = []
    for seed in range(5):
        filt = OffsetFilter()
        for n, (sent, server, recv, true) in enumerate(
            exchanges(seconds=600, every=1, out=0.1, back=0.1, jitter=0.02, seed=seed)
        ):
            filt.add(sent, server, recv)
            if n >= 32:
                errors.append(abs(filt.estimate(recv) - true))
    errors.sort()
    assert statistics.median(errors) <= 0.001
    assert errors[int(0.95 * len(errors))] <= 0.0045
    assert errors[-1] <= 0.012


def test_on_a_lan_with_drift_it_is_within_a_millisecond() -> None:
    """50 ppm tilts the intervals by more than their width within 30 s here: the oldest go
    (measured worst 0.8 ms)."""
    errors = []
    for seed in range(3):
        filt = OffsetFilter()
        for n, (sent, server, recv, true) in enumerate(
            exchanges(seconds=300, every=2, out=0.001, back=0.001, jitter=0.0005, ppm=50, seed=seed)
        ):
            filt.add(sent, server, recv)
            if n >= 5:
                errors.append(abs(filt.estimate(recv) - true))
    assert max(errors) <= 0.001


def test_a_clock_100_ppm_fast_is_followed_within_a_millisecond() -> None:
    filt = OffsetFilter()
    for sent, server, recv, true in exchanges(seconds=62, every=2, out=0.01, back=0.01, ppm=100):
        filt.add(sent, server, recv)
    # 60 s at 100 ppm is 6 ms: the slope follows it; an intersection without one would not.
    at = recv + 2.0
    true_at = UNIX0 + (at - 5000.0) / (1 + 100e-6) - at
    assert abs(filt.estimate(at) - true_at) <= 0.001
    assert abs((true_at - (UNIX0 - 5000.0))) > 0.005


def test_a_slope_past_500_ppm_is_bounded() -> None:
    filt = OffsetFilter()
    for i in range(16):  # the other clock gains 2 ms a second: 2000 ppm, no crystal does that
        filt.add(5000.0 + 2 * i, 100.0 + 2 * i * 1.002 + 0.05, 5000.0 + 2 * i + 0.1)
    slope = filt.estimate(6000.0) - filt.estimate(5000.0)
    # Within the slack of the widest, at the bound: the smallest slope that is (not 2000 ppm).
    assert 1000 * 400e-6 <= slope <= 1000 * 500e-6


def test_a_stepped_clock_is_followed_at_once() -> None:
    """The other clock jumps 50 ms (NTP stepped it): the exchanges before no longer agree
    with the new one, and go."""
    filt = OffsetFilter()
    for sent, server, recv, true in exchanges(seconds=40, every=1, out=0.01, back=0.01):
        filt.add(sent, server, recv)
    filt.add(5040.0, UNIX0 + 40.01 + 0.05, 5040.02)
    assert filt.samples == 1
    assert filt.estimate(5041.0) == pytest.approx(UNIX0 - 5000.0 + 0.05, abs=1e-6)


def test_impossible_exchanges_are_ignored() -> None:
    filt = OffsetFilter()
    filt.add(10.0, 5.0, 9.0)  # back before it was sent: our clock stepped
    filt.add(10.0, math.nan, 10.1)
    assert filt.samples == 0 and filt.estimate(11.0) == 0.0 and filt.error == math.inf


def test_the_test_skew_moves_this_hosts_clock() -> None:
    skewed = HostClock(clock.host_time({clock.SKEW_ENV: "30"}))
    assert skewed.now() - clock.time.time() == pytest.approx(0.030, abs=0.002)
    assert skewed.offset == 0.0  # the shared clock is the host's, however wrong
    assert clock.host_time({}) is clock.time.time


class FakeRedis:
    """``TIME`` from a server whose clock is ``ahead`` of ours, answering after ``delay``."""

    def __init__(self, local, ahead: float, delay: float = 0.001) -> None:  # type: ignore[no-untyped-def]
        self.local, self.ahead, self.delay = local, ahead, delay
        self.down = False
        self.asked = 0

    async def server_time(self) -> float:
        self.asked += 1
        if self.down:
            raise BusDown("Redis: connection refused")
        await asyncio.sleep(self.delay / 2)
        now = self.local() + self.ahead
        await asyncio.sleep(self.delay / 2)
        return now


async def test_the_bus_clock_follows_redis_burst_first_and_survives_redis_going_away(caplog) -> None:  # type: ignore[no-untyped-def]
    import time

    skew = clock.host_time({clock.SKEW_ENV: "-40"})  # this host is 40 ms slow
    redis = FakeRedis(time.time, ahead=0.0)
    bus_clock = BusClock(redis.server_time, skew)
    assert bus_clock.now() == pytest.approx(time.time() - 0.040, abs=0.002)  # not ready: the host's
    bus_clock.start()
    try:
        for _ in range(100):
            await asyncio.sleep(0.01)
            if bus_clock.ready:
                break
        assert bus_clock.ready and redis.asked >= 5  # the burst: ready well within a second
        assert bus_clock.now() == pytest.approx(time.time(), abs=0.002)
        assert bus_clock.offset == pytest.approx(0.040, abs=0.002)  # Redis is 40 ms ahead of this host
        redis.down = True
        assert not await bus_clock.ask() and not await bus_clock.ask()
        assert bus_clock.failures == 2
        assert sum("did not answer" in r.message for r in caplog.records) == 1  # said once while it lasts
        assert bus_clock.now() == pytest.approx(time.time(), abs=0.002)  # holds its estimate
        redis.down = False
        assert await bus_clock.ask()
    finally:
        bus_clock.stop()


async def test_the_bus_clock_asks_again_after_a_bug() -> None:
    calls = []

    async def sleep(seconds: float) -> None:
        calls.append(seconds)
        if len(calls) == 3:
            raise RuntimeError("a bug")
        await asyncio.sleep(0)

    async def server_time() -> float:
        return 1.0

    bus_clock = BusClock(server_time, lambda: 0.5, sleep=sleep)
    clock.EVERY_S, every = 0.01, clock.EVERY_S
    try:
        bus_clock.start()
        await asyncio.sleep(0.1)
        assert bus_clock.failures == 1 and len(calls) > 3  # failed once, then started again
    finally:
        clock.EVERY_S = every
        bus_clock.stop()
