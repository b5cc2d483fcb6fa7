#!/usr/bin/env python3
"""Where the engines' time goes, and what they do about it (docs/benchmarks.md, issue 4).

    python3 benchmarks/engine_cost.py [load] [silence] [cut] [float-convs] [spinning] [piper]

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
        onnx.save(_dequantize_convs(onnx.load(str(k.model))), str(path))
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


def _dequantize_convs(model):  # type: ignore[no-untyped-def]
    """ConvInteger(DynamicQuantize(x), w) [+ bias] -> Cast -> Mul(scale) becomes Conv(x, w·scale, bias)."""
    from collections import defaultdict

    from onnx import helper
    from onnx import numpy_helper as nh

    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    consumers = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            consumers[name].append(node)
    replace, drop, added = {}, set(), []
    for conv in [n for n in graph.node if n.op_type == "ConvInteger"]:
        x = producer[conv.input[0]].input[0]  # the float input of DynamicQuantizeLinear
        chain, bias, node = [conv], None, consumers[conv.output[0]][0]
        if node.op_type == "Add":  # the quantized bias: walk back to Div(bias, scale)
            back = producer[next(i for i in node.input if i != conv.output[0])]
            while back.op_type != "Div":
                back = producer[back.input[0]]
            bias = back.input[0]
            chain.append(node)
            node = consumers[node.output[0]][0]
        chain.append(node)  # Cast
        mul = consumers[node.output[0]][0]
        chain.append(mul)
        scale_node = producer[next(i for i in mul.input if i != node.output[0])]
        w_scale = nh.to_array(inits[next(i for i in scale_node.input if i in inits)]).astype(np.float32)
        w = nh.to_array(inits[conv.input[1]]).astype(np.float32)
        zero = nh.to_array(inits[conv.input[3]]).astype(np.float32) if len(conv.input) > 3 and conv.input[3] else 0.0
        added.append(nh.from_array(((w - zero) * w_scale).astype(np.float32), conv.input[1] + "_float"))
        new = helper.make_node("Conv", [x, conv.input[1] + "_float", *([bias] if bias else [])], [mul.output[0]])
        new.attribute.extend(conv.attribute)
        replace[id(mul)] = new
        drop.update(id(n) for n in chain)
    nodes = [replace.get(id(n), n) for n in graph.node if id(n) in replace or id(n) not in drop]
    outputs = {o.name for o in graph.output}
    while True:  # drop what no longer feeds anything (the activations' quantization)
        used = {i for n in nodes for i in n.input} | outputs
        kept = [n for n in nodes if any(o in used for o in n.output)]
        if len(kept) == len(nodes):
            break
        nodes = kept
    del graph.node[:]
    graph.node.extend(nodes)
    used = {i for n in nodes for i in n.input}
    initializers = [i for i in graph.initializer if i.name in used] + added
    del graph.initializer[:]
    graph.initializer.extend(initializers)
    return model


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
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiments", nargs="*", metavar="EXPERIMENT", help=", ".join(EXPERIMENTS))
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    unknown = set(args.experiments) - set(EXPERIMENTS)
    if unknown:
        parser.error(f"unknown experiment {', '.join(sorted(unknown))}; choose from {', '.join(EXPERIMENTS)}")
    cache_dir = Config().cache_dir
    assert cache_dir is not None  # Config fills in the default
    k = Kokoro(cache_dir)
    print(f"units: {UNITS}")
    for name in args.experiments or EXPERIMENTS:
        EXPERIMENTS[name](k, args.runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
