"""Four Mandarin listeners at once, and the Kokoro runs the thread made for them (issue 32).

    python3 benchmarks/experiments/burst_runs.py [--max-load 0.95] [--rounds 3]

Starts a server at ``--admission-max-load`` (0.95 lets four teacher streams in together;
the default 0.7 lets three), with debug logging, and plays ``--rounds`` rounds of four
listeners sending the Mandarin announcement of ``listeners.py`` at once. Prints each
listener's first audio, whether it was held back for room, and its gaps (audio heard
before each, its length); then the Kokoro runs of the rounds from the server's log:
when each ended, its phonemes and its compute; and, for the short runs (at most
SHORT phonemes) and the rest, how many and their compute a second of audio (at Kokoro's
prior AUDIO_S_PER_TOKEN a phoneme). Not a benchmark of record (one server, a few rounds):
a look at how long the runs are while four streams start together.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import latency
import listeners

from rtts.engines.kokoro import AUDIO_S_PER_TOKEN

SHORT = 12  # phonemes: a run paced to little audio in hand (a quick start's is 8-16)
RUN = re.compile(r"^\S+ (\S+) DEBUG rtts\.engines\.kokoro: kokoro zh run: (\d+) phonemes in ([\d.]+) s")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--max-load", default="0.95")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    log = Path(tempfile.mkdtemp(prefix="rtts-burst-")) / "server.log"
    print(f"host: {latency.cpu_model()}, probe {latency.probe_ms():.0f} ms", flush=True)
    server = latency.ServerProcess(600, log, "--log-level", "debug", f"--admission-max-load={args.max_load}")
    try:
        asyncio.run(listeners.round_of(server, "zh", 1))  # the voice and front end loaded
        began = time.strftime("%H:%M:%S", time.localtime())
        for r in range(args.rounds):
            for i, x in enumerate(asyncio.run(listeners.round_of(server, "zh", 4))):
                gaps = ", ".join(f"{at:.2f}+{gap:.2f}" for at, gap in x.stream.gaps) or "none"
                print(f"round {r} listener {i}: first audio {x.stream.ttfa:.3f} s, queued {x.queued}, gaps {gaps}")
            time.sleep(0.3)
    finally:
        server.stop()
    print("Kokoro runs (ended at, phonemes, compute s):")
    runs = [(m.group(1), int(m.group(2)), float(m.group(3)))
            for m in map(RUN.match, log.read_text().splitlines()) if m and m.group(1) >= began]
    for at, phonemes, compute in runs:
        print(f"  {at} {phonemes:>4} {compute:.3f}")
    short = [r for r in runs if r[1] <= SHORT]
    for name, part in ((f"runs of at most {SHORT} phonemes", short), ("longer runs", [r for r in runs if r[1] > SHORT])):
        if part:
            per_s = sum(r[2] for r in part) / (sum(r[1] for r in part) * AUDIO_S_PER_TOKEN)
            print(f"{name}: {len(part)} of {len(runs)}, {per_s:.2f} s of compute a second of audio")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
