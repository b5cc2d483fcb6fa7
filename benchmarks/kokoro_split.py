#!/usr/bin/env python3
"""Can Kokoro's decoder stream? The experiment behind docs/history/benchmarks.md (issue 4).

    python3 benchmarks/kokoro_split.py

1. Cuts Kokoro v1.0 int8 in memory (``onnx`` package) into three graphs: the encoder
   side (tokens, style, speed -> aligned text features, F0, energy), the harmonic
   source's phase (F0 -> the CumSum that integrates it, 9 harmonics) and the decoder
   (features, F0, energy, style, phase -> audio). Cutting at the CumSum's output lets
   a window of the decoder get the phase of the whole utterance, so the phase is
   carried across windows exactly. Checks that the three graphs reproduce the whole
   model, and times each part.
2. Decodes the same encoder output in overlapping windows (context margins on both
   sides, thrown away) and reports the SNR against one-shot decoding.
3. Times the first chunk of the engine for first units of 10-40 characters (what
   ``--first-unit-chars-kokoro`` trades), and the same for Piper.

Times are the minimum of a few runs, so a busy machine inflates them less.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rtts.config import Config  # noqa: E402
from rtts.engines.kokoro import KokoroEngine  # noqa: E402
from rtts.engines.voices import VoiceRegistry  # noqa: E402
from rtts.host import sessions as rort  # noqa: E402
from rtts.text.split import split_units  # noqa: E402

# The tensors where the encoder side hands over to the decoder (see
# ../shared/research/performance.md section 6).
FEATURES, F0, ENERGY = "/encoder/MatMul_1_output_0", "/encoder/Reshape_output_0", "/encoder/Reshape_1_output_0"
TEXT = "The morning train to Boston leaves from platform four at ten thirty."
PARAGRAPH = TEXT + " Passengers should have their tickets ready before boarding."


def best(fn, runs: int = 3) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    times, out = [], None
    for _ in range(runs):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def snr_db(x: np.ndarray, ref: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(ref.astype(np.float64) ** 2) / max(np.sum((x - ref).astype(np.float64) ** 2), 1e-30)))


def main() -> int:
    config = Config()
    assert config.cache_dir is not None
    registry = VoiceRegistry.discover(config.models_dir, config.cache_dir, threads=2)
    kokoro = registry.engines["kokoro"]
    assert isinstance(kokoro, KokoroEngine)
    voice = registry.voices["kokoro/jf_alpha"]
    model = onnx.load(str(kokoro.model_path()))
    graph = model.graph
    phase = next(n for n in graph.node if n.op_type == "CumSum" and n.name.startswith("/decoder/")).output[0]
    reduce_means = sum(1 for n in graph.node if n.name.startswith("/decoder/") and n.op_type == "ReduceMean")
    extractor = onnx.utils.Extractor(model)
    parts = {
        "encoder": extractor.extract_model(["tokens", "style", "speed"], [FEATURES, F0, ENERGY]),
        "phase": extractor.extract_model([F0], [phase]),
        "decoder": extractor.extract_model([FEATURES, F0, ENERGY, "style", phase], [graph.output[0].name]),
    }
    opts = rort.session_options(2)
    sessions = {k: ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"]) for k, m in parts.items()}
    whole = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])

    kokoro.load()
    vocab = kokoro._get_vocab()
    tokens = [vocab[c] for c in kokoro.phonemize(TEXT, voice, "en")]
    style = kokoro._style(voice.speaker)[len(tokens) - 1][np.newaxis, :]
    feeds = {"tokens": np.array([[0, *tokens, 0]], np.int64), "style": style, "speed": np.array([1.0], np.float32)}

    t_enc, (feat, f0, energy) = best(lambda: sessions["encoder"].run(None, feeds))  # type: ignore[misc]
    t_phase, (ph,) = best(lambda: sessions["phase"].run(None, {F0: f0}))  # type: ignore[misc]
    dec_feeds = {FEATURES: feat, F0: f0, ENERGY: energy, "style": style, phase: ph}
    t_dec, (audio,) = best(lambda: sessions["decoder"].run(None, dec_feeds))  # type: ignore[misc]
    t_whole, (reference,) = best(lambda: whole.run(None, feeds))  # type: ignore[misc]
    audio, reference = audio.ravel(), reference.ravel()
    frames = feat.shape[2]
    hop = len(audio) // frames
    print(f"{len(tokens)} tokens -> {len(audio) / 24000:.2f} s of audio, {frames} frames of {hop} samples")
    print(f"whole model {t_whole:.3f} s; encoder side {t_enc:.3f} s, phase {t_phase:.4f} s, decoder {t_dec:.3f} s "
          f"({t_dec / (t_enc + t_phase + t_dec):.0%} of the cut model)")
    print(f"cut model vs whole: max abs difference {np.max(np.abs(audio - reference)):.2e}")
    print(f"decoder normalisation layers (ReduceMean over time, AdaIN): {reduce_means}")

    per = ph.shape[1] // frames
    for first, margin in ((20, 8), (20, 24), (40, 40)):
        pieces, start, size, first_time = [], 0, first, None
        while start < frames:
            stop = min(frames, start + size)
            lo, hi = max(0, start - margin), min(frames, stop + margin)
            window = {FEATURES: np.ascontiguousarray(feat[:, :, lo:hi]), F0: np.ascontiguousarray(f0[:, 2 * lo:2 * hi]),
                      ENERGY: np.ascontiguousarray(energy[:, 2 * lo:2 * hi]), "style": style,
                      phase: np.ascontiguousarray(ph[:, per * lo:per * hi])}
            took, (out,) = best(lambda: sessions["decoder"].run(None, window), runs=1)  # type: ignore[misc]
            first_time = took if first_time is None else first_time
            pieces.append(out.ravel()[(start - lo) * hop:(stop - lo) * hop])
            start, size = stop, size * 2
        windowed = np.concatenate(pieces)
        print(f"windows from {first} frames, margin {margin}: SNR vs one-shot {snr_db(windowed, audio):.1f} dB, "
              f"first window {first_time:.3f} s")

    for key in ("kokoro/jf_alpha", "piper/en_US-joe-medium"):
        v = registry.voices[key]
        engine = registry.engine_for(v)
        engine.load()
        for chars in (10, 16, 24, 40):
            unit = split_units(PARAGRAPH, first_max_chars=chars)[0].text

            def first_chunk() -> float:
                t = time.perf_counter()
                chunks = iter(engine.synthesize(unit, v, "en", 1.0))
                next(chunks)
                took = time.perf_counter() - t
                for _ in chunks:
                    pass
                return took

            took = min(first_chunk() for _ in range(3))
            t = time.perf_counter()
            total = sum(len(c) for c in engine.synthesize(unit, v, "en", 1.0))
            print(f"{key} first unit <= {chars} chars {unit!r}: first chunk {took * 1000:.0f} ms "
                  f"({total / engine.sample_rate:.2f} s of speech in the unit, all of it in {time.perf_counter() - t:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
