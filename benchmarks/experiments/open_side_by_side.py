#!/usr/bin/env python3
"""Kokoro's predictor and teacher decoder opened in turn and side by side: time and memory.

    python3 benchmarks/experiments/open_side_by_side.py [--runs 3] [--cache-dir DIR]

Each measurement is a fresh process with the inference process's allocator settings
(``client.CHILD_MALLOC``), over the optimized copies a server keeps in its cache (run the
server once first). It prints the time to open both, the process's peak RSS, and the
anonymous memory at its peak and held afterwards: what a load that opens the two at once
(``open_beside_predictor.diff``, beside this file; not kept: docs/benchmarks.md, "Wake
after the idle unload") gains and costs.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from memory_parts import MB, AnonPeak  # noqa: E402


def measure(mode: str, cache_dir: Path) -> str:
    from rtts.engines.kokoro import KokoroPack, assemble_model
    from rtts.engines.kokoro_cut import cached_kokoro_cut
    from rtts.host.sessions import open_session
    from rtts.native import snake_library

    library, _ = snake_library(cache_dir)
    predictor, decoder, _ = cached_kokoro_cut(assemble_model(KokoroPack.find(), cache_dir), cache_dir, library is not None)
    from rtts.host.memory import anonymous_bytes

    anon = AnonPeak(os.getpid())
    start = time.perf_counter()
    if mode == "in turn":
        open_session(predictor, 2, "predictor", cache_dir)
        open_session(decoder, 2, "decoder", cache_dir, library)
    else:
        beside = threading.Thread(target=open_session, args=(decoder, 2, "decoder", cache_dir, library))
        beside.start()
        open_session(predictor, 2, "predictor", cache_dir)
        beside.join()
    took = time.perf_counter() - start
    peak = anon.stop()
    rss_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return (f"{mode}: {took:.3f} s, peak RSS {rss_peak:.0f} MB, anonymous: peak +{(peak - anon.before) / MB:.0f} MB,"
            f" held +{(anonymous_bytes() - anon.before) / MB:.0f} MB")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "rtts")
    p.add_argument("--one", help=argparse.SUPPRESS)  # a single measurement, in this process
    args = p.parse_args()
    if args.one:
        print(measure(args.one, args.cache_dir), flush=True)
        return 0
    from rtts.host.client import CHILD_MALLOC

    import latency

    print(f"CPU: {latency.cpu_model()}; host probe {latency.probe_ms():.0f} ms", flush=True)
    for _ in range(args.runs):
        for mode in ("in turn", "side by side"):
            subprocess.run([sys.executable, __file__, "--one", mode, "--cache-dir", str(args.cache_dir)],
                           env={**os.environ, **CHILD_MALLOC}, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
