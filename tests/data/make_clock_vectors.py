"""Writes tests/data/clock_vectors.json: clock exchanges and what ``rtts.broadcast.clock.OffsetFilter``
estimates from them, so that the page's port (static/js/clock.js) is checked against
the very same numbers (tests/system/test_sync_js.py), and the Python filter against
itself when it changes (tests/unit/test_clock.py).

    PYTHONPATH=. python tests/data/make_clock_vectors.py

Each case is a path between a client and a server: the client's clock (seconds,
monotonic, starting at ``LOCAL0``) may run fast by ``ppm``; the server's is Unix time;
each exchange goes out and back with its own delays. The inputs are drawn from a seeded
generator, so running this again writes the same file.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

from rtts.broadcast.clock import OffsetFilter

OUT = Path(__file__).with_name("clock_vectors.json")
LOCAL0 = 5000.0  # the client's clock when the case begins (performance.now() / 1000)
UNIX0 = 1_781_000_000.25  # the server's then
TOLERANCE_S = 1e-6

Delays = Callable[[random.Random, int], tuple[float, float]]  # (out, back) of exchange i, seconds


def case(name: str, about: str, *, seed: int, count: int, every: Callable[[int], float], delays: Delays,
         ppm: float = 0.0, checks_after: list[int], extra: list[list[float]] | None = None,
         step_after: int = 0, step_s: float = 0.0) -> dict:
    """``every(i)``: seconds from exchange i to the next; ``extra``: exchanges added after
    the drawn ones, as they are ([sent, server, recv]); from exchange ``step_after`` on the
    server's clock reads ``step_s`` ahead (a clock stepped by NTP)."""
    rng = random.Random(seed)

    def local(true_s: float) -> float:
        return LOCAL0 + true_s * (1 + ppm * 1e-6)

    samples: list[list[float]] = []
    t = 0.0  # true seconds since the case began
    for i in range(count):
        out, back = delays(rng, i)
        stepped = step_s if step_after and i >= step_after else 0.0
        sent, server, recv = local(t), UNIX0 + t + out + stepped, local(t + out + back)
        samples.append([sent, server, recv])
        t += every(i)
    samples += extra or []
    filt = OffsetFilter()
    checks = []
    for n, (sent, server, recv) in enumerate(samples, 1):
        filt.add(sent, server, recv)
        if n in checks_after:
            # Asked one second after the last exchange came back: how it is used between them.
            at = recv + 1.0
            checks.append({
                "after": n, "at": at, "ready": filt.ready, "samples": filt.samples,
                "estimate": filt.estimate(at), "error": filt.error,
                "true_offset": UNIX0 + (step_s if step_after and n > step_after else 0.0) + (at - LOCAL0) / (1 + ppm * 1e-6) - at,
            })
    return {"name": name, "about": about, "ppm": ppm, "samples": samples, "checks": checks}


def uniform(delay: float, jitter: float) -> Delays:
    return lambda rng, i: (delay + rng.uniform(-jitter, jitter), delay + rng.uniform(-jitter, jitter))


def main() -> None:
    cases = [
        case("symmetric", "20 ms each way, every 2 s: the estimate is the offset exactly",
             seed=1, count=12, every=lambda i: 2.0, delays=lambda rng, i: (0.020, 0.020), checks_after=[1, 4, 5, 12]),
        case("fewer_than_eight", "3 exchanges with different round trips: not ready yet",
             seed=2, count=3, every=lambda i: 0.1, delays=uniform(0.010, 0.004), checks_after=[1, 2, 3]),
        case("one_sided_queueing", "5 ms each way; every other answer waits behind up to 300 ms of audio: "
             "the fastest way back bounds the offset",
             seed=3, count=40, every=lambda i: 2.0,
             delays=lambda rng, i: (0.005, 0.005 + (rng.uniform(0.0, 0.3) if i % 2 else 0.0)),
             checks_after=[5, 8, 16, 32, 40]),
        case("jitter_100ms_20ms", "100 ms each way, each way +-20 ms uniform, every 2 s",
             seed=4, count=150, every=lambda i: 2.0, delays=uniform(0.100, 0.020),
             checks_after=[5, 8, 16, 32, 50, 64, 100, 128, 129, 150]),
        case("drift_100ppm", "the client's clock runs 100 ppm fast, 10 ms each way, every 2 s for 90 s",
             seed=5, count=46, every=lambda i: 2.0, delays=lambda rng, i: (0.010, 0.010), ppm=100.0,
             checks_after=[5, 8, 16, 31, 32, 46]),
        case("burst_then_sparse", "the page's pattern: 8 exchanges 100 ms apart, then one every 2 s; "
             "the client 200 ppm fast; 30 ms each way +-5 ms",
             seed=6, count=60, every=lambda i: 0.1 if i < 7 else 2.0, delays=uniform(0.030, 0.005), ppm=200.0,
             checks_after=[5, 8, 9, 20, 40, 60]),
        case("stepped", "10 ms each way +-2 ms, every second; after 40 s the server's clock is stepped 50 ms "
             "ahead: the exchanges before the step no longer agree and are dropped",
             seed=8, count=70, every=lambda i: 1.0, delays=uniform(0.010, 0.002),
             checks_after=[20, 40, 41, 45, 70], step_after=40, step_s=0.050),
        case("drift_200ppm_jitter", "the page's pattern against a kiosk 200 ppm fast, 100 ms each way +-20 ms: "
             "8 exchanges 100 ms apart, then one a second for 100 s",
             seed=9, count=150, every=lambda i: 0.1 if i < 7 else 1.0, delays=uniform(0.100, 0.020), ppm=200.0,
             checks_after=[8, 20, 40, 64, 80, 108, 128, 150]),
        case("lan_drift", "a LAN, 0.6 ms each way +-0.1 ms, the client 200 ppm fast, every second: the "
             "intervals stop meeting within seconds without a slope",
             seed=10, count=40, every=lambda i: 1.0, delays=uniform(0.0006, 0.0001), ppm=200.0,
             checks_after=[5, 8, 12, 20, 40]),
        case("ties_and_impossible", "two round trips, and an exchange whose "
             "answer came back before it was sent (ignored)",
             seed=7, count=10, every=lambda i: 1.0, delays=lambda rng, i: (0.010, 0.010 if i % 3 else 0.030),
             checks_after=[10, 11, 12],
             extra=[[LOCAL0 + 20.0, UNIX0 + 15.0, LOCAL0 + 19.5], [LOCAL0 + 21.0, UNIX0 + 21.0105, LOCAL0 + 21.02]]),
    ]
    doc = {
        "about": "Clock exchanges and rtts.broadcast.clock.OffsetFilter's results (docs/protocol.md, 'Playing in step'). "
                 "samples: [sent, server, recv] in seconds, sent and recv on the client's clock, server in Unix "
                 "seconds (clock.js takes milliseconds for sent and recv: multiply by 1000). checks: after adding "
                 "the first `after` samples, estimate(at), error and ready; true_offset is what the path makes "
                 "the offset, for information. The filter (rtts/broadcast/clock.py OffsetFilter): keep the last 128 samples; "
                 "ignore one with recv < sent; relative to the latest sample L (ref = L's mid), each sample i "
                 "gives t = mid - ref, low = (server - L.server) - (recv - ref), high = (server - L.server) - "
                 "(sent - ref); if -t of the oldest >= 30 or max(low - 0 t) > min(high - 0 t), the slope b = k * 5e-6 for k in 0, 1, -1, 2, -2 ... "
                 "100, -100 whose width min(high - b t) - max(low - b t) is at least the largest width W less min(0.001, max(W, 0) / 4) (the first in that order), "
                 "else 0; if then max(low - b t) > min(high - b t) and more than one sample is kept, drop the "
                 "oldest and fit again; estimate(at) = (L.server - ref) + (max(low - b t) + min(high - b t))/2 + "
                 "b (at - ref); error = (min(high - b t) - max(low - b t))/2; ready from 5 samples.",
        "tolerance_s": TOLERANCE_S,
        "cases": cases,
    }
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {OUT} ({len(cases)} cases)")


if __name__ == "__main__":
    main()
