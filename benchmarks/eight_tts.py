#!/usr/bin/env python3
"""Eight `/tts` requests of one Mandarin sentence at once (issue 31's target, the test
CosyVoice-300M Lite's deployment reports use for "8 concurrent users").

    python3 benchmarks/eight_tts.py [--rounds 3] [--n 8] [--generators teacher,student]

This checkout is served once per Kokoro generator (``rtts serve --generator G
--phrase-cache-mb 0``, latency.ServerProcess), both at once and warmed, and the rounds
take turns between them so both see the same host minutes. In each round a server gets
one request alone, then ``--n`` at the same instant, each from its own thread: GET
``/tts?text=…`` with Chinese text and no voice named (the path users take). For each
request: the time to its first body byte and to its whole WAV. Printed per generator: the
lone request's whole time, and of the ``--n``: the first byte p50 and the median and last
whole times, each the median over the rounds; with the CPU model and the host probe.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import latency  # noqa: E402

# 25 characters (the target asks for one sentence under 50), as benchmarks/languages.py's.
SENTENCE = "各位旅客请注意，开往上海虹桥的列车现在开始检票。"


def fetch(port: int, text: str) -> tuple[float, float, int]:
    """(seconds to the first body byte, to the whole body, body bytes) of one GET /tts."""
    url = f"http://127.0.0.1:{port}/tts?" + urllib.parse.urlencode({"text": text})
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as r:
        head = r.read(1)
        first = time.perf_counter() - t0
        size = len(head) + len(r.read())
    return first, time.perf_counter() - t0, size


def together(port: int, n: int) -> list[tuple[float, float, int]]:
    """``n`` requests released at the same instant, each from its own thread."""
    gate = threading.Barrier(n)
    out: list[tuple[float, float, int] | Exception] = [RuntimeError("not run")] * n

    def one(i: int) -> None:
        gate.wait()
        try:
            out[i] = fetch(port, SENTENCE)
        except Exception as exc:  # reported below, not swallowed
            out[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    failed = [r for r in out if isinstance(r, Exception)]
    if failed:
        raise SystemExit(f"{len(failed)} of {n} requests failed: {failed[0]!r}")
    return out  # type: ignore[return-value]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--generators", default="teacher,student")
    args = p.parse_args()
    print(f"host: {latency.cpu_model()}; host probe {latency.probe_ms():.0f} ms; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)
    names = args.generators.split(",")
    lone: dict[str, list[float]] = {g: [] for g in names}
    firsts: dict[str, list[float]] = {g: [] for g in names}
    medians: dict[str, list[float]] = {g: [] for g in names}
    lasts: dict[str, list[float]] = {g: [] for g in names}
    with tempfile.TemporaryDirectory() as tmp:
        servers = {g: latency.ServerProcess(600, Path(tmp) / f"{g}.log", "--generator", g) for g in names}
        try:
            for server in servers.values():
                fetch(server.port, SENTENCE)  # load the voices and the graphs
            for r in range(args.rounds):
                for g, server in servers.items():
                    lone[g].append(fetch(server.port, SENTENCE)[1])
                    got = together(server.port, args.n)
                    wholes = sorted(w for _, w, _ in got)
                    firsts[g].append(statistics.median(f for f, _, _ in got))
                    medians[g].append(statistics.median(wholes))
                    lasts[g].append(wholes[-1])
                    print(f"  round {r + 1} {g}: alone {lone[g][-1]:.2f} s; {args.n} at once: whole "
                          + " ".join(f"{w:.2f}" for w in wholes) + " s", flush=True)
        finally:
            for server in servers.values():
                server.stop()
    print(f"\nCommand: `python3 benchmarks/eight_tts.py --rounds {args.rounds} --n {args.n} --generators "
          f"{args.generators}`; host probe after {latency.probe_ms():.0f} ms; each figure the median "
          f"of {args.rounds} rounds.\n")
    print(f"| generator | alone: whole WAV | {args.n} at once: first byte p50 | median WAV | last WAV |")
    print("|---|---|---|---|---|")
    for g in names:
        m = statistics.median
        print(f"| {g} | {m(lone[g]):.2f} s | {m(firsts[g]):.2f} s | {m(medians[g]):.2f} s | {m(lasts[g]):.2f} s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
