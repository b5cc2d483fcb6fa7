"""How close rtts.broadcast.clock.OffsetFilter (and static/js/clock.js, the same filter) comes to the
true offset on simulated paths, against NTP's lowest-round-trip filter for comparison.

    PYTHONPATH=. python benchmarks/clock_filter.py [--seeds 30]

No network and no timing: each path draws its one-way delays from a seeded generator;
the exchanges follow the page's pattern (8 exchanges 100 ms apart, then one a second)
for 5 minutes, and the estimate is read half a second after each exchange from the 8th
on (how it is used between exchanges). Errors are in ms: median, 95th percentile and
worst over every reading of every seed.

The comparison ("lowest rtt") is what the first version of rtts.broadcast.clock did, after NTP:
of the last 32 exchanges the 8 with the lowest round trip, their median offset, or a
least-squares line through them once they span 10 s. Its error is the asymmetry left
in those 8; the intersection's is half the difference between the fastest way out and
the fastest way back seen, a fraction of it.
"""

from __future__ import annotations

import argparse
import random
import statistics
from collections import deque
from collections.abc import Callable

from rtts.broadcast.clock import OffsetFilter

MAX_SLOPE = 500e-6


class LowestRtt:
    def __init__(self, window: int = 32, best: int = 8) -> None:
        self._samples: deque[tuple[float, float, float]] = deque(maxlen=window)
        self._best = best

    def add(self, sent: float, server: float, recv: float) -> None:
        if recv >= sent:
            self._samples.append((sent, server, recv))

    def estimate(self, at: float) -> float:
        chosen = sorted(self._samples, key=lambda s: s[2] - s[0])[: self._best]
        mids = [(sent + recv) / 2 for sent, _, recv in chosen]
        offsets = [server - mid for (_, server, _), mid in zip(chosen, mids)]
        if max(mids) - min(mids) < 10.0:
            return statistics.median(offsets)
        mean_mid, mean_offset = statistics.fmean(mids), statistics.fmean(offsets)
        sxx = sum((x - mean_mid) ** 2 for x in mids)
        sxy = sum((x - mean_mid) * (y - mean_offset) for x, y in zip(mids, offsets))
        slope = min(max(sxy / sxx, -MAX_SLOPE), MAX_SLOPE)
        return mean_offset + slope * (at - mean_mid)


Path = Callable[[random.Random], tuple[float, float]]


def paths() -> dict[str, tuple[Path, float]]:
    """name -> (one exchange's (out, back) delays, the client's clock drift in ppm)."""

    def uniform(delay: float, jitter: float) -> Path:
        return lambda rng: (delay + rng.uniform(-jitter, jitter), delay + rng.uniform(-jitter, jitter))

    def queued(delay: float, jitter: float, queue: float) -> Path:
        # Every other answer waits behind up to ``queue`` of audio on its way back.
        return lambda rng: (delay + rng.uniform(-jitter, jitter),
                            delay + rng.uniform(-jitter, jitter) + (rng.uniform(0, queue) if rng.random() < 0.5 else 0))

    def in_order(delay: float, jitter: float) -> Path:
        # After 48 quiet exchanges, announcements of 90 s every two minutes: while one plays
        # the way back carries audio, and TCP delivers in order, so a pong waits for the
        # latest of the segments before it (the most jittered of ~5).
        count = [0]

        def draw(rng: random.Random) -> tuple[float, float]:
            count[0] += 1
            playing = count[0] > 48 and (count[0] - 48) % 120 < 90
            back = [rng.uniform(-jitter, jitter) for _ in range(5 if playing else 1)]
            return delay + rng.uniform(-jitter, jitter), delay + max(back)

        return draw

    return {
        "LAN 1 ms +-0.5 ms, 50 ppm": (uniform(0.001, 0.0005), 50.0),
        "100 ms +-20 ms each way": (uniform(0.100, 0.020), 0.0),
        "100 ms +-20 ms, 200 ppm": (uniform(0.100, 0.020), 200.0),
        "33 ms +-20 ms, 200 ppm": (uniform(0.033, 0.020), 200.0),
        "5 ms, answers behind 300 ms of audio": (queued(0.005, 0.0, 0.3), 0.0),
        "50 ms +-10 ms, behind audio, 100 ppm": (queued(0.050, 0.010, 0.3), 100.0),
        "100 ms +-20 ms, 90 s announcements": (in_order(0.100, 0.020), 0.0),
        "the same, 50 ppm": (in_order(0.100, 0.020), 50.0),
    }


def errors(make: Callable[[], object], path: Path, ppm: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    filt = make()
    out: list[float] = []
    t = 0.0
    for n in range(300):
        up, down = path(rng)
        local = lambda true_s: 5000.0 + true_s * (1 + ppm * 1e-6)  # noqa: E731
        sent, recv = local(t), local(t + up + down)
        filt.add(sent, 1.78e9 + t + up, recv)  # type: ignore[attr-defined]
        if n >= 7:
            at = recv + 0.5
            true = 1.78e9 + (at - 5000.0) / (1 + ppm * 1e-6) - at
            out.append(abs(filt.estimate(at) - true) * 1000)  # type: ignore[attr-defined]
        t += 0.1 if n < 7 else 1.0
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=30)
    args = parser.parse_args()
    filters: dict[str, Callable[[], object]] = {"OffsetFilter": OffsetFilter, "lowest rtt": LowestRtt}
    print(f"{'path':40s} {'filter':13s} {'median':>7s} {'p95':>7s} {'worst':>7s}  (ms)")
    for name in paths():
        for label, make in filters.items():
            path, ppm = paths()[name]  # a fresh path: some count their exchanges
            errs = sorted(e for seed in range(args.seeds) for e in errors(make, path, ppm, seed))
            p95 = errs[int(0.95 * (len(errs) - 1))]
            print(f"{name:40s} {label:13s} {statistics.median(errs):7.2f} {p95:7.2f} {errs[-1]:7.2f}")


if __name__ == "__main__":
    main()
