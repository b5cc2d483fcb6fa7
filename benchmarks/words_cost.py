#!/usr/bin/env python3
"""What word timing costs: first audio and RTF without it (this build against the one
before, alternating) and with it (this build), per engine and language.

    python3 benchmarks/words_cost.py --before DIR [--rounds 4] [--repeats 5]
    python3 benchmarks/words_cost.py --front-end

``--front-end`` times, in this process, what word timing adds to Kokoro's front end
(``KokoroEngine.phonemize_words`` against ``phonemize``, best of 5) for a first unit and a
long unit in Mandarin, Japanese and English; nothing else runs.

``DIR`` is the build before word timing (``git archive 5c2f592 | tar -x -C DIR``). Each
round starts a server of each build in turn (``python3 -m rtts serve``, the phrase cache
off), warms it (a model load, Kokoro's graph cuts), then speaks each text ``--repeats``
times on a warm connection: time from ``speak`` to the first ``audio`` frame, and the
server's RTF from ``end.stats``. After each text, this build speaks it once more with
``words: true`` (the time from ``speak`` to the first ``words`` is kept too), and the
build before once more without: both builds speak the same sequence. The
texts are the path users take: Chinese and Japanese with no voice named, English with
no voice named (Hibari) and with Kokoro and Piper named. ``latency.py``'s host probe is
printed before and after: a slower host shows there, not in the code.
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

import latency  # noqa: E402  (ServerProcess, connect, probe_ms)
import msgpack  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TEXTS = [
    ("zh", None, "各位旅客请注意，开往上海的列车将于15:30发车，请带好您的行李。"),
    ("ja", None, "まもなく三番線に、東京行きの電車がまいります。黄色い線までお下がりください。"),
    ("en", None, "The 10:30 train to Boston leaves from platform 4. Please stand clear of the doors."),
    ("en", "kokoro/af_heart", "The 10:30 train to Boston leaves from platform 4. Please stand clear of the doors."),
    ("en", "piper/en_US-joe-medium", "The 10:30 train to Boston leaves from platform 4. Please stand clear of the doors."),
]


async def once(ws, text: str, voice: str | None, words: bool) -> tuple[float, float, float]:  # type: ignore[no-untyped-def]
    """(speak → first audio, speak → first words or NaN, RTF)."""
    msg: dict[str, object] = {"type": "speak", "id": f"c{time.monotonic_ns()}", "text": text}
    if voice:
        msg["voice"] = voice
    if words:
        msg["words"] = True
    sent = time.perf_counter()
    await ws.send(msgpack.packb(msg))
    first = first_words = float("nan")
    while True:
        m = msgpack.unpackb(await ws.recv())
        if m["type"] == "audio" and first != first:
            first = time.perf_counter() - sent
        elif m["type"] == "words" and first_words != first_words:
            first_words = time.perf_counter() - sent
        elif m["type"] == "error":
            raise RuntimeError(m)
        elif m["type"] == "end":
            return first, first_words, float(m["stats"]["rtf"])


async def measure(url: str, repeats: int, with_words: bool) -> dict[tuple[str, str], list[tuple[float, float, float]]]:
    out: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    ws = await latency.connect(url)
    try:
        for lang, voice, text in TEXTS:  # warm: every model loaded, every front end
            await once(ws, text, voice, False)
        for _ in range(repeats):
            for lang, voice, text in TEXTS:
                key = (lang, voice or "(none named)")
                out.setdefault((*key, "without"), []).append(await once(ws, text, voice, False))  # type: ignore[arg-type]
                # The same sequence for both builds: the build before speaks it again without.
                again = "with words" if with_words else "without, again"
                out.setdefault((*key, again), []).append(await once(ws, text, voice, with_words))  # type: ignore[arg-type]
    finally:
        await ws.close()
    return out  # type: ignore[return-value]


FRONT_END = [
    ("zh", "zf_xiaoxiao", "各位旅客请注意，开往上海的列车"),
    ("zh", "zf_xiaoxiao", "各位旅客请注意，开往上海虹桥的G1234次列车将于2026年3月15日15:30从本站三号站台发车，"
     "请携带好您的行李物品，按照车票上的车厢号排队候车，谢谢合作，祝您旅途愉快。" * 2),
    ("ja", "jf_alpha", "まもなく三番線に、東京行きの"),
    ("ja", "jf_alpha", "次は新宿です。お会計は1200円になります。本日は東京駅をご利用いただきまして、誠にありがとうございます。"
     "まもなく三番線に電車がまいります。" * 2),
    ("en", "af_heart", "The 10:30 train to"),
    ("en", "af_heart", "On March 15, 2026 the board of the company met in the main hall and agreed, after a long debate "
     "about costs, that the new line to the airport would open in the spring of next year, with trains every ten "
     "minutes at peak."),
]


def front_end() -> None:
    sys.path.insert(0, str(ROOT))
    from rtts.engines.kokoro import KokoroEngine, _Scan

    scan, voices = _Scan(), {}
    scan.builtin(lambda v, p: voices.setdefault(v.id, v) is v)
    engine = KokoroEngine(Path.home() / ".cache" / "rtts", style_files=scan.styles, pack=scan.pack)
    print(f"host probe: {latency.probe_ms():.0f} ms")
    print("| lang | characters | phonemize (ms) | phonemize_words (ms) |")
    print("|---|---|---|---|")
    for lang, voice, text in FRONT_END:
        engine.phonemize(text, voice, lang)
        engine.phonemize_words(text, voice, lang)  # warm: the front ends loaded
        plain = words = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            engine.phonemize(text, voice, lang)
            t1 = time.perf_counter()
            engine.phonemize_words(text, voice, lang)
            t2 = time.perf_counter()
            plain, words = min(plain, t1 - t0), min(words, t2 - t1)
        print(f"| {lang} | {len(text)} | {plain * 1000:.1f} | {words * 1000:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, help="the build before word timing")
    parser.add_argument("--front-end", action="store_true", help="only what timing adds to Kokoro's front end")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.front_end:
        front_end()
        return
    if args.before is None:
        parser.error("--before DIR is needed (or --front-end)")
    builds = {"before": args.before.resolve(), "this build": ROOT}
    results: dict[tuple[str, str, str, str], list[tuple[float, float, float]]] = {}
    probe0 = latency.probe_ms()
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for name, root in builds.items():
                latency.ROOT = root  # ServerProcess starts the server from this checkout
                server = latency.ServerProcess(600.0, Path(tmp) / f"{name}.log")
                try:
                    got = asyncio.run(measure(server.url, args.repeats, name == "this build"))
                finally:
                    server.stop()
                for key, values in got.items():
                    results.setdefault((name, *key), []).extend(values)
    probe1 = latency.probe_ms()
    print(f"host probe: {probe0:.0f} ms before, {probe1:.0f} ms after")
    print("| lang | voice | build | words | runs | first audio p50 / p95 (ms) | RTF median | first words p50 (ms) |")
    print("|---|---|---|---|---|---|---|---|")
    for lang, voice, text in TEXTS:
        for name in builds:
            for mode in ("without", "without, again", "with words"):
                rows = results.get((name, lang, voice or "(none named)", mode))
                if not rows:
                    continue
                firsts = sorted(r[0] * 1000 for r in rows)
                p95 = firsts[min(len(firsts) - 1, round(0.95 * (len(firsts) - 1)))]
                words = [r[1] * 1000 for r in rows if r[1] == r[1]]
                words_p50 = f"{statistics.median(words):.0f}" if words else "–"
                print(f"| {lang} | {voice or '(none named)'} | {name} | {mode} | {len(rows)} | "
                      f"{statistics.median(firsts):.0f} / {p95:.0f} | {statistics.median(r[2] for r in rows):.3f} | {words_p50} |")


if __name__ == "__main__":
    main()
