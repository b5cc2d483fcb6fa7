#!/usr/bin/env python3
"""Where the engines' time goes, and what they do about it (docs/history/benchmarks.md, issue 4).

    python3 benchmarks/engine_cost.py [load] [silence] [cut] [float-convs] [spinning] [piper] [static-convs] [graph] [profile] [rewrites] [snake]

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
* ``graph``: Kokoro's cut as exported against the engine's (convolutions as integer
  matrix products, ``conv_gemm``; instance normalizations fused, ``instance_norm``):
  time of each half per sentence, alternating, and how far the audio moved (largest
  sample difference, SNR); ``--wav-dir`` keeps the audio for the scorers. RTF: the
  compute over the audio once trimmed as the engine trims it.
* ``profile``: where the engine's Kokoro decoder spends its time, by operator.
* ``rewrites``: the decoder as exported, then with each rewrite of the cut added in turn
  (conv_gemm, instance_norm, cheaper_forms): time, and how far each step moved the audio.
* ``snake``: the engine's decoder with its 48 Snake activations as graph nodes against the
  same decoder with each as one native op (rtts/native, ``engines/snake``), as ``graph``
  compares (time per half and sentence, alternating; largest sample difference: 0).
  ``profile --native-snake`` profiles the decoder with the native op.
* ``static-convs``: the engine's decoder against one whose convolutions ``kokoro_quant``
  quantized statically (off in the engine), the same way.
* ``piper``: the Piper engine as it runs (encoder cut before its flow, windows sized
  by the audio in hand) against the previous build's way (whole encoder, then windows
  of 10 frames doubling up to 128): time to the first chunk for a waiting listener,
  and compute ÷ audio for a waiting listener and for a sentence that starts with 2 s
  of audio in hand.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kokoro_split import best  # noqa: E402  (the best of a few runs, as that experiment times)

from rtts.config import Config  # noqa: E402
from rtts.engines import kokoro_quant  # noqa: E402
from rtts.engines.kokoro import KokoroEngine, _load_style  # noqa: E402
from rtts.engines.trim import trim_silence  # noqa: E402
from rtts.engines.voices import VoiceRegistry  # noqa: E402
from rtts.host import sessions as rort  # noqa: E402

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
OWN = Path(__file__).resolve().parent / "sentences"
# A native voice per language where a style file has one (models/kokoro-voices.npz), else the
# built-in voice rtts routes that language to.
QUALITY_VOICES = {
    "en": ("af_heart", "jf_alpha"), "zh": ("zf_xiaoxiao", "jm_kumo"), "ja": ("jf_alpha",),
    "es": ("ef_dora", "jf_alpha"), "fr": ("ff_siwis", "jf_alpha"),
}


def graph(k: Kokoro, runs: int, wav_dir: Path | None = None, own: bool = False) -> None:
    """Kokoro's cut as exported against the engine's (convolutions as integer matrix
    products, instance normalizations fused: conv_gemm, instance_norm), each half of each
    graph on its own inputs, on the public sentences in en, zh, ja, es, fr (and with
    ``own``, benchmarks/sentences too), the two alternating."""
    import onnx

    from rtts.engines.kokoro_cut import cached_kokoro_cut, cut_kokoro

    predictor_path, decoder_path, _ = cached_kokoro_cut(k.model, k.cache_dir)
    predictor, decoder, _ = cut_kokoro(onnx.load(str(k.model)), as_exported=True)
    graphs = {
        "exported": (rort.open_session(predictor.SerializeToString(), 2), rort.open_session(decoder.SerializeToString(), 2)),
        "engine": (rort.open_session(predictor_path, 2), rort.open_session(decoder_path, 2)),
    }
    _compare(k, runs, wav_dir, graphs, own)


def static_convs(k: Kokoro, runs: int, wav_dir: Path | None = None, own: bool = False) -> None:
    """The engine's decoder against the one with kokoro_quant's convolutions static
    (off in the engine), on the same predictor output, as ``graph`` compares."""
    import onnx

    from rtts.engines.kokoro_cut import cached_kokoro_cut, cut_kokoro

    predictor_path, decoder_path, _ = cached_kokoro_cut(k.model, k.cache_dir)
    _, static, meta = cut_kokoro(onnx.load(str(k.model)), static=True)
    if "static_convs" not in meta:
        raise SystemExit(f"no static convolutions: {meta.get('static_error')}")
    predictor = rort.open_session(predictor_path, 2)
    graphs = {
        "engine": (predictor, rort.open_session(decoder_path, 2)),
        "static": (predictor, rort.open_session(static.SerializeToString(), 2)),
    }
    _compare(k, runs, wav_dir, graphs, own)


def snake(k: Kokoro, runs: int, wav_dir: Path | None = None, own: bool = False) -> None:
    """The engine's decoder, its Snakes as graph nodes, against the same with each Snake one
    native op (``rtts.native``, built here first if need be), on the same predictor."""
    from rtts.engines.kokoro_cut import cached_kokoro_cut
    from rtts.native import snake_library

    library, why = snake_library(k.cache_dir, env={**os.environ, "RTTS_NATIVE_SNAKE": "1"})
    if library is None:
        raise SystemExit(f"no native Snake op here: {why}")
    predictor_path, graph_decoder, _ = cached_kokoro_cut(k.model, k.cache_dir)
    _, native_decoder, meta = cached_kokoro_cut(k.model, k.cache_dir, native_snake=True)
    print(f"\n{meta['snakes']} Snakes as native ops ({why})")
    predictor = rort.open_session(predictor_path, 2)
    graphs = {
        "graph Snakes": (predictor, rort.open_session(graph_decoder, 2)),
        "native Snakes": (predictor, rort.open_session(native_decoder, 2, custom_ops=library)),
    }
    _compare(k, runs, wav_dir, graphs, own)


def _compare(k: Kokoro, runs: int, wav_dir: Path | None, graphs: dict, own: bool) -> None:
    """Time two (predictor, decoder) pairs on the same sentences, alternating so that a
    drifting host slows both alike; print how far the audio moved (largest sample
    difference, SNR). With ``wav_dir``, write each one's audio (trimmed as the engine
    does) and NAME.json for asr_score.py and dnsmos_score.py."""
    import json

    from rtts.engines.kokoro_cut import ENERGY, F0, FEATURES, drop_pad_frames
    from rtts.sound.audio import wav_bytes

    first, second = graphs
    styles = _load_style(k.engine._get_pack().voices)
    extra = Path(__file__).resolve().parents[1] / "models" / "kokoro-voices.npz"
    if extra.exists():
        styles.update(_load_style(extra))
    vocab = k.engine._get_vocab()
    sets = [("public", json.loads(PUBLIC.read_text()))]
    if own:
        sets += [(path.stem, json.loads(path.read_text())) for path in sorted(OWN.glob("*.json")) if path.stem != "mixed"]
    items: dict[str, list[dict]] = {name: [] for name in graphs}
    print(f"\n| sentences | lang | voice | n | audio | {first}: predictor, decoder (RTF) | {second}: predictor, decoder (RTF) "
          "| decoder ratio | max abs difference | SNR |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    totals = {name: [0.0, 0.0] for name in graphs}
    seconds_all = 0.0
    for set_name, sentences in sets:
        for lang, choices in QUALITY_VOICES.items():
            if lang not in sentences:
                continue
            voice = next(v for v in choices if v in styles)
            took = {name: [0.0, 0.0] for name in graphs}
            seconds, worst, snrs = 0.0, 0.0, []
            for n, sentence in enumerate(sentences[lang]):
                text = sentence["text"] if isinstance(sentence, dict) else sentence  # en-numbers.json: with a reference
                tokens = [vocab[ch] for ch in k.engine.phonemize(text, voice, lang)]
                style = styles[voice][min(len(tokens), 510) - 1][np.newaxis, :]
                feeds = {"tokens": np.array([[0, *tokens, 0]]), "style": style, "speed": np.array([1.0], np.float32)}
                out = {}
                for _ in range(runs):
                    for name, (predictor, decoder) in graphs.items():
                        tp, halves = best(lambda p=predictor: p.run(None, feeds), 1)
                        inputs = dict(zip([FEATURES, F0, ENERGY], drop_pad_frames(*halves)), style=style)  # type: ignore[misc]
                        td, out[name] = best(lambda d=decoder, i=inputs: d.run(None, i)[0].ravel(), 1)
                        took[name][0] += tp / runs
                        took[name][1] += td / runs
                a, b = out[first], out[second]
                seconds += trim_silence(np.clip(a, -1, 1), RATE).size / RATE  # what a listener gets
                if a.size == b.size:  # a predictor that moved a duration changes the length
                    worst = max(worst, float(np.abs(a - b).max()))
                    noise = np.sum((a - b).astype(np.float64) ** 2)  # 0 when the audio is the same
                    snrs.append(10 * np.log10(np.sum(a.astype(np.float64) ** 2) / noise) if noise else np.inf)
                if wav_dir is not None:
                    wav_dir.mkdir(parents=True, exist_ok=True)
                    for name, audio in out.items():
                        wav = wav_dir / f"{name}-{set_name}-{lang}-{n}.wav"
                        wav.write_bytes(wav_bytes(trim_silence(np.clip(audio, -1, 1), RATE), RATE))
                        items[name].append({"lang": lang, "text": sentence.get("ref", text) if isinstance(sentence, dict) else text,
                                            "wav": str(wav), "set": set_name})
            cells = []
            for name in graphs:
                totals[name][0] += took[name][0]
                totals[name][1] += took[name][1]
                cells.append(f"{took[name][0]:.2f} s, {took[name][1]:.2f} s ({sum(took[name]) / seconds:.3f})")
            seconds_all += seconds
            same = f"{worst:.3f} | {np.mean(snrs):.1f} dB ({len(snrs)} of {len(sentences[lang])} same length)" if snrs else "– | –"
            print(f"| {set_name} | {lang} | {voice} | {len(sentences[lang])} | {seconds:.1f} s | {cells[0]} | {cells[1]} | "
                  f"{took[second][1] / took[first][1]:.2f} | {same} |")
    cells = [f"{totals[n][0]:.2f} s, {totals[n][1]:.2f} s ({sum(totals[n]) / seconds_all:.3f})" for n in graphs]
    print(f"| all | | | | {seconds_all:.1f} s | {cells[0]} | {cells[1]} | {totals[second][1] / totals[first][1]:.2f} | | |")
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
        took_prior, (z_p, mask, _) = best(lambda ids=ids: engine.prior(ids, None, 1.0), runs)
        took_flow, _ = best(lambda z_p=z_p, mask=mask: engine.flow(z_p, mask, None, 0, z_p.shape[-1]), runs)
        print(f"| {text!r} | {len(ids)} | {z_p.shape[-1]} | {took_prior * 1000:.0f} ms | {took_flow * 1000:.0f} ms |")


def profile(k: Kokoro, runs: int, native_snake: bool = False) -> None:
    """Where the engine's Kokoro decoder spends its time, by operator (onnxruntime's
    profiler, 2 threads, the mean of ``runs`` runs on one sentence); with ``native_snake``,
    the decoder whose Snakes are the native op."""
    import collections
    import json

    import onnxruntime as ort

    from rtts.engines.kokoro_cut import ENERGY, F0, FEATURES, cached_kokoro_cut, drop_pad_frames
    from rtts.native import snake_library

    library = snake_library(k.cache_dir, env={**os.environ, "RTTS_NATIVE_SNAKE": "1"})[0] if native_snake else None
    if native_snake and library is None:
        raise SystemExit("no native Snake op here")
    predictor_path, _, _ = cached_kokoro_cut(k.model, k.cache_dir)
    _, decoder_path, _ = cached_kokoro_cut(k.model, k.cache_dir, native_snake=native_snake)
    text = SENTENCE + " And then it runs away into the forest."
    feeds = k.feeds(text)
    halves = rort.open_session(predictor_path, 2).run(None, feeds)
    inputs = dict(zip([FEATURES, F0, ENERGY], drop_pad_frames(*halves)), style=feeds["style"])
    options = rort.session_options(2, library)
    options.enable_profiling = True
    with tempfile.TemporaryDirectory() as tmp:
        options.profile_file_prefix = str(Path(tmp) / "decoder")
        session = ort.InferenceSession(str(decoder_path), options, providers=["CPUExecutionProvider"])
        audio = session.run(None, inputs)[0]
        for _ in range(runs):
            session.run(None, inputs)
        events = json.loads(Path(session.end_profiling()).read_text())
    per_op: collections.Counter[str] = collections.Counter()
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            per_op[event["args"]["op_name"]] += event["dur"] / 1000 / (runs + 1)
    total = sum(per_op.values())
    print(f"\n{audio.size / RATE:.2f} s of audio, {total:.0f} ms in kernels per run\n\n| operator | ms | share |\n|---|---|---|")
    for op, ms in per_op.most_common(12):
        print(f"| {op} | {ms:.1f} | {ms / total:.1%} |")


def rewrites(k: Kokoro, runs: int) -> None:
    """Kokoro's decoder as exported, then with each of the cut's rewrites added in turn
    (conv_gemm, instance_norm, cheaper_forms), all on the same predictor output for the
    public sentences in en, zh and ja, alternating; how far each step moved the audio
    from the step before (identical: the largest sample difference is 0)."""
    import json

    import onnx

    from rtts.engines.cheaper_forms import squares_as_products
    from rtts.engines.conv_gemm import gemm_convs
    from rtts.engines.instance_norm import fuse_instance_norms
    from rtts.engines.kokoro_cut import ENERGY, F0, FEATURES, cached_kokoro_cut, cut_kokoro, drop_pad_frames

    predictor_path, _, _ = cached_kokoro_cut(k.model, k.cache_dir)
    _, decoder, _ = cut_kokoro(onnx.load(str(k.model)), as_exported=True)
    steps = {"exported": decoder.SerializeToString()}
    for name, rewrite in (("+ conv_gemm", gemm_convs), ("+ instance_norm", fuse_instance_norms),
                          ("+ cheaper_forms", squares_as_products)):
        rewrite(decoder)
        steps[name] = decoder.SerializeToString()
    sessions = {name: rort.open_session(graph, 2) for name, graph in steps.items()}
    predictor = rort.open_session(predictor_path, 2)
    styles = _load_style(k.engine._get_pack().voices)
    styles.update(_load_style(Path(__file__).resolve().parents[1] / "models" / "kokoro-voices.npz"))
    vocab = k.engine._get_vocab()
    took = dict.fromkeys(sessions, 0.0)
    worst = dict.fromkeys(sessions, 0.0)
    seconds = 0.0
    sentences = json.loads(PUBLIC.read_text())
    for lang in ("en", "zh", "ja"):
        voice = next(v for v in QUALITY_VOICES[lang] if v in styles)
        for text in sentences[lang]:
            tokens = [vocab[ch] for ch in k.engine.phonemize(text, voice, lang)]
            style = styles[voice][len(tokens) - 1][np.newaxis, :]
            feeds = {"tokens": np.array([[0, *tokens, 0]]), "style": style, "speed": np.array([1.0], np.float32)}
            inputs = dict(zip([FEATURES, F0, ENERGY], drop_pad_frames(*predictor.run(None, feeds))), style=style)
            out = {}
            for _ in range(runs):
                for name, session in sessions.items():
                    t, out[name] = best(lambda s=session: s.run(None, inputs)[0].ravel(), 1)
                    took[name] += t / runs
            seconds += trim_silence(np.clip(out["exported"], -1, 1), RATE).size / RATE
            names = list(out)
            for before, after in zip(names, names[1:]):
                worst[after] = max(worst[after], float(np.abs(out[after] - out[before]).max()))
    print(f"\n{seconds:.1f} s of audio\n\n| decoder | time (RTF) | × the step before | largest sample difference from it |\n|---|---|---|---|")
    previous = None
    for name, t in took.items():
        ratio = f"{t / took[previous]:.2f}" if previous else "–"
        moved = f"{worst[name]:.3g}" if previous else "–"
        print(f"| {name} | {t:.2f} s ({t / seconds:.3f}) | {ratio} | {moved} |")
        previous = name


EXPERIMENTS = {
    "load": load, "silence": silence, "cut": cut, "float-convs": float_convs, "spinning": spinning, "piper": piper,
    "static-convs": static_convs, "graph": graph, "profile": profile,
    "rewrites": rewrites, "snake": snake,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiments", nargs="*", metavar="EXPERIMENT", help=", ".join(EXPERIMENTS))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--wav-dir", type=Path, help="graph, static-convs: keep both graphs' audio here for the scorers")
    parser.add_argument("--own", action="store_true", help="graph, static-convs, snake: benchmarks/sentences too")
    parser.add_argument("--native-snake", action="store_true", help="profile: the decoder with the native Snake op")
    args = parser.parse_args()
    unknown = set(args.experiments) - set(EXPERIMENTS)
    if unknown:
        parser.error(f"unknown experiment {', '.join(sorted(unknown))}; choose from {', '.join(EXPERIMENTS)}")
    cache_dir = Config().cache_dir
    assert cache_dir is not None  # Config fills in the default
    k = Kokoro(cache_dir)
    print(f"units: {UNITS}")
    for name in args.experiments or EXPERIMENTS:
        extra = {"wav_dir": args.wav_dir, "own": args.own} if name in ("static-convs", "graph", "snake") else {}
        if name == "profile":
            extra = {"native_snake": args.native_snake}
        EXPERIMENTS[name](k, args.runs, **extra)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
