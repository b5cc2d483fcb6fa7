#!/usr/bin/env python3
"""Word times against the audio itself: where sound starts after a silence, and where it stops.

    python3 benchmarks/word_onsets.py

A word that follows a silence (a sentence pause, a ``<break>``) has an onset anyone can
find in the waveform: the first 10 ms whose level rises within 30 dB of the loudest.
This compares each such word's ``start`` with that onset, and the end of each word
before a silence with the last 10 ms above the same level, per language, through a
real server (``python3 -m rtts serve``) with the words a client gets. It also checks
what issue 23 asks to be exact: a ``<break time="700ms"/>`` and the pause around it lie
between the words before and after it (the silence measured in the audio vs the gap in
the timing, to one 20 ms frame), and the last word ends with the audio.

Kokoro's ``SOUND_LEAD_FRAMES`` (rtts/engines/kokoro.py) comes from this measurement: run
it with the constant at 0 to see why. Whisper's view of the same audio is
benchmarks/word_timing.py.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import latency  # noqa: E402  (ServerProcess, connect)
import msgpack  # noqa: E402

RATE = latency.RATE
# Three sentences a text, so that two words in each follow a sentence's pause.
TEXTS = {
    ("en", "kokoro/af_heart"): [
        "The museum opens at nine. Tickets cost twelve dollars. Please stand clear of the doors.",
        "Good morning. Platform four, the train to Boston. Mind the gap, please.",
        "Welcome aboard. Our next stop is Central Station. Thank you for riding with us.",
    ],
    # The same sentences from the other engines (issue 23 part 1: durations from every engine).
    ("en", "piper/en_US-joe-medium"): [
        "The museum opens at nine. Tickets cost twelve dollars. Please stand clear of the doors.",
        "Good morning. Platform four, the train to Boston. Mind the gap, please.",
        "Welcome aboard. Our next stop is Central Station. Thank you for riding with us.",
    ],
    ("en", "hibari/heart"): [
        "The museum opens at nine. Tickets cost twelve dollars. Please stand clear of the doors.",
        "Good morning. Platform four, the train to Boston. Mind the gap, please.",
        "Welcome aboard. Our next stop is Central Station. Thank you for riding with us.",
    ],
    ("zh", None): [
        "各位旅客请注意。开往上海的列车即将进站。请站在黄色安全线以内。",
        "欢迎光临。今天是星期一。祝您旅途愉快。",
        "下一站是人民广场。请从右侧车门下车。谢谢合作。",
    ],
    ("ja", None): [
        "次は新宿です。お出口は右側です。ご乗車ありがとうございます。",
        "本日は晴天なり。まもなく電車がまいります。黄色い線の内側でお待ちください。",
    ],
    ("es", "kokoro/ef_dora"): [
        "Buenos días. El tren a Madrid sale del andén tres. Gracias por viajar con nosotros.",
    ],
}
BREAK = 'Please stand clear. <break time="700ms"/> The doors are closing.'
BREAK_VOICES = ("kokoro/af_heart", "piper/en_US-joe-medium", "hibari/heart")
STEP = RATE // 100  # 10 ms
FRAME = RATE * 20 // 1000


async def speak(url: str, text: str, voice: str | None) -> tuple[np.ndarray, list[dict]]:
    ws = await latency.connect(url)
    try:
        msg: dict[str, object] = {"type": "speak", "id": "w", "text": text, "words": True}
        if voice:
            msg["voice"] = voice
        await ws.send(msgpack.packb(msg))
        pcm, words = [], []
        while True:
            m = msgpack.unpackb(await ws.recv())
            if m["type"] == "audio":
                pcm.append(m["data"])
            elif m["type"] == "words":
                words += m["words"]
            elif m["type"] in ("end", "error"):
                break
    finally:
        await ws.close()
    return np.frombuffer(b"".join(pcm), np.int16) / 32768.0, words


def levels(samples: np.ndarray) -> tuple[np.ndarray, float]:
    n = len(samples) // STEP
    rms = np.sqrt(np.mean(samples[: n * STEP].reshape(n, STEP) ** 2, axis=1))
    return rms, float(rms.max()) * 10 ** (-30 / 20)


def offsets(samples: np.ndarray, words: list[dict]) -> tuple[list[float], list[float]]:
    """(start - onset, end - offset) in ms for the words around silences of >= 150 ms."""
    rms, floor = levels(samples)
    starts, ends = [], []
    gap = int(0.15 * RATE)
    for before, word in zip([None, *words], words):
        if before is not None and word["start"] - before["end"] < gap:
            continue
        # From past the word before (its tail), the first loud 10 ms.
        first = 0 if before is None else before["end"] // STEP + 5
        onset = next((i for i in range(first, len(rms)) if rms[i] > floor), None)
        if onset is not None:
            starts.append((word["start"] - onset * STEP) * 1000 / RATE)
    for word, after in zip(words, [*words[1:], None]):
        if after is not None and after["start"] - word["end"] < gap:
            continue
        # Back from short of the next word's onset, the last loud 10 ms.
        stop = len(rms) if after is None else after["start"] // STEP - 8
        last = next((i for i in range(stop - 1, word["start"] // STEP, -1) if rms[i] > floor), None)
        if last is not None:
            ends.append((word["end"] - (last + 1) * STEP) * 1000 / RATE)
    return starts, ends


def silent_run(samples: np.ndarray, around: int) -> tuple[int, int]:
    """The stretch of near-silence (below the 30 dB level) that holds sample ``around``."""
    rms, floor = levels(samples)
    i = around // STEP
    a = i
    while a > 0 and rms[a - 1] <= floor:
        a -= 1
    b = i
    while b < len(rms) and rms[b] <= floor:
        b += 1
    return a * STEP, b * STEP


def p95(values: list[float]) -> float:
    return float(np.percentile(np.abs(values), 95)) if values else float("nan")


async def measure(url: str) -> list[str]:
    rows = ["| language | voice | onsets | start − onset: median / p95 abs (ms) | ends | end − offset: median / p95 abs (ms) | last word end − audio end (ms) |",
            "|---|---|---|---|---|---|---|"]
    for (lang, voice), texts in TEXTS.items():
        starts, ends, tails = [], [], []
        for text in texts:
            samples, words = await speak(url, text, voice)
            s, e = offsets(samples, words)
            starts += s
            ends += e
            tails.append((words[-1]["end"] - len(samples)) * 1000 / RATE)
        rows.append(f"| {lang} | {voice or '(none named)'} | {len(starts)} | {statistics.median(starts):+.0f} / {p95(starts):.0f} "
                    f"| {len(ends)} | {statistics.median(ends):+.0f} / {p95(ends):.0f} | {max(tails, key=abs):+.0f} |")
    rows.append("")
    for voice in BREAK_VOICES:
        samples, words = await speak(url, BREAK, voice)
        before = next(w for w in words if w["text"] == "clear")
        after = next(w for w in words if w["text"] == "The")
        quiet = silent_run(samples, (before["end"] + after["start"]) // 2)
        gap_ms = (after["start"] - before["end"]) * 1000 / RATE
        quiet_ms = (quiet[1] - quiet[0]) * 1000 / RATE
        rows += [f"{voice}: `<break time=\"700ms\"/>` between sentences: gap in the timing {gap_ms:.0f} ms, "
                 f"silence in the audio {quiet_ms:.0f} ms (difference {gap_ms - quiet_ms:+.0f} ms; one frame is 20 ms); "
                 f"the silence runs {(quiet[0] - before['end']) * 1000 / RATE:+.0f} ms after the word before and "
                 f"{(after['start'] - quiet[1]) * 1000 / RATE:+.0f} ms before the word after.", ""]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = latency.ServerProcess(600.0, Path(tmp) / "server.log")
        try:
            rows = asyncio.run(measure(server.url))
        finally:
            server.stop()
    print(f"server: {server.command}")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
