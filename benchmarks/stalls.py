"""A host whose CPUs are held up now and then, as a busy VM host's are (steal time) or a
box with a real-time job: on every core, at random moments (on average every ``every_s``),
a real-time busy loop takes the core for ``lo_ms``-``hi_ms``, so nothing else on it runs,
Chromium's audio thread included. What a kiosk on a loaded box meets; not what a CPU-bound
job beside it does (Linux's scheduler keeps the audio thread on time beside a plain busy
loop: docs/benchmarks.md, "Kiosks on a box held up").

Needs the right to run SCHED_FIFO (root, or CAP_SYS_NICE); the kernel's real-time
throttling (95 % of each second) keeps a runaway loop from locking the box.

    python benchmarks/stalls.py 2 10 50 -- COMMAND...   # runs COMMAND on such a host
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager


def hold(core: int, every_s: float, lo_ms: float, hi_ms: float) -> None:
    """Forever: on ``core``, sleep ~every_s (0.3-1.7x), then spin lo_ms-hi_ms at real-time priority."""
    os.sched_setaffinity(0, {core})
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(50))
    rng = random.Random(core)
    while True:
        time.sleep(rng.uniform(0.3 * every_s, 1.7 * every_s))
        end = time.perf_counter() + rng.uniform(lo_ms, hi_ms) / 1000
        while time.perf_counter() < end:
            pass


@contextmanager
def stalls(every_s: float, lo_ms: float, hi_ms: float) -> Iterator[None]:
    """One holder process per core for the duration of the block."""
    procs = [subprocess.Popen([sys.executable, __file__, "--hold", str(core), str(every_s), str(lo_ms), str(hi_ms)])
             for core in sorted(os.sched_getaffinity(0))]
    try:
        time.sleep(0.2)
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError("the stall holder could not start (SCHED_FIFO needs root or CAP_SYS_NICE)")
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def main(argv: list[str]) -> int:
    if argv[:1] == ["--hold"]:
        hold(int(argv[1]), float(argv[2]), float(argv[3]), float(argv[4]))
        return 0
    if len(argv) < 5 or argv[3] != "--":
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    with stalls(float(argv[0]), float(argv[1]), float(argv[2])):
        return subprocess.call(argv[4:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
