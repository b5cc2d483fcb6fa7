"""Kokoro v1.0 cut between its duration/prosody predictor and its decoder.

Kokoro pads every input with a token at each end, and its predictor gives those pads
long durations: about 0.25 s of silence before a unit and 0.6 s after it, which the
decoder generates at the same cost as speech (95 % of a run is the decoder) and
``trim_silence`` then throws away. That is up to two fifths of a short unit's
compute, and of its time to first audio. Cut after the predictor, the engine sees the
durations and drops the pads' frames (all but ``KEEP_PAD_FRAMES``) before decoding.

The cut is at the tensors where the predictor hands over to the decoder (found by
the research in ../shared/research/performance.md §6 and benchmarks/kokoro_split.py):
the aligned text features and the frame-rate F0 and energy curves; the durations are
a fourth output of the predictor. These are names in the one Kokoro export rtts uses,
whose sha256 is checked when it is assembled; any other graph is refused
(``CutError``) and then runs whole. Uncut, predictor then decoder give exactly the
audio of the whole model (tests/live/test_engines.py).

Made once by a child process (``python -m rtts.engines.kokoro_cut MODEL FIRST SECOND META``); see
``graph_cut``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rtts.engines.conv_gemm import product_kind
from rtts.engines.graph_cut import Cut, write_cut
from rtts.engines.kokoro_tensors import DURATIONS, ENERGY, F0, FEATURES

if TYPE_CHECKING:
    import onnx

__all__ = [
    "CUT", "DURATIONS", "ENERGY", "F0", "FEATURES", "KEEP_PAD_FRAMES", "SNAKE_CUT", "CutError", "cached_kokoro_cut", "cut_kokoro",
    "drop_pad_frames",
]

# Frames (25 ms each) of a pad kept on each side, so a word's onset and decay are not
# clipped; trim_silence then keeps its own short pad.
KEEP_PAD_FRAMES = 3

CUT = Cut(
    "rtts.engines.kokoro_cut",
    "kokoro-cut",
    ("predictor", "decoder"),
    uses=("rtts.engines.conv_gemm", "rtts.engines.instance_norm", "rtts.engines.cheaper_forms", "rtts.engines.graph_edit"),
    packages=("onnx",),
    variant=product_kind(),  # a cache dir moved to a CPU that computes differently cuts again
)
# The same cut with each Snake as one native op (``snake``), for an inference process that
# has the library (rtts/native): another recipe, so the two forms are kept apart.
SNAKE_CUT = Cut(
    "rtts.engines.snake_cut",
    "kokoro-cut",
    ("predictor", "decoder"),
    uses=("rtts.engines.snake", "rtts.engines.kokoro_cut", *CUT.uses),
    packages=("onnx",),
    variant=CUT.variant,
)


class CutError(ValueError):
    """The graph is not the Kokoro v1.0 export this cut was made for."""


def cut_kokoro(
    model: onnx.ModelProto, static: bool = False, as_exported: bool = False, native_snake: bool = False
) -> tuple[onnx.ModelProto, onnx.ModelProto, dict]:
    """Predictor and decoder of ``model``; with ``static``, the decoder's convolutions
    statically quantized where ``kokoro_quant`` says so. Unless ``as_exported``, the
    (other) quantized convolutions of both run as integer matrix products (``conv_gemm``:
    the same integers, about twice as fast) and their spelled-out instance
    normalizations as one kernel each (``instance_norm``); in the decoder, the Snakes'
    squares as products (``cheaper_forms``). With ``native_snake`` (and not
    ``as_exported``), the decoder's Snakes as one ``ai.rtts::Snake`` node each (``snake``),
    which only a session with rtts/native's library can run.

    ``static`` is off in the engine: it saved ~20 % of the decoder's time but failed the
    quality guard of issue 14 (English public sentences WER 0.037 -> 0.137, Mandarin P.808
    -0.09) and adds ~14 s and ~860 MB to the first cut; ``benchmarks/engine_cost.py
    static-convs`` measures it (docs/benchmarks.md)."""
    import onnx

    from rtts.engines.cheaper_forms import squares_as_products
    from rtts.engines.conv_gemm import gemm_convs
    from rtts.engines.instance_norm import fuse_instance_norms
    from rtts.engines.kokoro_quant import static_convs
    from onnx import helper

    graph = model.graph
    produced = {out for node in graph.node for out in node.output}
    missing = [name for name in (DURATIONS, FEATURES, F0, ENERGY) if name not in produced]
    inputs = {i.name for i in graph.input}
    if missing or not {"tokens", "style", "speed"} <= inputs or len(graph.output) != 1:
        raise CutError(f"not the Kokoro v1.0 graph this cut knows (missing {missing or 'inputs'})")
    known = {v.name for v in graph.value_info}
    for name in (DURATIONS, FEATURES, F0, ENERGY):
        if name not in known:  # the extractor names cut tensors from shape inference
            graph.value_info.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    extractor = onnx.utils.Extractor(model)
    predictor = extractor.extract_model(["tokens", "style", "speed"], [DURATIONS, FEATURES, F0, ENERGY])
    decoder = extractor.extract_model([FEATURES, F0, ENERGY, "style"], [graph.output[0].name])
    if {i.name for i in decoder.graph.input} != {FEATURES, F0, ENERGY, "style"}:
        raise CutError("the decoder would need more than the predictor's outputs and the style")
    meta: dict = {"outputs": [DURATIONS, FEATURES, F0, ENERGY]}
    if static:
        try:
            decoder, meta["static_convs"] = static_convs(decoder)
        except Exception as exc:  # an onnxruntime without the quantizer's cache; the ranges unreadable
            meta["static_error"] = f"{type(exc).__name__}: {exc}"  # the decoder as exported runs
    if not as_exported:
        meta["gemm_convs"] = len(gemm_convs(predictor)) + len(gemm_convs(decoder))
        meta["instance_norms"] = fuse_instance_norms(predictor) + fuse_instance_norms(decoder)
        meta["squares"] = squares_as_products(decoder)
        if native_snake:
            from rtts.engines.snake import snakes_as_ops

            meta["snakes"] = snakes_as_ops(decoder)
    return predictor, decoder, meta


def cached_kokoro_cut(model: Path, cache_dir: Path, native_snake: bool = False) -> tuple[Path, Path, dict]:
    """The kept predictor and decoder of ``model``, cut in a child process first if needed;
    with ``native_snake``, the decoder's Snakes as native ops (``SNAKE_CUT``)."""
    return (SNAKE_CUT if native_snake else CUT).cached(model, cache_dir, CutError)


def drop_pad_frames(
    durations: np.ndarray, features: np.ndarray, f0: np.ndarray, energy: np.ndarray, keep: int = KEEP_PAD_FRAMES
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The decoder's inputs without the pad tokens' frames, but ``keep`` on each side."""
    frames = features.shape[-1]
    per = f0.shape[-1] // frames if frames else 1  # F0 and energy run at twice the frame rate
    d = np.asarray(durations).ravel()
    lead = max(0, int(d[0]) - keep) if d.size else 0
    trail = max(0, int(d[-1]) - keep) if d.size > 1 else 0
    if lead + trail >= frames:
        return features, f0, energy
    stop = frames - trail
    return features[..., lead:stop], f0[..., lead * per : stop * per], energy[..., lead * per : stop * per]


if __name__ == "__main__":
    write_cut(sys.argv[1:], cut_kokoro, CutError)
