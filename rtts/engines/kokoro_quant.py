"""Kokoro's decoder with statically quantized convolutions.

The int8 export quantizes every convolution dynamically: DynamicQuantizeLinear measures
each activation at run time, and ConvInteger multiplies uint8 activations by uint8
weights (with a zero point), a slow kernel on x86; ConvInteger was 57 % of Kokoro's
time. With the activations' ranges known in advance (calibrated once on real sentences,
``models/calibrate_kokoro.py``, kept in ``kokoro_ranges.json`` beside this file), ONNX
Runtime's own quantizer turns a convolution into QuantizeLinear -> Conv(int8 weights,
per output channel) -> DequantizeLinear, which ONNX Runtime runs as one QLinearConv:
about 3x faster per convolution (../shared/research/bench/conv_kernels.py).

Not every convolution: a static one also rounds its *output* to 8 bits over a fixed
range, and that is heard in the generator's last, sample-rate stage (resblocks.3-5,
noise_res.1: DNSMOS P.808 -0.32 on the public sentences) and in the F0 and energy
convolutions (the pitch itself, 8 bits over the calibrated range: SNR against the float
model fell from 15 to 0 dB). Those stay dynamic; see docs/benchmarks.md.

Run by the Kokoro cut's child process (``kokoro_cut``), so the server never imports
``onnx`` or the quantizer; the cut's recipe covers this code, the ranges file and the
onnx and onnxruntime versions.
"""

from __future__ import annotations

import re
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnx

__all__ = ["RANGES", "STATIC", "calibrate", "float_convs", "static_convs"]

RANGES = Path(__file__).with_name("kokoro_ranges.json")
# The convolutions made static (names of the export's ConvInteger nodes): the decoder's
# frame-rate blocks and the generator's first (256-channel) stage.
STATIC = re.compile(r"/decoder/decoder/(encode|decode\.\d|asr_res)/|/generator/(resblocks\.[012]|noise_res\.0)/")


def static_convs(decoder: onnx.ModelProto, ranges: Path = RANGES) -> tuple[onnx.ModelProto, list[str]]:
    """``decoder`` with the convolutions ``STATIC`` names quantized statically over the
    calibrated ``ranges``; and their names."""
    import onnx

    names = float_convs(decoder, _wanted)
    with tempfile.TemporaryDirectory(prefix="rtts-kokoro-quant-") as tmp:
        out = Path(tmp) / "decoder.onnx"
        _quantize(decoder, out, names, ranges, None)
        return onnx.load(str(out)), names


def calibrate(decoder: onnx.ModelProto, feeds: Iterable[dict[str, np.ndarray]], ranges: Path) -> list[str]:
    """Measure the ranges of the ``STATIC`` convolutions' inputs and outputs over the
    decoder's inputs ``feeds`` (of real sentences) and write them to ``ranges``."""
    names = float_convs(decoder, _wanted)
    ranges.unlink(missing_ok=True)  # the quantizer would read it instead of calibrating
    with tempfile.TemporaryDirectory(prefix="rtts-kokoro-quant-") as tmp:
        _quantize(decoder, Path(tmp) / "decoder.onnx", names, ranges, _Reader(feeds))
    return names


def _wanted(name: str) -> bool:
    return STATIC.search(name) is not None


def _quantize(model: onnx.ModelProto, out: Path, names: list[str], ranges: Path, reader: object) -> None:
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    quantize_static(
        model,
        str(out),
        reader,  # type: ignore[arg-type]
        quant_format=QuantFormat.QDQ,  # fused into QLinearConv when the session is made
        op_types_to_quantize=["Conv"],
        nodes_to_quantize=names,
        per_channel=True,
        # uint8 activations, int8 weights: the u8s8 kernels (VNNI where the CPU has it).
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        calibrate_method=CalibrationMethod.MinMax,
        calibration_cache_path=str(ranges),
    )


class _Reader:
    """ONNX Runtime's CalibrationDataReader over decoder inputs."""

    def __init__(self, feeds: Iterable[dict[str, np.ndarray]]) -> None:
        self._feeds = iter(feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._feeds, None)


def float_convs(model: onnx.ModelProto, wanted: Callable[[str], bool] = lambda name: True) -> list[str]:
    """Rewrite the export's dynamically quantized convolutions as float Conv, in place.

    Each ``DynamicQuantizeLinear -> ConvInteger [-> Add(quantized bias)] -> Cast -> Mul(scale)``
    whose ConvInteger's name ``wanted`` accepts becomes one ``Conv(x, w·scale, bias)``
    named like the ConvInteger without its ``_quant`` suffix (weights dequantized once;
    the same values the int8 graph multiplies by). Returns the new nodes' names.
    """
    from onnx import helper
    from onnx import numpy_helper as nh

    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    consumers: dict[str, list] = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            consumers[name].append(node)
    replace, drop, added, names = {}, set(), [], []
    for conv in [n for n in graph.node if n.op_type == "ConvInteger" and wanted(n.name)]:
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
        name = conv.name.removesuffix("_quant")
        added.append(nh.from_array(((w - zero) * w_scale).astype(np.float32), name + "/W"))
        new = helper.make_node("Conv", [x, name + "/W", *([bias] if bias else [])], [mul.output[0]], name=name)
        new.attribute.extend(conv.attribute)
        replace[id(mul)] = new
        drop.update(id(n) for n in chain)
        names.append(name)
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
    return names
