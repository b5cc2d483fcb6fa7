#!/usr/bin/env python3
"""Wake after the idle unload: connect → first audio in English, Mandarin and Japanese.

    python3 benchmarks/wake.py [--runs 5] [--before DIR] [--generators teacher,student] [--langs zh,ja,en]

For each language, each run starts ``python3 -m rtts serve`` (caches warm, as after the
first start on a machine; ``--idle-unload 2``) and measures, with the text in that
language and no voice named (the path users take):

* fresh: the server's first connection and request;
* after idle unload: once that request is done and the models have been unloaded (the
  inference process gone), a new connection and the same request, as a kiosk that
  speaks again the next morning;
* after idle unload, another language before: the same, when the request before the
  unload was in another language (English before Mandarin and Japanese; Mandarin
  before English).

It reports connect → first audio frame (what the listener waits) and the RSS of the
server and its children once unloaded. ``--before DIR`` serves a second checkout (e.g.
``git archive main | tar -x -C DIR``) in alternation with this one; ``--generators``
serves this checkout once per Kokoro generator (``--generator``), in alternation. The host
probe of ``latency.py`` and the CPU model are printed before and after. Targets (issue 22): English ≤ 500 ms,
Mandarin and Japanese ≤ 1.0 s; RSS after the unload ≤ 80 MB or what it costs (the spare
inference process the server keeps by default, ``--spare-process``: ~53 MB of it).
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

import cold_mandarin  # noqa: E402  (first_audio)
import latency  # noqa: E402  (ServerProcess, probe_ms, cpu_times, steal_share)

ROOT = Path(__file__).resolve().parent.parent
TEXTS = {
    "zh": "欢迎乘坐本次列车，下一站是杭州东站。",
    "ja": "次の駅は東京です。お忘れ物のないようご注意ください。",
    "en": "The next train leaves from platform four in ten minutes.",
}
OTHER = {"zh": "en", "ja": "en", "en": "zh"}


async def first_audio(url: str, text: str) -> tuple[float, str]:
    """(connect → first audio in seconds, end reason): cold_mandarin.py's measure."""
    _, whole, reason = await cold_mandarin.first_audio(url, text)
    return whole, reason


def unloaded(server: latency.ServerProcess) -> None:
    server.wait_unloaded()
    time.sleep(1.0)  # the inference process has ended (and the spare one started), as after any idle unload


def one_server(root: Path, lang: str, log: Path, extra: tuple[str, ...] = ()) -> dict[str, tuple[float, str]]:
    latency.ROOT = root  # ServerProcess starts the server from this checkout
    server = latency.ServerProcess(2.0, log, *extra)
    out = {}
    try:
        out["fresh"] = asyncio.run(first_audio(server.url, TEXTS[lang]))
        unloaded(server)
        out["after idle unload"] = asyncio.run(first_audio(server.url, TEXTS[lang]))
        unloaded(server)
        out["rss after unload (MB)"] = (server._rss() / 2**20, "")
        asyncio.run(first_audio(server.url, TEXTS[OTHER[lang]]))
        unloaded(server)
        out[f"after idle unload, {OTHER[lang]} before"] = asyncio.run(first_audio(server.url, TEXTS[lang]))
    finally:
        server.stop()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--langs", default="zh,ja,en")
    p.add_argument("--before", type=Path, help="another checkout to measure in alternation (the previous build)")
    p.add_argument("--generators", default="", help="e.g. teacher,student: this checkout once per Kokoro generator (with --before, each checkout)")
    args = p.parse_args()
    langs = args.langs.split(",")
    builds = latency.builds(args.before, args.generators)
    print(f"CPU: {latency.cpu_model()}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="rtts-wake-"))
    cpu0, probe0 = latency.cpu_times(), latency.probe_ms()
    results: dict[tuple[str, str, str], list[tuple[float, str]]] = {}
    for i in range(args.runs):
        for lang in langs:
            for name, (root, extra) in builds.items():
                got = one_server(root, lang, work / f"{name.replace(' ', '-')}-{lang}-{i}.log", extra)
                for kind, value in got.items():
                    results.setdefault((lang, kind, name), []).append(value)
                shown = ", ".join(f"{k} {v[0] * (1 if 'MB' in k else 1000):.0f}{'' if 'MB' in k else ' ms'}"
                                  f"{'' if v[1] in ('done', '') else ' ' + v[1]}" for k, v in got.items())
                print(f"run {i + 1} {lang} {name}: {shown}", flush=True)
    probe1, cpu1 = latency.probe_ms(), latency.cpu_times()
    print(f"\nhost probe {probe0:.0f} ms before, {probe1:.0f} ms after; CPU stolen {latency.steal_share(cpu0, cpu1):.0%}")
    print(f"{args.runs} fresh servers per language and build; text with no voice and no lang\n")
    print("| language | when | " + " | ".join(builds) + " |")
    print("|---|---|" + "---|" * len(builds))
    for lang in langs:
        kinds = dict.fromkeys(k for (l, k, _) in results if l == lang)
        for kind in kinds:
            cells = []
            for name in builds:
                values = results.get((lang, kind, name), [])
                bad = sum(v[1] not in ("done", "") for v in values)
                nums = [v[0] * (1 if "MB" in kind else 1000) for v in values]
                unit = " MB" if "MB" in kind else " ms"
                cells.append(f"{statistics.median(nums):.0f}{unit} ({min(nums):.0f}–{max(nums):.0f})"
                             + (f", {bad} failed" if bad else ""))
            print(f"| {lang} | {kind} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
