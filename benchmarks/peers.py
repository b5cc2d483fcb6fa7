#!/usr/bin/env python3
"""Time to first audio of the peer libraries, for benchmarks/latency.py.

Runs inside the peers' own venv (piper-tts and kokoro-onnx must not share an
interpreter with rtts), one engine per process, and prints one JSON object::

    /work/peers-venv/bin/python benchmarks/peers.py piper --model X.onnx --texts texts.json --repeats 5
    /work/peers-venv/bin/python benchmarks/peers.py kokoro --model kokoro.onnx --voices voices.npz \
        --voice jf_alpha --texts texts.json --repeats 5

``texts.json`` maps a name to a text. For every text the first run warms the model
and is not counted; each further run reports the seconds from the call to its first
chunk (piper-tts ``PiperVoice.synthesize``, kokoro-onnx ``create_stream``), the total,
and the audio length. Imports nothing from rtts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import time
from pathlib import Path


def _piper(args: argparse.Namespace, texts: dict[str, str]) -> dict:
    from piper import PiperVoice

    t0 = time.perf_counter()
    voice = PiperVoice.load(args.model)
    load_s = time.perf_counter() - t0
    out = {}
    for name, text in texts.items():
        runs = []
        for i in range(args.repeats + 1):
            start = time.perf_counter()
            first = None
            samples = 0
            rate = 0
            for chunk in voice.synthesize(text):
                if first is None:
                    first = time.perf_counter() - start
                samples += len(chunk.audio_float_array)
                rate = chunk.sample_rate
            total = time.perf_counter() - start
            if i:
                runs.append({"ttfa_s": first, "total_s": total, "audio_s": samples / rate})
        out[name] = runs
    return {"load_s": load_s, "runs": out}


def _kokoro(args: argparse.Namespace, texts: dict[str, str]) -> dict:
    from kokoro_onnx import Kokoro

    t0 = time.perf_counter()
    kokoro = Kokoro(args.model, args.voices)
    load_s = time.perf_counter() - t0

    async def once(text: str) -> dict:
        start = time.perf_counter()
        first = None
        samples = 0
        rate = 24000
        async for audio, sr in kokoro.create_stream(text, voice=args.voice, speed=1.0, lang=args.lang):
            if first is None:
                first = time.perf_counter() - start
            samples += len(audio)
            rate = sr
        return {"ttfa_s": first, "total_s": time.perf_counter() - start, "audio_s": samples / rate}

    out = {}
    for name, text in texts.items():
        runs = [asyncio.run(once(text)) for _ in range(args.repeats + 1)]
        out[name] = runs[1:]
    return {"load_s": load_s, "runs": out}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("engine", choices=("piper", "kokoro"))
    parser.add_argument("--model", required=True)
    parser.add_argument("--voices", help="kokoro: style file (.npz/.bin)")
    parser.add_argument("--voice", default="jf_alpha", help="kokoro: style name")
    parser.add_argument("--lang", default="en-us", help="kokoro: espeak-ng language of the texts (cmn, ja, en-us)")
    parser.add_argument("--texts", required=True, type=Path)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    texts = json.loads(args.texts.read_text())
    result = _piper(args, texts) if args.engine == "piper" else _kokoro(args, texts)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result["pid"] = os.getpid()
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
