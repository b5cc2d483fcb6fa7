"""How close rtts.clock.OffsetFilter (and static/js/clock.js, the same filter) comes to the
true offset on simulated paths, against an interval-intersection filter for comparison.

    PYTHONPATH=. python benchmarks/clock_filter.py [--seeds 30]

No network and no timing: each path draws its one-way delays from a seeded generator, an
exchange every 2 s (the kiosk's rate) for 5 minutes, and the estimate is read one second
after each exchange from the 32nd on (how it is used between exchanges). Errors are in ms:
median, 95th percentile and worst over every reading of every seed.

The comparison filter ("intersection") keeps the same 32 exchanges. The other clock read
``server`` between ``sent`` and ``recv``, so the offset lies in [server - recv,
server - sent] for every exchange; the middle of the intersection of those intervals
depends on the fastest way out and the fastest way back separately, not on one exchange
fast both ways, which is what the lowest round trips need. Drift is taken out first with
a slope through the two halves of the window (each half's intersection middle), bounded
as OffsetFilter's.
"""

from __future__ import annotations

import argparse
import random
import statistics
from collections import deque
from collections.abc import Callable

from rtts.clock import OffsetFilter

MAX_SLOPE = 500e-6


class Intersection:
    def __init__(self, window: int = 32) -> None:
        self._samples: deque[tuple[float, float, float]] = deque(maxlen=window)

    def add(self, sent: float, server: float, recv: float) -> None:
        if recv >= sent:
            self._samples.append((sent, server, recv))

    def estimate(self, at: float) -> float:
        samples = list(self._samples)
        slope = 0.0
        half = len(samples) // 2
        if half >= 4:
            (t0, o0), (t1, o1) = _middle(samples[:half], at, 0.0), _middle(samples[half:], at, 0.0)
            if t1 - t0 >= 10.0:
                slope = min(max((o1 - o0) / (t1 - t0), -MAX_SLOPE), MAX_SLOPE)
        return _middle(samples, at, slope)[1]


def _middle(samples: list[tuple[float, float, float]], at: float, slope: float) -> tuple[float, float]:
    """(the samples' mean time, the middle of their intervals' intersection at ``at`` once
    ``slope`` is taken out; with no slope, the middle around their mean time)."""
    low = max(server - recv - slope * (recv - at) for sent, server, recv in samples)
    high = min(server - sent - slope * (sent - at) for sent, server, recv in samples)
    mean_t = sum((sent + recv) / 2 for sent, _, recv in samples) / len(samples)
    return mean_t, (low + high) / 2


Path = Callable[[random.Random], tuple[float, float]]


def paths() -> dict[str, tuple[Path, float]]:
    """name -> (one exchange's (out, back) delays, the client's clock drift in ppm)."""

    def uniform(delay: float, jitter: float) -> Path:
        return lambda rng: (delay + rng.uniform(-jitter, jitter), delay + rng.uniform(-jitter, jitter))

    def queued(delay: float, jitter: float, queue: float) -> Path:
        # Every other answer waits behind up to ``queue`` of audio on its way back.
        return lambda rng: (delay + rng.uniform(-jitter, jitter),
                            delay + rng.uniform(-jitter, jitter) + (rng.uniform(0, queue) if rng.random() < 0.5 else 0))

    return {
        "LAN 1 ms +-0.5 ms, 50 ppm": (uniform(0.001, 0.0005), 50.0),
        "100 ms +-20 ms each way": (uniform(0.100, 0.020), 0.0),
        "100 ms +-20 ms, 200 ppm": (uniform(0.100, 0.020), 200.0),
        "33 ms +-20 ms, 200 ppm": (uniform(0.033, 0.020), 200.0),
        "5 ms, answers behind 300 ms of audio": (queued(0.005, 0.0, 0.3), 0.0),
        "50 ms +-10 ms, behind audio, 100 ppm": (queued(0.050, 0.010, 0.3), 100.0),
    }


def errors(make: Callable[[], object], path: Path, ppm: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    filt = make()
    out: list[float] = []
    t = 0.0
    for n in range(150):
        up, down = path(rng)
        local = lambda true_s: 5000.0 + true_s * (1 + ppm * 1e-6)  # noqa: E731
        sent, recv = local(t), local(t + up + down)
        filt.add(sent, 1.78e9 + t + up, recv)  # type: ignore[attr-defined]
        if n >= 31:
            at = recv + 1.0
            true = 1.78e9 + (at - 5000.0) / (1 + ppm * 1e-6) - at
            out.append(abs(filt.estimate(at) - true) * 1000)  # type: ignore[attr-defined]
        t += 2.0
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=30)
    args = parser.parse_args()
    filters: dict[str, Callable[[], object]] = {"OffsetFilter": OffsetFilter, "intersection": Intersection}
    print(f"{'path':40s} {'filter':13s} {'median':>7s} {'p95':>7s} {'worst':>7s}  (ms)")
    for name, (path, ppm) in paths().items():
        for label, make in filters.items():
            errs = sorted(e for seed in range(args.seeds) for e in errors(make, path, ppm, seed))
            p95 = errs[int(0.95 * (len(errs) - 1))]
            print(f"{name:40s} {label:13s} {statistics.median(errs):7.2f} {p95:7.2f} {errs[-1]:7.2f}")


if __name__ == "__main__":
    main()
