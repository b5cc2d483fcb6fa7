#!/usr/bin/env python3
"""Whisper's word timestamps for a list of WAVs: the listener half of benchmarks/word_timing.py.

    WHISPER_DIR=$HOME/.cache/whisper-base /work/score-venv/bin/python benchmarks/whisper_words.py IN.json OUT.json

Runs in the shared scorer's venv (faster-whisper, zhconv: ../shared/tools/README.md), not
rtts's, so it imports neither rtts nor anything the venv lacks. ``IN.json`` is
``{"shift_s": S, "items": [{"key", "wav", "lang"}]}``. Every WAV is transcribed twice with
Whisper base (int8 on the CPU, beam 5, no VAD: as ../shared/tools/asr_score.py does, with
``word_timestamps=True``): as it is, and after ``S`` seconds of digital silence put in
front of it, so the caller can see how far Whisper's own timestamps move when nothing but
the time origin does. ``OUT.json`` maps each key to ``{"plain": [...], "shifted": [...]}``,
lists of ``{"word", "start", "end", "probability", "first"}`` (seconds; the shifted run's
times are left as Whisper gave them, offset included; ``first``: the first word of its
segment, whose start Whisper pins to the segment's). Chinese words are folded to simplified
characters here (zhconv, as the shared scorer folds them), because Whisper base writes
Mandarin in traditional characters as often as not.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import zhconv
from faster_whisper import WhisperModel, decode_audio

RATE = 16000  # what Whisper listens at; decode_audio resamples anything else to it


def words(model: WhisperModel, samples: np.ndarray, lang: str) -> list[dict[str, object]]:
    segments, _ = model.transcribe(samples, language=lang, beam_size=5, word_timestamps=True, vad_filter=False)
    out = []
    for segment in segments:
        for k, w in enumerate(segment.words or ()):
            text = zhconv.convert(w.word, "zh-cn") if lang == "zh" else w.word
            out.append(
                {"word": text, "start": w.start, "end": w.end, "probability": w.probability, "first": k == 0})
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    job = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    shift = np.zeros(round(float(job["shift_s"]) * RATE), dtype=np.float32)
    threads = int(os.environ.get("WHISPER_THREADS", "2"))
    model = WhisperModel(os.environ["WHISPER_DIR"], device="cpu", compute_type="int8", cpu_threads=threads)
    result = {}
    for n, item in enumerate(job["items"], 1):
        samples = decode_audio(item["wav"], sampling_rate=RATE)
        lang = item["lang"]
        result[item["key"]] = {
            "plain": words(model, samples, lang),
            "shifted": words(model, np.concatenate([shift, samples]), lang),
        }
        print(f"  whisper {n}/{len(job['items'])} {item['key']}", file=sys.stderr, flush=True)
    Path(argv[1]).write_text(json.dumps(result, ensure_ascii=False, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
