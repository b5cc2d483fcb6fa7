#!/usr/bin/env python3
"""Where one short Kokoro unit's time goes, step by step (issue 21, item 2).

    python3 benchmarks/unit_cost.py [--runs 5]

In this process, through the engine's own objects (the inference process holds the
ONNX sessions, as in the server): for each text, the median over ``--runs`` of text →
phonemes (the front end), the predictor, the decoder, trimming, resampling to 48 kHz and
cutting 20 ms frames (``track.Track``, what a session does), with the frames the decoder
ran against the frames kept after trimming: a decoder run costs per frame, and the
silence a unit's last phoneme runs on into is decoded and then thrown away.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import latency  # noqa: E402  (cpu_model, probe_ms)
from rtts.config import Config  # noqa: E402
from rtts.engines.kokoro import ENERGY, F0, FEATURES, KokoroEngine  # noqa: E402
from rtts.engines.kokoro_cut import drop_pad_frames  # noqa: E402
from rtts.engines.trim import trim_silence  # noqa: E402
from rtts.engines.voices import VoiceRegistry  # noqa: E402

CASES = (
    ("kokoro/zf_xiaoxiao", "zh", "欢迎光临。"),
    ("kokoro/zf_xiaoxiao", "zh", "各位旅客请注意，"),
    ("kokoro/zf_xiaoxiao", "zh", "请注意，"),  # issue 32: the first clause that ran dry
    ("kokoro/zf_xiaoxiao", "zh", "各位旅客"),
    ("kokoro/jf_alpha", "ja", "東京駅へようこそ。"),
    ("kokoro/af_heart", "en", "Please stand"),
    ("kokoro/af_heart", "en", "Please stand clear of the closing doors."),
)
SAMPLES_PER_FRAME = 600  # the decoder's frames: 25 ms at 24 kHz


def one(engine: KokoroEngine, registry: VoiceRegistry, voice_id: str, lang: str, text: str) -> dict[str, float]:
    voice = registry.get(voice_id)
    t0 = time.perf_counter()
    phonemes = engine.phonemize(text, voice, lang)
    t1 = time.perf_counter()
    vocab, style = engine._get_vocab(), engine._style(voice.speaker)
    tokens = [vocab[ch] for ch in phonemes]
    row = style[len(tokens) - 1][np.newaxis, :]
    feeds = {"tokens": np.array([[0, *tokens, 0]], dtype=np.int64), "style": row,
             "speed": np.array([1.0], dtype=np.float32)}
    assert engine._session is not None and engine._decoder is not None
    durations, features, f0, energy = engine._session.run(None, feeds)
    t2 = time.perf_counter()
    features, f0, energy = drop_pad_frames(durations, features, f0, energy)
    out = engine._decoder.run(None, {FEATURES: features, F0: f0, ENERGY: energy, "style": row})[0]
    t3 = time.perf_counter()
    decoded = np.clip(np.asarray(out, dtype=np.float32).ravel(), -1.0, 1.0)
    kept = trim_silence(decoded, 24000)
    t4 = time.perf_counter()
    from rtts.sound.track import Track

    track = Track(48000, 20, "pcm16")
    frames = track.switch_rate(24000) + track.push(kept) + track.finish()
    t5 = time.perf_counter()
    return {"phonemes_ms": 1000 * (t1 - t0), "predictor_ms": 1000 * (t2 - t1), "decoder_ms": 1000 * (t3 - t2),
            "trim_ms": 1000 * (t4 - t3), "frames_ms": 1000 * (t5 - t4),
            "decoded_frames": features.shape[-1], "kept_frames": len(kept) / SAMPLES_PER_FRAME,
            "audio_s": len(kept) / 24000, "symbols": len(phonemes), "out_frames": len(frames)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args()
    config = Config()
    assert config.cache_dir is not None
    registry = VoiceRegistry.discover(config.models_dir, config.cache_dir, threads=2)
    engine = registry.engines["kokoro"]
    assert isinstance(engine, KokoroEngine)
    engine.load()
    print(f"host: {latency.cpu_model()}; host probe (latency.py probe_ms) {latency.probe_ms():.0f} ms; "
          f"median of {args.runs} runs a row")
    for voice, lang, text in CASES:  # warm every front end and shape
        one(engine, registry, voice, lang, text)
    print("| text | phoneme symbols | front end | predictor | decoder | trim | resample + frames | "
          "decoder frames run / kept | speech |")
    print("|---|---|---|---|---|---|---|---|---|")
    for voice, lang, text in CASES:
        runs = [one(engine, registry, voice, lang, text) for _ in range(args.runs)]
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(f"| {text} ({voice.split('/')[1]}) | {med['symbols']:.0f} | {med['phonemes_ms']:.1f} ms | "
              f"{med['predictor_ms']:.0f} ms | {med['decoder_ms']:.0f} ms | {med['trim_ms']:.1f} ms | "
              f"{med['frames_ms']:.1f} ms | {med['decoded_frames']:.0f} / {med['kept_frames']:.0f} | "
              f"{med['audio_s']:.2f} s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
