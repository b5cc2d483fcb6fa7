"""How far a PortAudio callback's own time is from the date PortAudio gives its block, and
how steady those dates are: the figures behind `rtts play`'s ``BlockDates``
(rtts/play/outputs.py; docs/history/benchmarks.md, "A player's block dates under the GIL").

An output stream on a private PulseAudio null sink (tests/sinks.py, as the players' tests
use), 10 ms blocks at 48 kHz, in a child process that records, for each callback, the wall
and monotonic clocks on entry and PortAudio's ``currentTime`` and ``outputBufferDacTime``:

- which clock PortAudio dates on (its ``currentTime`` against ``time.time()``);
- **late**: how long after PortAudio's ``currentTime`` the callback ran (entry wall time
  minus ``currentTime``), with nothing else in the process and with one thread spinning in
  pure Python beside it (what the player's receiving thread does to the GIL while an
  announcement arrives). The old dating put each block that much late;
- **dates**: ``outputBufferDacTime`` against the line of the frames played (10 ms a block),
  quiet and with two busy loops on the box's cores.

    python3 benchmarks/device_dates.py            # ~1 min; needs pulseaudio and libportaudio2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))
from latency import cpu_model, probe_ms  # noqa: E402

from tests.sinks import Speakers  # noqa: E402

# The child: an output stream for SECONDS, a pure-Python spinner beside it from the first
# second when asked; the rows after the first second, as JSON on stdout.
_CHILD = r"""
import json, sys, threading, time
import sounddevice as sd
seconds, spin = float(sys.argv[1]), sys.argv[2] == "spin"
rows, stop = [], threading.Event()
def cb(out, n, when, status):
    rows.append((time.time(), time.monotonic(), when.currentTime, when.outputBufferDacTime, n))
    out.fill(0)
def spinner():
    x = 0
    while not stop.is_set():
        for i in range(20000):
            x += i
with sd.OutputStream(samplerate=48000, channels=1, dtype="float32", blocksize=480, latency=0.1, callback=cb):
    time.sleep(1.0)
    first = len(rows)
    if spin:
        threading.Thread(target=spinner, daemon=True).start()
    time.sleep(seconds)
    stop.set()
print(json.dumps(rows[first:]))
"""


def run(speakers: Speakers, seconds: float, spin: bool, busy_loops: int) -> np.ndarray:
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy_loops)]
    try:
        done = subprocess.run([sys.executable, "-c", _CHILD, str(seconds), "spin" if spin else "quiet"],
                              env={**os.environ, **speakers.env(0)}, capture_output=True, text=True,
                              timeout=seconds + 60, check=True)
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    return np.array(json.loads(done.stdout))


def pct(values: np.ndarray) -> str:
    p50, p99 = np.percentile(values, [50, 99])
    return f"{p50:.2f} | {p99:.2f} | {values.max():.2f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="how long each case plays")
    args = ap.parse_args()
    print(f"host: {cpu_model()}; host probe {probe_ms():.0f} ms; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    with Speakers(1) as speakers:
        cases = {"nothing beside it": run(speakers, args.seconds, False, 0),
                 "a Python thread spinning beside it (the GIL)": run(speakers, args.seconds, True, 0),
                 "two busy loops on the box": run(speakers, args.seconds, False, 2)}
    first = next(iter(cases.values()))
    wall_gap = np.median(first[:, 0] - first[:, 2]) * 1000
    mono_gap = np.median(first[:, 1] - first[:, 2])
    print(f"PortAudio's currentTime: {wall_gap:.2f} ms before time.time() on entry (median); "
          f"{mono_gap:.3g} s from time.monotonic()")
    print()
    print("| beside the stream | late p50 (ms) | late p99 | late max | dates off their line p50 (ms) | p99 | max |")
    print("|---|---|---|---|---|---|---|")
    for name, rows in cases.items():
        late = (rows[:, 0] - rows[:, 2]) * 1000
        line = np.cumsum(np.r_[0, rows[:-1, 4]]) / 48000
        off = rows[:, 3] - line
        off = np.abs(off - np.median(off)) * 1000
        print(f"| {name} | {pct(late)} | {pct(off)} |")
    print(f"\n{len(first)} blocks a case; host probe after: {probe_ms():.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
