#!/usr/bin/env python3
"""Cold start to first Mandarin audio: a fresh server, a first connection, Chinese text.

    python3 benchmarks/cold_mandarin.py [--runs 5] [--before DIR]

Each run starts ``python3 -m rtts serve`` (its caches already warm: the Kokoro model
assembled and its graphs cut, as after the first start on a machine), connects, and
sends ``speak`` with Chinese text and no voice and no lang, as a new client would. It
reports the time from ``speak`` to the first audio frame, and from opening the
connection to it. Then, on the same server, it waits for the idle unload (the
inference process and the front ends' dictionaries gone) and measures the same again.
``--before DIR`` serves a second checkout (e.g. ``git archive main | tar -x -C DIR``)
in alternation with this one, so both are measured on the same host minute; the host
probe of ``latency.py`` is printed before and after. Target (issue 10): 1.5 s.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import latency  # noqa: E402  (ServerProcess, connect, probe_ms, cpu_times, steal_share)
import msgpack  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TEXT = "欢迎乘坐本次列车，下一站是杭州东站。"


async def first_audio(url: str, text: str = TEXT) -> tuple[float, float, str]:
    """(speak → first audio, connect → first audio, end reason), in seconds."""
    opened = time.perf_counter()
    ws = await latency.connect(url)
    try:
        await ws.send(msgpack.packb({"type": "speak", "id": "zh", "text": text}))
        sent, first, reason = time.perf_counter(), None, ""
        while not reason:
            msg = msgpack.unpackb(await ws.recv())
            if msg["type"] == "audio" and first is None:
                first = time.perf_counter()
            elif msg["type"] == "error":
                reason = f"error {msg['code']}"
            elif msg["type"] == "end":
                reason = msg["reason"]
    finally:
        await ws.close()
    if first is None:
        return float("nan"), float("nan"), reason
    return first - sent, first - opened, reason


def one_server(root: Path, log: Path) -> dict[str, tuple[float, float, str]]:
    latency.ROOT = root  # ServerProcess starts the server from this checkout
    server = latency.ServerProcess(2.0, log)
    try:
        fresh = asyncio.run(first_audio(server.url))
        server.wait_unloaded()
        time.sleep(1.0)  # the inference process has ended, as after any idle unload
        unloaded = asyncio.run(first_audio(server.url))
    finally:
        server.stop()
    return {"fresh": fresh, "after idle unload": unloaded}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--before", type=Path, help="another checkout to measure in alternation (the previous build)")
    args = p.parse_args()
    builds = {"this build": ROOT} | ({"before": args.before.resolve()} if args.before else {})
    work = Path(tempfile.mkdtemp(prefix="rtts-cold-zh-"))
    cpu0, probe0 = latency.cpu_times(), latency.probe_ms()
    results: dict[str, dict[str, list[tuple[float, float, str]]]] = {b: {} for b in builds}
    for i in range(args.runs):
        for name, root in builds.items():
            for kind, value in one_server(root, work / f"{name.replace(' ', '-')}-{i}.log").items():
                results[name].setdefault(kind, []).append(value)
                print(f"run {i + 1} {name}, {kind}: speak→audio {value[0] * 1000:.0f} ms, "
                      f"connect→audio {value[1] * 1000:.0f} ms ({value[2]})", flush=True)
    probe1, cpu1 = latency.probe_ms(), latency.cpu_times()
    print(f"\nhost probe {probe0:.0f} ms before, {probe1:.0f} ms after; CPU stolen {latency.steal_share(cpu0, cpu1):.0%}")
    print(f"text: {TEXT} (no voice, no lang); {args.runs} fresh servers per build\n")
    print("| build | when | speak → first audio, median (min–max) | connect → first audio, median |")
    print("|---|---|---|---|")
    for name, kinds in results.items():
        for kind, values in kinds.items():
            ttfa = [v[0] * 1000 for v in values]
            whole = [v[1] * 1000 for v in values]
            bad = sum(v[2] != "done" for v in values)
            print(f"| {name} | {kind} | {statistics.median(ttfa):.0f} ms ({min(ttfa):.0f}–{max(ttfa):.0f})"
                  f"{f', {bad} failed' if bad else ''} | {statistics.median(whole):.0f} ms |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
