"""Where a 2-core box's time goes while N listeners play (issue 32: is the admission bound
the box's edge?).

    python3 benchmarks/experiments/box_share.py --path zh --n 4 [--generator teacher]
        [--max-load 0.7] [--rounds 3]

Starts a server (``--admission-max-load``, the generator named; connections per address
raised for large N) and plays ``--rounds`` rounds of N listeners on ``path``
(``listeners.PATHS``). Per round: its length; the CPU seconds of the server process (the
event loop), of its inference process and of the listeners (this process), and the cores
they kept busy on average; the share of the round the inference thread spent on jobs
(``rtts_inference_busy_seconds``); and how many listeners underran. Not a benchmark of
record: a look at what is left of the box at a bound and above it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import latency
import listeners


def cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def busy_s(server: latency.ServerProcess) -> float:
    busy = server.metric("rtts_inference_busy_seconds")
    assert busy is not None, "the server has no rtts_inference_busy_seconds"
    return busy


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--path", default="zh", choices=sorted(listeners.PATHS))
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--generator", default="teacher", choices=("teacher", "student"))
    p.add_argument("--max-load", default="0.7")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    print(f"host: {latency.cpu_model()}, probe {latency.probe_ms():.0f} ms", flush=True)
    log = Path(tempfile.mkdtemp(prefix="rtts-share-")) / "server.log"
    server = latency.ServerProcess(600, log, f"--admission-max-load={args.max_load}", "--max-connections-per-ip=64",
                                   f"--generator={args.generator}")
    try:
        asyncio.run(listeners.round_of(server, args.path, 1))  # the voice and front end loaded
        me, srv = psutil.Process(), psutil.Process(server.proc.pid)
        for r in range(args.rounds):
            kids = srv.children(recursive=True)
            before = (cpu_s(srv), sum(map(cpu_s, kids)), cpu_s(me), busy_s(server), time.monotonic())
            heard = asyncio.run(listeners.round_of(server, args.path, args.n))
            kids = srv.children(recursive=True)
            after = (cpu_s(srv), sum(map(cpu_s, kids)), cpu_s(me), busy_s(server), time.monotonic())
            loop, inference, clients, thread, wall = (b - a for a, b in zip(before, after, strict=True))
            underran = sum(1 for x in heard if x.stream.underruns)
            print(f"{args.path} {args.generator} N={args.n} bound {args.max_load} round {r}: {wall:.1f} s; CPU s: "
                  f"event loop {loop:.2f}, inference process {inference:.2f}, listeners {clients:.2f}; cores busy "
                  f"{(loop + inference + clients) / wall:.2f} of {os.cpu_count()}; the inference thread on jobs "
                  f"{thread / wall:.2f} of the round; underran {underran}/{args.n}", flush=True)
            time.sleep(0.3)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
