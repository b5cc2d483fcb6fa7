#!/usr/bin/env python3
"""Where the engines' time goes, and what they do about it (docs/benchmarks.md, issue 4).

    python3 benchmarks/engine_cost.py [load] [silence] [cut] [float-convs] [spinning] [piper] [static-convs]

With no argument, every experiment runs (a few minutes on 2 cores). Each prints a
table; times are the best of ``--runs`` runs, so a busy machine inflates them less.

* ``load``: opening the Kokoro model with ONNX Runtime's optimizer, against loading
  the optimized graph kept in a cache dir (what ``Host.open`` does).
* ``silence``: for first units of growing length, the audio the whole model generates,
  the speech left once ``trim_silence`` has cut the edges, and the compute.
* ``cut``: the engine cut after its predictor (pads' frames dropped, ``kokoro_cut``)
  against the same engine running the whole model.
* ``float-convs``: the 87 ConvInteger nodes rewritten as float Conv (weights
  dequantized once), against the int8 model: speed and file size.
* ``spinning``: ONNX Runtime's intra-op threads allowed to spin, against not.
* ``static-convs``: Kokoro's decoder as exported against the engine's, whose convolutions
  ``kokoro_quant`` quantized statically: time per unit, alternating, and how far the
  audio moved (largest sample difference, SNR).
* ``piper``: the Piper engine as it runs (encoder cut before its flow, windows sized
  by the audio in hand) against the previous build's way (whole encoder, then windows
  of 10 frames doubling up to 128): time to the first chunk for a waiting listener,
  and compute ÷ audio for a waiting listener and for a sentence that starts with 2 s
  of audio in hand.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from rtts.config import Config  # noqa: E402
from rtts.host import sessions as rort  # noqa: E402
from rtts.engines.kokoro import KokoroEngine, _load_style  # noqa: E402
from rtts.engines.trim import trim_silence  # noqa: E402
from rtts.voices import VoiceRegistry  # noqa: E402
from rtts.engines import kokoro_quant  # noqa: E402
from kokoro_split import best  # noqa: E402  (the best of a few runs, as that experiment times)

SENTENCE = "The quick brown fox jumps over the lazy dog near the river bank."
UNITS = ["The quick brown", "Your table is ready.", SENTENCE]
STYLE = "jf_alpha"
RATE = 24_000


class Kokoro:
    """The built-in Kokoro engine, for its phonemes, styles and model file."""

    def __init__(self, cache_dir: Path) -> None:
        self.cache_dir = cache_dir
        registry = VoiceRegistry.discover(None, cache_dir, threads=2)
        self.voice = registry.voices[f"kokoro/{STYLE}"]
        engine = registry.engine_for(self.voice)
        assert isinstance(engine, KokoroEngine)
        self.engine = engine
        self.model = engine.model_path()
        self.styles = _load_style(engine._get_pack().voices)[STYLE]

    def feeds(self, text: str) -> dict[str, np.ndarray]:
        tokens = [self.engine._get_vocab()[ch] for ch in self.engine.phonemize(text, STYLE, "en")]
        return {
            "tokens": np.array([[0, *tokens, 0]], dtype=np.int64),
            "style": self.styles[len(tokens) - 1][np.newaxis, :],
            "speed": np.array([1.0], dtype=np.float32),
        }


def load(k: Kokoro, runs: int) -> None:
    plain, _ = best(lambda: rort.open_session(k.model, 2), runs)
    with tempfile.TemporaryDirectory() as tmp:
        first, _ = best(lambda: rort.open_session(k.model, 2, cache_dir=Path(tmp)), 1)
        kept, _ = best(lambda: rort.open_session(k.model, 2, cache_dir=Path(tmp)), runs)
    print("\n| Kokoro load | seconds |\n|---|---|")
    print(f"| optimized at every load | {plain:.2f} |\n| first load, keeping the optimized graph | {first:.2f} |")
    print(f"| later loads, from the kept graph | {kept:.2f} |")


def silence(k: Kokoro, runs: int) -> None:
    session = rort.open_session(k.model, 2)
    print("\n| first unit | tokens | audio generated | speech after trimming | compute |\n|---|---|---|---|---|")
    for n in (9, 15, 25, 39, len(SENTENCE)):
        feeds = k.feeds(SENTENCE[:n])
        took, out = best(lambda feeds=feeds: session.run(None, feeds)[0].ravel(), runs)
        speech = trim_silence(np.clip(out, -1, 1), RATE)  # type: ignore[arg-type]
        print(f"| {SENTENCE[:n]!r} | {feeds['tokens'].shape[1] - 2} | {out.size / RATE:.2f} s | "  # type: ignore[union-attr]
              f"{speech.size / RATE:.2f} s | {took * 1000:.0f} ms |")


def cut(k: Kokoro, runs: int) -> None:
    k.engine.load()
    if k.engine._decoder is None:
        raise SystemExit("the engine did not cut Kokoro (see the log)")
    whole = KokoroEngine(model_path_fn=lambda: k.model, threads=2)  # no cache dir: never cut
    print("\n| unit | whole model | cut, pads' frames dropped | saved |\n|---|---|---|---|")
    for text in UNITS:
        row = []
        for engine in (whole, k.engine):
            took, audio = best(lambda e=engine: np.concatenate(list(e.synthesize(text, k.voice, "en", 1.0))), runs)
            row.append((took, audio.size / RATE))  # type: ignore[union-attr]
        (tw, aw), (tc, ac) = row
        print(f"| {text!r} | {tw * 1000:.0f} ms ({aw:.2f} s) | {tc * 1000:.0f} ms ({ac:.2f} s) | {1 - tc / tw:.0%} |")


def float_convs(k: Kokoro, runs: int) -> None:
    import onnx

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kokoro-float-convs.onnx"
        model = onnx.load(str(k.model))
        kokoro_quant.float_convs(model)
        onnx.save(model, str(path))
        rows = [("int8 (ConvInteger)", k.model), ("float Conv", path)]
        print("\n| model | file | RTF on each unit |\n|---|---|---|")
        for label, model in rows:
            session = rort.open_session(model, 2)
            rtfs = []
            for text in UNITS:
                feeds = k.feeds(text)
                took, out = best(lambda s=session, f=feeds: s.run(None, f)[0], runs)
                rtfs.append(took / (out.size / RATE))  # type: ignore[union-attr]
            print(f"| {label} | {model.stat().st_size / 2**20:.0f} MB | {', '.join(f'{r:.2f}' for r in rtfs)} |")


PUBLIC = Path(__file__).resolve().parents[2] / "shared" / "tools" / "sentences-public.json"
# A native voice per language where a style file has one (models/kokoro-voices.npz), else the
# built-in voice rtts routes that language to.
QUALITY_VOICES = {"en": ("af_heart", "jf_alpha"), "zh": ("zf_xiaoxiao", "jm_kumo"), "ja": ("jf_alpha",)}


def static_convs(k: Kokoro, runs: int, wav_dir: Path | None = None) -> None:
    """The decoder as exported (every convolution dynamically quantized) against the
    engine's (kokoro_quant's convolutions static), on the same predictor output for the
    public sentences in en, zh and ja, the two alternating so that a drifting host slows
    both alike. With ``wav_dir``, writes both decoders' audio (trimmed as the engine
    does) and ``exported.json`` / ``static.json`` for asr_score.py and dnsmos_score.py."""
    import json

    import onnx

    from rtts.audio import wav_bytes
    from rtts.engines.kokoro_cut import ENERGY, F0, FEATURES, cached_kokoro_cut, cut_kokoro, drop_pad_frames

    predictor_path, decoder_path, meta = cached_kokoro_cut(k.model, k.cache_dir)
    if "static_convs" not in meta:
        raise SystemExit(f"the cut has no static convolutions: {meta.get('static_error')}")
    _, exported, _ = cut_kokoro(onnx.load(str(k.model)), static=False)
    predictor = rort.open_session(predictor_path, 2)
    decoders = {"exported": rort.open_session(exported.SerializeToString(), 2), "static": rort.open_session(decoder_path, 2)}
    styles = _load_style(k.engine._get_pack().voices)
    extra = Path(__file__).resolve().parents[1] / "models" / "kokoro-voices.npz"
    if extra.exists():
        styles.update(_load_style(extra))
    vocab = k.engine._get_vocab()
    sentences = json.loads(PUBLIC.read_text())
    items: dict[str, list[dict]] = {name: [] for name in decoders}
    print("\n| lang | voice | sentences | audio | decoder as exported (RTF) | static convolutions (RTF) | ratio | max abs difference | SNR |")
    print("|---|---|---|---|---|---|---|---|---|")
    totals = dict.fromkeys(decoders, 0.0)
    for lang, choices in QUALITY_VOICES.items():
        voice = next(v for v in choices if v in styles)
        took = dict.fromkeys(decoders, 0.0)
        seconds, worst, snrs = 0.0, 0.0, []
        for n, text in enumerate(sentences[lang]):
            tokens = [vocab[ch] for ch in k.engine.phonemize(text, voice, lang)]
            style = styles[voice][len(tokens) - 1][np.newaxis, :]
            feeds = {"tokens": np.array([[0, *tokens, 0]]), "style": style, "speed": np.array([1.0], np.float32)}
            durations, features, f0, energy = predictor.run(None, feeds)
            inputs = dict(zip([FEATURES, F0, ENERGY], drop_pad_frames(durations, features, f0, energy)), style=style)
            out = {}
            for _ in range(runs):
                for name, session in decoders.items():
                    t, out[name] = best(lambda s=session: s.run(None, inputs)[0].ravel(), 1)
                    took[name] += t / runs
            a, b = out["exported"], out["static"]
            seconds += a.size / RATE
            worst = max(worst, float(np.abs(a - b).max()))
            snrs.append(10 * np.log10(np.sum(a.astype(np.float64) ** 2) / np.sum((a - b).astype(np.float64) ** 2)))
            if wav_dir is not None:
                wav_dir.mkdir(parents=True, exist_ok=True)
                for name, audio in out.items():
                    wav = wav_dir / f"{name}-{lang}-{n}.wav"
                    wav.write_bytes(wav_bytes(trim_silence(np.clip(audio, -1, 1), RATE), RATE))
                    items[name].append({"lang": lang, "text": text, "wav": str(wav)})
        ta, tb = took["exported"], took["static"]
        totals["exported"] += ta
        totals["static"] += tb
        print(f"| {lang} | {voice} | {len(sentences[lang])} | {seconds:.1f} s | {ta:.2f} s ({ta / seconds:.3f}) | "
              f"{tb:.2f} s ({tb / seconds:.3f}) | {tb / ta:.2f} | {worst:.3f} | {np.mean(snrs):.1f} dB |")
    print(f"| all | | | | {totals['exported']:.2f} s | {totals['static']:.2f} s | {totals['static'] / totals['exported']:.2f} | | |")
    if wav_dir is not None:
        for name, listed in items.items():
            (wav_dir / f"{name}.json").write_text(json.dumps(listed, ensure_ascii=False, indent=1))


def spinning(k: Kokoro, runs: int) -> None:
    import onnxruntime as ort

    print("\n| intra-op threads | RTF on each unit |\n|---|---|")
    for label, spin in (("not spinning (rtts)", "0"), ("spinning", "1")):
        opts = rort.session_options(2)
        opts.add_session_config_entry("session.intra_op.allow_spinning", spin)
        session = ort.InferenceSession(str(k.model), opts, providers=["CPUExecutionProvider"])
        rtfs = []
        for text in UNITS:
            feeds = k.feeds(text)
            took, out = best(lambda f=feeds: session.run(None, f)[0], runs)
            rtfs.append(took / (out.size / RATE))  # type: ignore[union-attr]
        print(f"| {label} | {', '.join(f'{r:.2f}' for r in rtfs)} |")


def piper(k: Kokoro, runs: int) -> None:
    import time

    from rtts.engines.piper import PiperEngine, phoneme_ids

    registry = VoiceRegistry.discover(None, k.cache_dir, threads=2)
    voice = registry.voices["piper/en_US-joe-medium"]
    engine = registry.engine_for(voice)
    assert isinstance(engine, PiperEngine)
    engine.load()
    if engine._prior is None:
        raise SystemExit("the engine did not cut Piper's encoder before its flow (see the log)")
    before = PiperEngine(engine.key, engine.model_path, engine.config, 2, k.cache_dir)
    before._load_flow_cut = lambda path: None  # type: ignore[method-assign]  # the whole encoder
    before.load()
    rate = engine.sample_rate

    def previous_build(text: str) -> tuple[float, float, float]:
        t0 = time.perf_counter()
        latent = before.encode(phoneme_ids(before.phonemize(text), before.config), None, 1.0)
        chunks = before.decode_windows(latent, None)  # windows of 10 frames, doubling up to 128
        first = next(chunks)
        took_first = time.perf_counter() - t0
        samples = first.size + sum(c.size for c in chunks)
        return took_first, time.perf_counter() - t0, samples / rate

    def now(text: str, lead_s: float) -> tuple[float, float, float]:
        t0 = time.perf_counter()
        chunks = engine.synthesize(text, voice, "en", 1.0, lead_s)
        first = next(chunks)
        took_first = time.perf_counter() - t0
        samples = first.size + sum(c.size for c in chunks)
        return took_first, time.perf_counter() - t0, samples / rate

    texts = ["The morning train to Boston leaves from", "Passengers should have their tickets ready before boarding.", SENTENCE]
    print("\n| unit | first chunk, before | first chunk, now | RTF before | RTF now, listener waiting | RTF now, 2 s in hand |")
    print("|---|---|---|---|---|---|")
    for text in texts:
        rows = [
            [previous_build(text) for _ in range(runs)],
            [now(text, 0.0) for _ in range(runs)],
            [now(text, 2.0) for _ in range(runs)],
        ]
        firsts = [min(r[0] for r in row) for row in rows]
        rtfs = [min(r[1] / r[2] for r in row) for row in rows]
        print(f"| {text!r} | {firsts[0] * 1000:.0f} ms | {firsts[1] * 1000:.0f} ms | {rtfs[0]:.3f} | {rtfs[1]:.3f} | {rtfs[2]:.3f} |")
    print("\n| unit | phoneme ids | latent frames | encoder before its flow | flow |\n|---|---|---|---|---|")
    for text in texts:
        ids = phoneme_ids(engine.phonemize(text), engine.config)
        took_prior, (z_p, mask) = best(lambda ids=ids: engine.prior(ids, None, 1.0), runs)
        took_flow, _ = best(lambda z_p=z_p, mask=mask: engine.flow(z_p, mask, None, 0, z_p.shape[-1]), runs)
        print(f"| {text!r} | {len(ids)} | {z_p.shape[-1]} | {took_prior * 1000:.0f} ms | {took_flow * 1000:.0f} ms |")


EXPERIMENTS = {
    "load": load, "silence": silence, "cut": cut, "float-convs": float_convs, "spinning": spinning, "piper": piper,
    "static-convs": static_convs,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiments", nargs="*", metavar="EXPERIMENT", help=", ".join(EXPERIMENTS))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--wav-dir", type=Path, help="static-convs: keep both decoders' audio here for the scorers")
    args = parser.parse_args()
    unknown = set(args.experiments) - set(EXPERIMENTS)
    if unknown:
        parser.error(f"unknown experiment {', '.join(sorted(unknown))}; choose from {', '.join(EXPERIMENTS)}")
    cache_dir = Config().cache_dir
    assert cache_dir is not None  # Config fills in the default
    k = Kokoro(cache_dir)
    print(f"units: {UNITS}")
    for name in args.experiments or EXPERIMENTS:
        extra = {"wav_dir": args.wav_dir} if name == "static-convs" else {}
        EXPERIMENTS[name](k, args.runs, **extra)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
