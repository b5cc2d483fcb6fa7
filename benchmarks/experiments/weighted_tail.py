"""Not decoding a Kokoro run's trailing silence, its normalizations' statistics weighted
to stand for it: tried and dropped (docs/history/benchmarks.md, Kokoro's compute).

    python3 benchmarks/experiments/weighted_tail.py

A run's decoder goes over the silence its last phoneme runs on into (a Mandarin tone mark
and a comma: 26 of the 63 frames of "请注意，"), and the trim throws it away; decoding
without it changed every sample, since the decoder's 54 instance normalizations take
their statistics over those frames too (the three earlier tries: CER up). Here each
normalization is rewritten to weighted statistics (a ``tail_weight`` input at the frame
rate, repeated to each layer's length), the run is decoded up to TAIL frames past its
last sounding symbol, and its last frames, or the run's own last frames of deep silence
appended, are weighted to stand for the frames left out. It prints, for each text, the
SNR against decoding the whole run, over what the trim keeps: the rewritten graph with
every weight 1 (the floor: the int8 graph amplifies float rounding to ~20 dB), cut
without weights, and cut with each weighting; and the decoder's time (best of 3).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper
from onnx import numpy_helper as nh

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import latency  # cpu_model, probe_ms
from kokoro_split import best, snr_db

from rtts.config import Config
from rtts.engines.kokoro import _lead_dropped
from rtts.engines.kokoro_cut import drop_pad_frames
from rtts.engines.kokoro_tensors import ENERGY, F0, FEATURES
from rtts.engines.trim import silence_bounds
from rtts.engines.voices import VoiceRegistry

SILENT = frozenset(" ,.?!:;—…\"“”()«»¡¿↓↗↘→")  # no sound of their own at a run's end
TAIL = 6
CASES = (
    ("kokoro/zf_xiaoxiao", "zh", "请注意，"), ("kokoro/zf_xiaoxiao", "zh", "欢迎光临。"),
    ("kokoro/zf_xiaoxiao", "zh", "各位旅客"), ("kokoro/zf_xiaoxiao", "zh", "图书馆每周一"),
    ("kokoro/zf_xiaoxiao", "zh", "本次列车开往上海虹桥，"), ("kokoro/zm_yunxi", "zh", "今天的气温是二十五度，"),
    ("kokoro/jf_alpha", "ja", "東京駅へようこそ。"), ("kokoro/af_heart", "en", "Please stand clear of the closing doors."),
)


def weighted(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with each InstanceNormalization over weighted statistics (its scale and
    bias are ones and zeros in this cut: the AdaIN's affine step follows)."""
    g = model.graph
    g.input.append(helper.make_tensor_value_info("tail_weight", TensorProto.FLOAT, [1, 1, "F"]))
    g.initializer.extend([nh.from_array(np.array([2], np.int64), "wt_ax"), nh.from_array(np.array(2, np.int64), "wt_two"),
                          nh.from_array(np.array(0, np.int64), "wt_zero"), nh.from_array(np.array(1, np.int64), "wt_one")])
    nodes = [helper.make_node("Shape", ["tail_weight"], ["wt_wshape"]),
             helper.make_node("Gather", ["wt_wshape", "wt_two"], ["wt_F"], axis=0)]
    for n, node in enumerate(g.node):
        if node.op_type != "InstanceNormalization":
            nodes.append(node)
            continue
        eps = next((a.f for a in node.attribute if a.name == "epsilon"), 1e-5)
        x, y, p = node.input[0], node.output[0], f"wt{n}_"
        g.initializer.append(nh.from_array(np.array(eps, np.float32), p + "eps"))
        step = [("Shape", [x], "shape", {}), ("Gather", [p + "shape", "wt_two"], "L", {"axis": 0}),
                ("Range", ["wt_zero", p + "L", "wt_one"], "r", {}), ("Mul", [p + "r", "wt_F"], "rF", {}),
                ("Div", [p + "rF", p + "L"], "idx", {}), ("Gather", ["tail_weight", p + "idx"], "w", {"axis": 2}),
                ("ReduceSum", [p + "w", "wt_ax"], "W", {"keepdims": 1}), ("Mul", [x, p + "w"], "xw", {}),
                ("ReduceSum", [p + "xw", "wt_ax"], "s", {"keepdims": 1}), ("Div", [p + "s", p + "W"], "m", {}),
                ("Sub", [x, p + "m"], "d", {}), ("Mul", [p + "d", p + "d"], "d2", {}),
                ("Mul", [p + "d2", p + "w"], "d2w", {}), ("ReduceSum", [p + "d2w", "wt_ax"], "vs", {"keepdims": 1}),
                ("Div", [p + "vs", p + "W"], "v", {}), ("Add", [p + "v", p + "eps"], "ve", {}),
                ("Sqrt", [p + "ve"], "sd", {})]
        nodes += [helper.make_node(op, ins, [p + out], **attrs) for op, ins, out, attrs in step]
        nodes.append(helper.make_node("Div", [p + "d", p + "sd"], [y]))
    del g.node[:]
    g.node.extend(nodes)
    return model


def snr(x: np.ndarray, ref: np.ndarray) -> float:
    """``snr_db`` over the samples both have: a run decoded short may end sooner."""
    n = min(len(x), len(ref))
    return snr_db(x[:n], ref[:n])


def main() -> int:
    config = Config()
    assert config.cache_dir is not None
    decoder = next((config.cache_dir / "kokoro-cut").glob("*.decoder.onnx"))
    snake = next((config.cache_dir / "native").glob("snake-*.so"), None)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    if snake is not None:
        opts.register_custom_ops_library(str(snake))
    whole = ort.InferenceSession(str(decoder), opts, providers=["CPUExecutionProvider"])
    rewritten = ort.InferenceSession(weighted(onnx.load(str(decoder))).SerializeToString(), opts,
                                     providers=["CPUExecutionProvider"])
    registry = VoiceRegistry.discover(config.models_dir, config.cache_dir, threads=2)
    engine = registry.engines["kokoro"]
    engine.load()
    print(f"host: {latency.cpu_model()}; host probe (latency.py probe_ms) {latency.probe_ms():.0f} ms")
    print("text | frames / cut at | ones (floor) | cut | last 6 weighted | last 2 | deep tail 4 | 8 | ms whole / cut")
    for voice_id, lang, text in CASES:
        voice = registry.get(voice_id)
        phonemes = engine.phonemize(text, voice, lang)
        tokens = [engine._get_vocab()[ch] for ch in phonemes]
        row = engine._style(voice.speaker)[len(tokens) - 1][np.newaxis, :]
        feeds = {"tokens": np.array([[0, *tokens, 0]], np.int64), "style": row, "speed": np.array([1.0], np.float32)}
        d, feat, f0, en = engine._session.run(None, feeds)
        total = feat.shape[-1]
        feat, f0, en = drop_pad_frames(d, feat, f0, en)
        d = np.asarray(d).ravel().astype(np.int64)
        starts = np.concatenate(([0], np.cumsum(d[1:-1]))) + d[0] - _lead_dropped(d, total)
        last = next((i for i in range(len(phonemes) - 1, -1, -1) if phonemes[i] not in SILENT), 0)
        frames, per = feat.shape[-1], f0.shape[-1] // feat.shape[-1]
        stop = min(frames, int(starts[last + 1]) + TAIL)
        left_out = frames - stop

        def run(session, fe, f, e, w=None, row=row):  # type: ignore[no-untyped-def]
            extra = {} if w is None else {"tail_weight": w}
            return session.run(None, {FEATURES: fe, F0: f, ENERGY: e, "style": row, **extra})[0].ravel()

        t_whole, ref = best(lambda fe=feat, f=f0, e=en: run(whole, fe, f, e))
        a, b = silence_bounds(ref, 24000)
        ones = run(rewritten, feat, f0, en, np.ones((1, 1, frames), np.float32))
        cf, c0, ce = feat[..., :stop], f0[..., : stop * per], en[..., : stop * per]
        t_cut, cut = best(lambda fe=cf, f=c0, e=ce: run(whole, fe, f, e))
        cells = []
        for k in (TAIL, 2):
            w = np.ones((1, 1, stop), np.float32)
            w[..., stop - k:] = (k + left_out) / k
            cells.append(snr(run(rewritten, cf, c0, ce, w)[a:b], ref[a:b]) if left_out else float("nan"))
        for m in (4, 8):
            if left_out <= m:
                cells.append(float("nan"))
                continue
            w = np.ones((1, 1, stop + m), np.float32)
            w[..., stop:] = left_out / m
            joined = [np.concatenate([c, x[..., (frames - m) * k:]], -1) for c, x, k in ((cf, feat, 1), (c0, f0, per), (ce, en, per))]
            cells.append(snr(run(rewritten, *joined, w)[a:b], ref[a:b]))
        print(f"{text} | {frames} / {stop} | {snr(ones, ref):.1f} dB | {snr(cut[a:b], ref[a:b]):.1f} dB | "
              + " | ".join(f"{c:.1f} dB" for c in cells) + f" | {t_whole * 1000:.0f} / {t_cut * 1000:.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
