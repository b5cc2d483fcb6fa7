#!/usr/bin/env python3
"""Bytes per second of audio for every format rtts sends, and what Opus adds to latency.

    python3 benchmarks/codecs.py            # about 2 minutes on 2 cores

It starts ``python3 -m rtts serve --port P --phrase-cache-mb 0`` (the cache is off so
that every request is synthesized) and speaks the English and Mandarin sentences of
``benchmarks/sentences`` with the Piper and the Kokoro voice over WebSocket:

* **Bytes per second of audio** on the WebSocket for ``pcm16``, ``f32``, ``mulaw`` and
  ``opus`` (24 and 48 kHz, 20 ms frames): the ``audio.data`` bytes, and whole messages
  (msgpack framing included) over the seconds of audio. For the HTTP formats of the
  OpenAI speech API (wav, pcm, mp3, opus, aac, flac) the same speech, received as
  pcm16, goes through ``rtts.sound.codecs.stream_encoder`` 20 ms at a time, as the HTTP route
  streams it.
* **Time to the first body byte** of ``POST /v1/audio/speech`` for each
  ``response_format`` (the English sentences, Piper, formats interleaved): what an
  encoder that gathers frames before its first output (mp3, AAC, FLAC) adds.
* **Opus's added latency**, in three parts: the encoder's look-ahead (pre-skip, fixed
  by libopus), the time to encode one 20 ms frame on the server and to decode one
  (FFmpeg's libopus decoder through PyAV, as a stand-in for the browser's), and the
  time to first audio of the same requests with ``format: "opus"`` and ``"pcm16"``,
  interleaved on one connection each so both see the same machine.

The host probe of ``benchmarks/latency.py`` is printed before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import msgpack
import numpy as np
import websockets

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from latency import ServerProcess, probe_ms  # noqa: E402

from rtts.sound import audio, codecs  # noqa: E402

VOICES = {"piper/en_US-joe-medium": "en", "kokoro/jm_kumo": "zh"}
# (format, rate, frame ms): a message costs ~48 bytes of msgpack fields whatever it holds, so
# Opus for a thin link is also measured with 60 ms frames.
WS_FORMATS = [("pcm16", 24000, 20), ("f32", 24000, 20), ("mulaw", 24000, 20), ("opus", 24000, 20),
              ("opus", 48000, 20), ("opus", 24000, 60)]


async def session(url: str, fmt: str, rate: int, frame_ms: int = 20):  # type: ignore[no-untyped-def]
    ws = await websockets.connect(url, compression=None, max_size=None, open_timeout=60)
    await ws.recv()
    await ws.send(msgpack.packb({"type": "hello", "v": 1, "format": fmt, "sample_rate": rate, "frame_ms": frame_ms}))
    ready = msgpack.unpackb(await ws.recv())
    assert ready["type"] == "ready" and ready["format"] == fmt, ready
    return ws


async def speak(ws, utt_id: str, text: str, voice: str) -> dict:  # type: ignore[no-untyped-def]
    """One utterance: data bytes, message bytes, seconds of audio, client TTFA, the frames."""
    sent = time.perf_counter()
    await ws.send(msgpack.packb({"type": "speak", "id": utt_id, "text": text, "voice": voice}))
    out = {"data": 0, "wire": 0, "first": None, "frames": []}
    while True:
        raw = await ws.recv()
        msg = msgpack.unpackb(raw)
        if msg.get("id") != utt_id:
            continue
        if msg["type"] == "audio":
            out["first"] = out["first"] or time.perf_counter() - sent
            out["data"] += len(msg["data"])
            out["wire"] += len(raw)
            out["frames"].append(msg["data"])
        elif msg["type"] == "end":
            out["audio_s"] = msg["stats"]["audio_ms"] / 1000
            out["server_ttfa_ms"] = msg["stats"]["ttfa_ms"]
            return out
        elif msg["type"] == "error":
            raise RuntimeError(msg)


def sentences() -> list[tuple[str, str]]:
    out = []
    for voice, lang in VOICES.items():
        texts = json.loads((ROOT / "benchmarks" / "sentences" / f"{lang}.json").read_text())[lang]
        out += [(voice, t) for t in texts if isinstance(t, str)][:8]
    return out


def opus_codec_times(speech: np.ndarray, rate: int) -> dict[str, float]:
    """ms to encode and to decode one 20 ms frame, over real speech."""
    import av

    n = rate // 50
    enc = codecs.OpusPackets(rate, n)
    frames = [speech[i : i + n] for i in range(0, len(speech) - n + 1, n)]
    enc_ms, packets = [], []
    for f in frames:
        t0 = time.perf_counter()
        packets.append(enc.encode(f))
        enc_ms.append((time.perf_counter() - t0) * 1000)
    dec = av.CodecContext.create("libopus", "r")
    dec.extradata = enc.head
    dec_ms = []
    for p in packets:
        t0 = time.perf_counter()
        list(dec.decode(av.Packet(p)))
        dec_ms.append((time.perf_counter() - t0) * 1000)
    return {
        "pre_skip_ms": enc.pre_skip * 1000 / rate,
        "encode_p50": statistics.median(enc_ms), "encode_p95": float(np.percentile(enc_ms, 95)),
        "decode_p50": statistics.median(dec_ms), "decode_p95": float(np.percentile(dec_ms, 95)),
    }


def first_byte_ms(port: int, text: str, voice: str, fmt: str) -> float:
    """ms from sending the request to the first byte of the body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    body = json.dumps({"model": "tts-1", "input": text, "voice": voice, "response_format": fmt})
    t0 = time.perf_counter()
    conn.request("POST", "/v1/audio/speech", body, {"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 200, (r.status, r.read())
    r.read1(1)
    ms = (time.perf_counter() - t0) * 1000
    r.read()
    conn.close()
    return ms


async def measure(url: str, rounds: int) -> dict:
    texts = sentences()
    r: dict = {"ws": {}, "http": {}, "ttfa": {"pcm16": [], "opus": []}, "server_ttfa": {"pcm16": [], "opus": []},
               "ttfa_voice": []}
    pcm_speech: list[np.ndarray] = []
    for fmt, rate, frame_ms in WS_FORMATS:
        ws = await session(url, fmt, rate, frame_ms)
        data = wire = seconds = 0.0
        for i, (voice, text) in enumerate(texts):
            u = await speak(ws, f"{fmt}{rate}{frame_ms}-{i}", text, voice)
            data += u["data"]
            wire += u["wire"]
            seconds += u["audio_s"]
            if fmt == "pcm16":
                pcm_speech.append(np.concatenate([audio.decode(f, "pcm16") for f in u["frames"]]))
        await ws.close()
        r["ws"][f"{fmt} {rate // 1000} kHz, {frame_ms} ms"] = {"data": data / seconds, "wire": wire / seconds, "seconds": seconds}
    speech = np.concatenate(pcm_speech)
    seconds = len(speech) / 24000
    for fmt in codecs.STREAM_FORMATS:
        enc = codecs.stream_encoder(fmt, 24000)
        size = sum(len(enc.push(speech[i : i + 480])) for i in range(0, len(speech), 480)) + len(enc.finish())
        r["http"][fmt] = size / seconds
    r["codec"] = {rate: opus_codec_times(audio.Resampler(24000, rate).process(speech) if rate != 24000 else speech, rate)
                  for rate in (24000, 48000)}
    # TTFA, interleaved: the same requests, one connection per format, alternating.
    pcm_ws, opus_ws = await session(url, "pcm16", 48000), await session(url, "opus", 48000)
    for k in range(rounds):
        for i, (voice, text) in enumerate(texts):
            order = [("pcm16", pcm_ws), ("opus", opus_ws)]
            for fmt, ws in order if (i + k) % 2 else order[::-1]:
                u = await speak(ws, f"t{k}-{i}", text, voice)
                r["ttfa"][fmt].append(u["first"] * 1000)
                r["server_ttfa"][fmt].append(u["server_ttfa_ms"])
            r["ttfa_voice"].append(voice)
    await pcm_ws.close()
    await opus_ws.close()
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    english = [(v, t) for v, t in texts if v.startswith("piper/")]
    r["ttfb"] = {fmt: [] for fmt in codecs.STREAM_FORMATS}
    for k in range(rounds):
        for i, (voice, text) in enumerate(english):
            fmts = list(codecs.STREAM_FORMATS)
            for fmt in fmts[(i + k) % len(fmts):] + fmts[: (i + k) % len(fmts)]:
                r["ttfb"][fmt].append(await asyncio.to_thread(first_byte_ms, port, text, voice, fmt))
    return r


def report(r: dict, probes: list[float], command: str) -> str:
    lines = [
        "## Formats: bytes per second of audio, and Opus's added latency (issue 15)",
        "",
        "```sh", command, "```", "",
        f"Host probe {probes[0]:.0f} ms before, {probes[1]:.0f} ms after (`benchmarks/latency.py`'s "
        "fixed CPU workload; higher is a slower host).", "",
        "WebSocket (`data`: the audio bytes, `messages`: whole msgpack messages):", "",
        "| format | data B/s | messages B/s | kbit/s on the wire |", "|---|---|---|---|",
    ]
    for name, v in r["ws"].items():
        lines.append(f"| {name} | {v['data']:,.0f} | {v['wire']:,.0f} | {v['wire'] * 8 / 1000:,.1f} |")
    lines += ["", "HTTP bodies (`/v1/audio/speech` `response_format`, 24 kHz mono, as streamed):", "",
              "| format | B/s | kbit/s |", "|---|---|---|"]
    for fmt, bps in r["http"].items():
        lines.append(f"| {fmt} | {bps:,.0f} | {bps * 8 / 1000:,.1f} |")
    n = len(next(iter(r["ttfb"].values())))
    lines += ["", f"Time to the first body byte of `/v1/audio/speech` (Piper, {n} requests each, interleaved):", "",
              "| response_format | p50 | p90 |", "|---|---|---|"]
    for fmt, values in r["ttfb"].items():
        lines.append(f"| {fmt} | {statistics.median(values):.0f} ms | {np.percentile(values, 90):.0f} ms |")
    lines += ["", "Opus's added latency:", "", "| part | 24 kHz | 48 kHz |", "|---|---|---|"]
    c24, c48 = r["codec"][24000], r["codec"][48000]
    lines.append(f"| encoder look-ahead (pre-skip), fixed | {c24['pre_skip_ms']:.1f} ms | {c48['pre_skip_ms']:.1f} ms |")
    lines.append(f"| encode one 20 ms frame, p50 / p95 | {c24['encode_p50']:.2f} / {c24['encode_p95']:.2f} ms "
                 f"| {c48['encode_p50']:.2f} / {c48['encode_p95']:.2f} ms |")
    lines.append(f"| decode one 20 ms frame, p50 / p95 | {c24['decode_p50']:.2f} / {c24['decode_p95']:.2f} ms "
                 f"| {c48['decode_p50']:.2f} / {c48['decode_p95']:.2f} ms |")
    p, o = r["ttfa"]["pcm16"], r["ttfa"]["opus"]
    lines += ["", f"Time to first audio at 48 kHz, pcm16 and opus interleaved ({len(p)} pairs):", "",
              "| voice | pairs | pcm16 p50 | opus p50 | paired difference p50 |", "|---|---|---|---|---|"]
    for voice in VOICES:
        idx = [i for i, v in enumerate(r["ttfa_voice"]) if v == voice]
        vp, vo = [p[i] for i in idx], [o[i] for i in idx]
        lines.append(f"| {voice} | {len(idx)} | {statistics.median(vp):.0f} ms | {statistics.median(vo):.0f} ms "
                     f"| {statistics.median([b - a for a, b in zip(vp, vo)]):+.1f} ms |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="TTFA rounds over the sentences")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = ServerProcess(0, Path(tmp) / "server.log", "--log-level", "warning")
        try:
            probes = [probe_ms()]
            r = asyncio.run(measure(server.url, args.rounds))
            probes.append(probe_ms())
        finally:
            server.stop()
    print(report(r, probes, "python3 benchmarks/codecs.py" + (f" --rounds {args.rounds}" if args.rounds != 2 else "")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
